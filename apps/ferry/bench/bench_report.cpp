#include "apps/ferry/bench/bench_report.hpp"

#include <fmt/format.h>

#include <algorithm>

#include "io/errors.hpp"

namespace ferry::bench {

namespace {

double num(const nlohmann::json& j, const char* key) {
  const auto it = j.find(key);
  return it != j.end() && it->is_number() ? it->get<double>() : 0.0;
}

ArmSummary arm_from(const nlohmann::json& a) {
  ArmSummary s;
  s.tag = a.value("tag", "");
  s.group = a.value("group", s.tag);
  s.series = a.value("series", "plain");
  s.mode = a.value("mode", "raw");
  s.draft = a.value("draft", "");
  s.cache_experts = a.value("cache_experts", "");
  s.n = a.value("n", int64_t{0});
  s.drafted = a.value("drafted", false);
  s.reference = a.value("reference", false);
  return s;
}

void add_identity(ArmSummary& s, const nlohmann::json& run, int64_t& min_over) {
  const auto it = run.find("identity");
  if (it == run.end()) return;
  if (!it->value("identical", false)) {
    if (s.identical) s.identity = fmt::format("r{}: {}", run.value("repeat", 0) + 1, it->value("text", ""));
    s.identical = false;
  } else {
    min_over = std::min(min_over, it->value("over", int64_t{0}));
  }
}

void fill_runs(ArmSummary& s, const nlohmann::json& runs) {
  std::vector<double> steady, wall, gen, prompt, wait;
  std::map<std::string, std::vector<double>> bpt;
  double accepted = 0, drafts = 0;
  int64_t min_over = INT64_MAX;
  for (const auto& r : runs) {
    if (r.value("tag", "") != s.tag) continue;
    if (!r.value("ok", false)) {
      if (s.failed++ == 0) s.error = r.value("error", "failed");
      continue;
    }
    ++s.ok;
    steady.push_back(num(r, "steady"));
    wall.push_back(num(r, "wall"));
    gen.push_back(num(r, "generated"));
    prompt.push_back(num(r, "prompt_s"));
    if (r.contains("layer_wait_s")) wait.push_back(num(r, "layer_wait_s"));
    accepted += num(r, "accepted");
    drafts += num(r, "drafts");
    if (auto b = r.find("bytes_per_token"); b != r.end())
      for (const auto& [tier, v] : b->items()) bpt[tier].push_back(v.get<double>());
    add_identity(s, r, min_over);
  }
  s.steady = stat_of(steady);
  s.wall = stat_of(wall);
  s.generated = stat_of(gen);
  s.prompt_s = stat_of(prompt);
  if (!wait.empty()) s.layer_wait_s = stat_of(wait).median;
  if (drafts > 0) s.acceptance = accepted / drafts;
  for (auto& [tier, v] : bpt) s.bytes_per_token[tier] = stat_of(v).median;
  if (s.identical && min_over != INT64_MAX) s.identity = fmt::format("identical over {}", min_over);
  if (s.ok == 0) s.identical = false;
}

void set_ratios(std::vector<ArmSummary>& arms, const std::string& baseline) {
  for (auto& a : arms) {
    const ArmSummary* base = nullptr;
    for (const auto& b : arms)
      if (baseline.empty() ? (b.group == a.group && b.reference) : b.tag == baseline) base = &b;
    if (!base || base->steady.count == 0 || base->steady.median <= 0 || a.steady.count == 0) continue;
    a.ratio = a.steady.median / base->steady.median;
    a.baseline = base->tag;
  }
}

}  // namespace

Stat stat_of(std::vector<double> v) {
  Stat s;
  if (v.empty()) return s;
  std::sort(v.begin(), v.end());
  s.count = static_cast<int>(v.size());
  s.min = v.front();
  s.max = v.back();
  const size_t m = v.size() / 2;
  s.median = v.size() % 2 ? v[m] : (v[m - 1] + v[m]) / 2;
  return s;
}

std::vector<ArmSummary> summarize(const nlohmann::json& results, const std::string& baseline) {
  std::vector<ArmSummary> arms;
  const auto& runs = results.value("runs", nlohmann::json::array());
  const auto& unsupported = results.value("unsupported", nlohmann::json::object());
  for (const auto& a : results.value("arms", nlohmann::json::array())) {
    ArmSummary s = arm_from(a);
    fill_runs(s, runs);
    if (s.ok + s.failed == 0 && unsupported.contains(s.tag)) s.error = "skipped: " + unsupported[s.tag].get<std::string>();
    arms.push_back(std::move(s));
  }
  if (!baseline.empty() && std::none_of(arms.begin(), arms.end(), [&](const ArmSummary& a) { return a.tag == baseline; }))
    throw ConfigError("--baseline '" + baseline + "': no arm of the results has this tag");
  set_ratios(arms, baseline);
  return arms;
}

namespace {

std::string stat_cells(const Stat& s, const char* fmt_spec) {
  if (s.count == 0) return "– | – | –";
  return fmt::format(fmt::runtime(std::string(fmt_spec) + " | " + fmt_spec + " | " + fmt_spec), s.median, s.min, s.max);
}

std::string tiers_cell(const ArmSummary& a) {
  std::string out;
  for (const auto& [tier, v] : a.bytes_per_token) out += fmt::format("{}{} {:.1f} MB", out.empty() ? "" : ", ", tier, v / 1e6);
  return out.empty() ? "–" : out;
}

}  // namespace

std::string render_table(const nlohmann::json& results, const std::vector<ArmSummary>& arms) {
  const auto& host = results.value("host", nlohmann::json::object());
  std::string out = fmt::format("suite {} | {} | {} ({} cores)\n\n", results.value("suite", "?"), results.value("date", "?"),
                                host.value("cpu", "?"), host.value("cores", 0));
  out += "| arm | group | mode | n | runs | steady tok/s median | min | max | × baseline | wall s median | "
         "acceptance | expert bytes/token | identity |\n";
  out += "|---|---|---|--:|--:|--:|--:|--:|--:|--:|--:|---|---|\n";
  for (const auto& a : arms) {
    const std::string runs = a.failed ? fmt::format("{} ok, {} failed", a.ok, a.failed) : std::to_string(a.ok);
    const std::string ratio = a.ratio ? fmt::format("{:.3f} ({})", *a.ratio, a.baseline) : "–";
    const std::string acc = a.acceptance ? fmt::format("{:.0f} %", 100 * *a.acceptance) : "–";
    std::string ident = a.identity.empty() ? "–" : a.identity;
    if (!a.error.empty() && a.ok == 0) ident = a.error.substr(0, 160);
    out += fmt::format("| {}{} | {} | {} | {} | {} | {} | {} | {} | {} | {} | {} |\n", a.tag, a.reference ? " (ref)" : "",
                       a.group, a.mode, a.n, runs, stat_cells(a.steady, "{:.2f}"), ratio,
                       a.wall.count ? fmt::format("{:.2f}", a.wall.median) : "–", acc, tiers_cell(a), ident);
  }
  return out;
}

}  // namespace ferry::bench
