// The plots of `ferry bench report --svg DIR`.
#include <fmt/format.h>

#include <fstream>
#include <map>
#include <set>

#include "apps/ferry/bench/bench_report.hpp"
#include "apps/ferry/bench/bench_svg_chart.hpp"
#include "io/errors.hpp"

namespace ferry::bench {

namespace fs = std::filesystem;

namespace {

SvgChart::Point point_of(double x, const Stat& s) { return {x, s.median, s.min, s.max}; }

// Median steady rate against -n, one line per series (plain, drafted, or the suite's own names).
SvgChart steady_by_length(const std::vector<ArmSummary>& arms) {
  SvgChart c("Steady decode rate by length", "tokens generated (-n)", "steady decode (tok/s): median, min-max");
  std::map<std::string, std::vector<SvgChart::Point>> series;
  for (const auto& a : arms)
    if (a.ok > 0) series[a.series + (a.mode == "chat" ? " (chat)" : "")].push_back(point_of(double(a.n), a.steady));
  for (auto& [name, pts] : series) c.add_line(name, pts);
  return c;
}

// Every group that has a drafted arm: its arms side by side, plain and drafted in two colours.
SvgChart drafter_on_off(const std::vector<ArmSummary>& arms) {
  SvgChart c("Drafter on / off", "", "steady decode (tok/s): median, min-max");
  std::set<std::string> groups;
  for (const auto& a : arms)
    if (a.drafted && a.ok > 0) groups.insert(a.group);
  std::vector<std::string> labels;
  std::vector<std::vector<double>> stacks;
  std::vector<double> lo, hi;
  std::vector<int> colours;
  for (const auto& a : arms) {
    if (a.ok == 0 || (!groups.empty() && !groups.count(a.group))) continue;
    labels.push_back(a.tag);
    stacks.push_back({a.steady.median});
    lo.push_back(a.steady.min);
    hi.push_back(a.steady.max);
    colours.push_back(a.drafted ? 1 : 0);
  }
  c.add_bars(labels, stacks, {"plain", "drafted"}, lo, hi, colours);
  if (groups.empty()) c.note("no drafted arm ran: plain arms only");
  return c;
}

// Expert bytes read per generated token, stacked by tier (device, host, disk...).
SvgChart bytes_by_tier(const std::vector<ArmSummary>& arms) {
  SvgChart c("Expert bytes per token by tier", "", "MB per token (median)");
  std::set<std::string> tiers;
  for (const auto& a : arms)
    for (const auto& [t, v] : a.bytes_per_token) tiers.insert(t);
  // The three tiers partition the bytes; other entries (e.g. streaming's "disk_demand", a part of
  // "disk") would count twice in a stack.
  std::vector<std::string> labels, names;
  for (const char* t : {"device", "host", "disk"})
    if (tiers.count(t)) names.push_back(t);
  if (names.empty()) names.assign(tiers.begin(), tiers.end());
  std::vector<std::vector<double>> stacks;
  for (const auto& a : arms) {
    if (a.bytes_per_token.empty()) continue;
    labels.push_back(a.tag);
    std::vector<double> st;
    for (const auto& t : names) st.push_back(a.bytes_per_token.count(t) ? a.bytes_per_token.at(t) / 1e6 : 0.0);
    stacks.push_back(st);
  }
  if (labels.empty()) {
    c.note("no arm reported expert bytes");
    c.note("(runs without --ssd-streaming)");
  } else {
    c.add_bars(labels, stacks, names);
  }
  return c;
}

// Drafted arms' steady rate against their measured acceptance, each group's plain reference dashed:
// where the points cross the dashed line, drafting starts to pay.
SvgChart acceptance_sweep(const std::vector<ArmSummary>& arms) {
  SvgChart c("Drafting: steady rate against acceptance", "accepted / drafted (%)", "steady decode (tok/s)");
  std::map<std::string, std::vector<SvgChart::Point>> by_group;
  for (const auto& a : arms)
    if (a.drafted && a.ok > 0 && a.acceptance) by_group[a.group].push_back(point_of(100 * *a.acceptance, a.steady));
  for (auto& [g, pts] : by_group) {
    c.add_line(g + " drafted", pts);
    for (const auto& a : arms)
      if (a.group == g && a.reference && a.ok > 0) c.add_hline(a.tag + " (plain)", a.steady.median);
  }
  return c;
}

fs::path write_svg(const fs::path& dir, const std::string& name, const SvgChart& c) {
  const fs::path p = dir / name;
  std::ofstream f(p);
  f << c.render();
  if (!f) throw Error("cannot write " + p.string());
  return p;
}

}  // namespace

std::vector<fs::path> write_plots(const std::vector<ArmSummary>& arms, const fs::path& dir) {
  fs::create_directories(dir);
  std::vector<fs::path> out = {write_svg(dir, "steady_by_length.svg", steady_by_length(arms)),
                               write_svg(dir, "drafter.svg", drafter_on_off(arms)),
                               write_svg(dir, "bytes_per_token.svg", bytes_by_tier(arms))};
  const bool any_acceptance = std::any_of(arms.begin(), arms.end(), [](const ArmSummary& a) { return a.acceptance.has_value(); });
  if (any_acceptance) out.push_back(write_svg(dir, "acceptance.svg", acceptance_sweep(arms)));
  return out;
}

}  // namespace ferry::bench
