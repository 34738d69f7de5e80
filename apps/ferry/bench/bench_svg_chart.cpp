#include "apps/ferry/bench/bench_svg_chart.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>

namespace ferry::bench {

namespace {

constexpr double W = 760, H = 440, L = 70, R = 200, T = 40, B = 70;  // canvas and margins (px)
constexpr double PW = W - L - R, PH = H - T - B;
const char* const kColours[] = {"#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd",
                                "#8c564b", "#e377c2", "#7f7f7f", "#bcbd22", "#17becf"};
const char* colour(size_t i) { return kColours[i % 10]; }

// A round step giving about 5 ticks over [0, hi].
double tick_step(double hi) {
  if (hi <= 0) return 1;
  const double raw = hi / 5, mag = std::pow(10.0, std::floor(std::log10(raw)));
  for (double m : {1.0, 2.0, 2.5, 5.0, 10.0})
    if (raw <= m * mag) return m * mag;
  return 10 * mag;
}

std::string num_label(double v) { return std::fabs(v) >= 100 || v == std::floor(v) ? fmt::format("{:.0f}", v) : fmt::format("{:.3g}", v); }

}  // namespace

std::string svg_escape(const std::string& s) {
  std::string o;
  for (char c : s) {
    if (c == '<') o += "&lt;";
    else if (c == '>') o += "&gt;";
    else if (c == '&') o += "&amp;";
    else if (c == '"') o += "&quot;";
    else o += c;
  }
  return o;
}

SvgChart::SvgChart(std::string title, std::string x_label, std::string y_label)
    : title_(std::move(title)), xl_(std::move(x_label)), yl_(std::move(y_label)) {}

void SvgChart::add_line(const std::string& name, std::vector<Point> pts) {
  std::sort(pts.begin(), pts.end(), [](const Point& a, const Point& b) { return a.x < b.x; });
  lines_.push_back({name, std::move(pts), false});
}

void SvgChart::add_hline(const std::string& name, double y) { lines_.push_back({name, {{0, y, y, y}}, true}); }

void SvgChart::add_bars(std::vector<std::string> labels, std::vector<std::vector<double>> stacks,
                        std::vector<std::string> names, std::vector<double> lo, std::vector<double> hi,
                        std::vector<int> colour) {
  labels_ = std::move(labels);
  stacks_ = std::move(stacks);
  names_ = std::move(names);
  lo_ = std::move(lo);
  hi_ = std::move(hi);
  colour_ = std::move(colour);
}

std::string SvgChart::axes(double x0, double x1, double y1, bool categorical) const {
  std::string s = fmt::format(R"(<line x1="{}" y1="{}" x2="{}" y2="{}" stroke="black"/>)", L, T + PH, L + PW, T + PH);
  s += fmt::format(R"(<line x1="{}" y1="{}" x2="{}" y2="{}" stroke="black"/>)", L, T, L, T + PH);
  const double ys = tick_step(y1);
  for (double v = 0; v <= y1 + 1e-9; v += ys) {
    const double y = T + PH - v / y1 * PH;
    s += fmt::format(R"(<line x1="{}" y1="{:.1f}" x2="{}" y2="{:.1f}" stroke="#ddd"/>)", L, y, L + PW, y);
    s += fmt::format(R"(<text x="{}" y="{:.1f}" text-anchor="end" font-size="11">{}</text>)", L - 6, y + 4, num_label(v));
  }
  if (!categorical) {
    const double xs = tick_step(x1 - x0);
    for (double v = std::ceil(x0 / xs) * xs; v <= x1 + 1e-9; v += xs) {
      const double x = L + (v - x0) / (x1 - x0) * PW;
      s += fmt::format(R"(<text x="{:.1f}" y="{}" text-anchor="middle" font-size="11">{}</text>)", x, T + PH + 16, num_label(v));
    }
  }
  s += fmt::format(R"(<text x="{}" y="{}" text-anchor="middle" font-size="12">{}</text>)", L + PW / 2, H - 12, svg_escape(xl_));
  s += fmt::format(R"~(<text x="14" y="{}" text-anchor="middle" font-size="12" transform="rotate(-90 14 {})">{}</text>)~",
                   T + PH / 2, T + PH / 2, svg_escape(yl_));
  return s;
}

std::string SvgChart::lines(double x0, double x1, double y1) const {
  std::string s;
  auto px = [&](double x) { return L + (x1 > x0 ? (x - x0) / (x1 - x0) : 0.5) * PW; };
  auto py = [&](double y) { return T + PH - y / y1 * PH; };
  for (size_t i = 0; i < lines_.size(); ++i) {
    const Line& l = lines_[i];
    if (l.dashed) {
      s += fmt::format(R"(<line x1="{}" y1="{:.1f}" x2="{}" y2="{:.1f}" stroke="{}" stroke-dasharray="6 4"/>)", L,
                       py(l.pts[0].y), L + PW, py(l.pts[0].y), colour(i));
      continue;
    }
    std::string path;
    for (const Point& p : l.pts) path += fmt::format("{:.1f},{:.1f} ", px(p.x), py(p.y));
    s += fmt::format(R"(<polyline points="{}" fill="none" stroke="{}" stroke-width="2"/>)", path, colour(i));
    for (const Point& p : l.pts) {
      s += fmt::format(R"(<line x1="{0:.1f}" y1="{1:.1f}" x2="{0:.1f}" y2="{2:.1f}" stroke="{3}"/>)", px(p.x), py(p.lo), py(p.hi), colour(i));
      s += fmt::format(R"(<circle cx="{:.1f}" cy="{:.1f}" r="3.5" fill="{}"/>)", px(p.x), py(p.y), colour(i));
    }
  }
  return s;
}

std::string SvgChart::bars(double y1) const {
  std::string s;
  const double slot = PW / std::max<size_t>(labels_.size(), 1), bw = slot * 0.6;
  auto py = [&](double y) { return T + PH - y / y1 * PH; };
  for (size_t i = 0; i < labels_.size(); ++i) {
    const double x = L + slot * i + (slot - bw) / 2;
    double base = 0;
    for (size_t k = 0; k < stacks_[i].size(); ++k) {
      const double v = stacks_[i][k];
      const size_t c = colour_.empty() ? k : static_cast<size_t>(colour_[i]);
      s += fmt::format(R"(<rect x="{:.1f}" y="{:.1f}" width="{:.1f}" height="{:.1f}" fill="{}"/>)", x, py(base + v), bw,
                       py(base) - py(base + v), colour(c));
      base += v;
    }
    if (i < lo_.size() && i < hi_.size())
      s += fmt::format(R"(<line x1="{0:.1f}" y1="{1:.1f}" x2="{0:.1f}" y2="{2:.1f}" stroke="black"/>)", x + bw / 2, py(lo_[i]), py(hi_[i]));
    s += fmt::format(R"~(<text x="{0:.1f}" y="{1}" font-size="10" text-anchor="end" transform="rotate(-35 {0:.1f} {1})">{2}</text>)~",
                     x + bw / 2, T + PH + 14, svg_escape(labels_[i]));
  }
  return s;
}

std::string SvgChart::legend() const {
  std::string s;
  double y = T + 10;
  auto entry = [&](const std::string& name, size_t c) {
    s += fmt::format(R"(<rect x="{}" y="{:.1f}" width="12" height="12" fill="{}"/>)", W - R + 12, y - 10, colour(c));
    s += fmt::format(R"(<text x="{}" y="{:.1f}" font-size="11">{}</text>)", W - R + 30, y, svg_escape(name));
    y += 18;
  };
  for (size_t i = 0; i < lines_.size(); ++i) entry(lines_[i].name, i);
  for (size_t k = 0; k < names_.size(); ++k) entry(names_[k], k);
  for (const auto& n : notes_) {
    s += fmt::format(R"(<text x="{}" y="{:.1f}" font-size="10" fill="#555">{}</text>)", W - R + 12, y + 6, svg_escape(n));
    y += 14;
  }
  return s;
}

std::string SvgChart::render() const {
  double x0 = 1e300, x1 = -1e300, y1 = 0;
  for (const auto& l : lines_)
    for (const auto& p : l.pts) {
      if (!l.dashed) x0 = std::min(x0, p.x), x1 = std::max(x1, p.x);
      y1 = std::max({y1, p.y, p.hi});
    }
  for (size_t i = 0; i < stacks_.size(); ++i) {
    double sum = 0;
    for (double v : stacks_[i]) sum += v;
    y1 = std::max({y1, sum, i < hi_.size() ? hi_[i] : 0.0});
  }
  if (x0 > x1) x0 = 0, x1 = 1;
  if (x0 == x1) x0 -= 1, x1 += 1;
  x0 = std::min(x0, 0.0);
  y1 = y1 > 0 ? y1 * 1.1 : 1;
  std::string s = fmt::format(R"(<svg xmlns="http://www.w3.org/2000/svg" width="{}" height="{}" font-family="sans-serif">)", W, H);
  s += fmt::format(R"(<rect width="100%" height="100%" fill="white"/><text x="{}" y="22" font-size="15" font-weight="bold">{}</text>)",
                   L, svg_escape(title_));
  s += axes(x0, x1, y1, !labels_.empty()) + lines(x0, x1, y1) + bars(y1) + legend();
  if (lines_.empty() && labels_.empty())
    s += fmt::format(R"(<text x="{}" y="{}" text-anchor="middle" font-size="14" fill="#555">no data</text>)", L + PW / 2, T + PH / 2);
  return s + "</svg>\n";
}

}  // namespace ferry::bench
