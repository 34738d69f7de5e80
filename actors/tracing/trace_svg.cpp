// The plots of `ferry trace FILE --svg DIR`, written as plain SVG (no dependencies): per-drive
// throughput over time, the distribution of layer waits, and cache hit rates over time.
#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>

#include <fmt/format.h>

#include "actors/tracing/trace_summary.hpp"
#include "io/errors.hpp"

namespace ferry {
namespace {

constexpr double W = 760, H = 420, L = 70, R = 170, T = 40, B = 50;  // canvas and margins
const char* kColors[] = {"#1f77b4", "#d62728", "#2ca02c", "#ff7f0e", "#9467bd", "#8c564b", "#e377c2", "#17becf"};

struct Series {
  std::string name;
  std::vector<std::pair<double, double>> pts;
};

std::string esc(const std::string& s) {
  std::string o;
  for (char c : s) o += c == '<' ? "&lt;" : c == '>' ? "&gt;" : c == '&' ? "&amp;" : std::string(1, c);
  return o;
}

// An axis from 0 to a round top with ticks at a round step (1, 2, 2.5 or 5 x 10^n), about 5 of them.
struct Axis {
  double top = 1, step = 1;
};

Axis round_axis(double hi) {
  if (!(hi > 0)) return {};
  const double raw = hi / 5, mag = std::pow(10.0, std::floor(std::log10(raw)));
  double step = 10 * mag;
  for (double m : {1.0, 2.0, 2.5, 5.0})
    if (raw <= m * mag * (1 + 1e-9)) {
      step = m * mag;
      break;
    }
  return {std::ceil(hi / step - 1e-9) * step, step};
}

// Frame, title, axis labels and the round ticks of each axis.
std::string frame(const std::string& title, const std::string& xl, const std::string& yl, Axis x, Axis y) {
  std::string s = fmt::format(
      "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"{}\" height=\"{}\" font-family=\"sans-serif\" font-size=\"12\">\n"
      "<rect width=\"100%\" height=\"100%\" fill=\"white\"/>\n"
      "<text x=\"{}\" y=\"22\" font-size=\"15\" text-anchor=\"middle\">{}</text>\n"
      "<line x1=\"{}\" y1=\"{}\" x2=\"{}\" y2=\"{}\" stroke=\"black\"/><line x1=\"{}\" y1=\"{}\" x2=\"{}\" y2=\"{}\" stroke=\"black\"/>\n"
      "<text x=\"{}\" y=\"{}\" text-anchor=\"middle\">{}</text>\n"
      "<text x=\"16\" y=\"{}\" text-anchor=\"middle\" transform=\"rotate(-90 16 {})\">{}</text>\n",
      W, H, (L + W - R) / 2, esc(title), L, H - B, W - R, H - B, L, T, L, H - B, (L + W - R) / 2, H - 12, esc(xl),
      (T + H - B) / 2, (T + H - B) / 2, esc(yl));
  for (double v = 0; v <= x.top * (1 + 1e-9); v += x.step)
    s += fmt::format("<text x=\"{:.1f}\" y=\"{}\" text-anchor=\"middle\">{:g}</text>\n", L + (W - R - L) * v / x.top,
                     H - B + 16, v);
  for (double v = 0; v <= y.top * (1 + 1e-9); v += y.step) {
    const double fy = H - B - (H - B - T) * v / y.top;
    s += fmt::format("<text x=\"{}\" y=\"{:.1f}\" text-anchor=\"end\">{:g}</text>\n", L - 6, fy + 4, v);
    s += fmt::format("<line x1=\"{}\" y1=\"{:.1f}\" x2=\"{}\" y2=\"{:.1f}\" stroke=\"#ddd\"/>\n", L, fy, W - R, fy);
  }
  return s;
}

std::string line_chart(const std::string& title, const std::string& xl, const std::string& yl,
                       const std::vector<Series>& series) {
  double xmax = 1e-9, ymax = 1e-9;
  for (auto& s : series)
    for (auto [x, y] : s.pts) xmax = std::max(xmax, x), ymax = std::max(ymax, y);
  const Axis xa = round_axis(xmax), ya = round_axis(ymax);
  xmax = xa.top;
  ymax = ya.top;
  std::string o = frame(title, xl, yl, xa, ya);
  for (size_t i = 0; i < series.size(); ++i) {
    const char* color = kColors[i % 8];
    std::string pts;
    for (auto [x, y] : series[i].pts)
      pts += fmt::format("{:.1f},{:.1f} ", L + (W - R - L) * x / xmax, H - B - (H - B - T) * y / ymax);
    o += fmt::format("<polyline fill=\"none\" stroke=\"{}\" stroke-width=\"1.5\" points=\"{}\"/>\n", color, pts);
    o += fmt::format("<rect x=\"{}\" y=\"{}\" width=\"12\" height=\"12\" fill=\"{}\"/><text x=\"{}\" y=\"{}\">{}</text>\n",
                     W - R + 10, T + 18 * double(i), color, W - R + 26, T + 18 * double(i) + 10, esc(series[i].name));
  }
  return o + "</svg>\n";
}

std::string bar_chart(const std::string& title, const std::string& xl, const std::string& yl, double bin_w,
                      const std::vector<double>& counts) {
  const Axis ya = round_axis(std::max(1.0, *std::max_element(counts.begin(), counts.end())));
  const double ymax = ya.top;
  // The bars fill the x axis: its top is the last bin's edge, ticks at round multiples below it.
  const double xmax = bin_w * double(counts.size());
  Axis xa = round_axis(xmax);
  xa.top = xmax;
  std::string o = frame(title, xl, yl, xa, ya);
  const double bw = (W - R - L) / double(counts.size());
  for (size_t i = 0; i < counts.size(); ++i) {
    const double h = (H - B - T) * counts[i] / ymax;
    o += fmt::format("<rect x=\"{:.1f}\" y=\"{:.1f}\" width=\"{:.1f}\" height=\"{:.1f}\" fill=\"{}\"/>\n",
                     L + bw * double(i) + 1, H - B - h, std::max(bw - 2, 1.0), h, kColors[0]);
  }
  return o + "</svg>\n";
}

void write(const std::filesystem::path& p, const std::string& text, std::vector<std::string>& out) {
  std::ofstream f(p);
  f << text;
  if (!f) throw Error("cannot write " + p.string());
  out.push_back(p.string());
}

constexpr int kBins = 60;

}  // namespace

std::vector<std::string> write_trace_svgs(const TraceFile& tf, const TraceSummary& s, const std::string& out_dir) {
  std::error_code ec;
  std::filesystem::create_directories(out_dir, ec);
  if (ec) throw Error("cannot create " + out_dir + ": " + ec.message());
  const double span = std::max(s.span_s, 1e-6), bin = span / kBins;
  std::vector<std::string> out;
  // Per-drive throughput: bytes completed per time bin.
  std::vector<std::vector<double>> bytes(std::max<size_t>(s.drives.size(), 1), std::vector<double>(kBins, 0));
  std::vector<double> hits(kBins, 0), looks(kBins, 0);
  for (const auto& e : tf.events) {
    const auto b = std::min<size_t>(kBins - 1, static_cast<size_t>(double(e.t_ns()) * 1e-9 / bin));
    if (e.kind() == trace::READ_COMPLETED && e.dir() < bytes.size()) bytes[e.dir()][b] += double(e.bytes());
    if (e.kind() == trace::HIT) hits[b] += 1, looks[b] += 1;
    if (e.kind() == trace::MISS) looks[b] += 1;
  }
  std::vector<Series> drives;
  for (size_t d = 0; d < s.drives.size(); ++d) {
    Series x{s.drives[d].path, {}};
    for (int i = 0; i < kBins; ++i) x.pts.push_back({bin * (i + 0.5), bytes[d][size_t(i)] / bin / 1e6});
    drives.push_back(std::move(x));
  }
  write(std::filesystem::path(out_dir) / "drive_throughput.svg",
        line_chart("Per-drive read throughput", "time (s)", "MB/s", drives), out);
  // Layer-wait distribution: a histogram of every layer's wait for its last expert.
  const double wmax = s.waits_ms.empty() ? 1.0 : std::max(*std::max_element(s.waits_ms.begin(), s.waits_ms.end()), 1e-3);
  std::vector<double> hist(40, 0);
  for (double w : s.waits_ms) hist[std::min<size_t>(39, static_cast<size_t>(w / (wmax / 40)))] += 1;
  write(std::filesystem::path(out_dir) / "layer_wait.svg",
        bar_chart("Layer wait distribution", "wait for the last expert (ms)", "layer calls", wmax / 40, hist), out);
  // Host-pool hit rate per time bin (bins without lookups are skipped).
  Series hr{"host pool", {}};
  for (int i = 0; i < kBins; ++i)
    if (looks[size_t(i)] > 0) hr.pts.push_back({bin * (i + 0.5), 100 * hits[size_t(i)] / looks[size_t(i)]});
  write(std::filesystem::path(out_dir) / "hit_rate.svg", line_chart("Cache hit rate", "time (s)", "hit rate (%)", {hr}),
        out);
  return out;
}

}  // namespace ferry
