// The per-run record of `ferry bench` and the identity pass over a results file.
#include <fmt/format.h>

#include <regex>

#include "apps/ferry/bench/bench_identity.hpp"
#include "apps/ferry/bench/bench_runner.hpp"
#include "io/errors.hpp"

namespace ferry::bench {

namespace {

// The published field names (DESIGN.md "Metrics"); drafter ones are null for a run without drafts.
const char* const kPublished[] = {"steady", "steady_s", "generated", "blocks", "accepted", "drafts", "full",
                                  "partial", "zero", "calls", "call_ms", "blk_tokens"};
const char* const kExtra[] = {"prompt_tokens", "prompt_s", "generation_tok_s", "load_s", "backend",
                              "layer_wait_s", "max_layer_wait_s", "acceptance", "hits"};

// `key` at the top level of j, else in its nested objects, depth first (arrays are per-drive or
// per-layer detail, not totals, so they are not searched).
const nlohmann::json* lookup(const nlohmann::json& j, const std::string& key) {
  if (!j.is_object()) return nullptr;
  if (auto it = j.find(key); it != j.end()) return &*it;
  for (const auto& [k, v] : j.items())
    if (v.is_object())
      if (const auto* found = lookup(v, key)) return found;
  return nullptr;
}

// Expert bytes per tier: an object of numbers named "bytes" ({"device": .., "host": .., "disk": ..}).
void add_tier_bytes(nlohmann::json& rec, const nlohmann::json& run) {
  const auto* b = lookup(run, "bytes");
  if (!b || !b->is_object()) return;
  nlohmann::json per_tok = nlohmann::json::object();
  const double gen = rec.value("generated", 0.0);
  for (const auto& [tier, v] : b->items())
    if (v.is_number() && gen > 0) per_tok[tier] = v.get<double>() / gen;
  rec["bytes"] = *b;
  rec["bytes_per_token"] = per_tok;
}

}  // namespace

nlohmann::json run_record(const Arm& a, const nlohmann::json& run) {
  nlohmann::json rec;
  rec["tag"] = a.tag;
  rec["group"] = a.group;
  rec["n"] = a.n;
  for (const char* k : kPublished) {
    const auto* v = lookup(run, k);
    rec[k] = v ? *v : nlohmann::json();
  }
  for (const char* k : kExtra)
    if (const auto* v = lookup(run, k)) rec[k] = *v;
  add_tier_bytes(rec, run);
  rec["run"] = run;
  return rec;
}

std::set<std::string> help_flags(const std::string& help) {
  static const std::regex flag("--[A-Za-z0-9][A-Za-z0-9-]*");
  std::set<std::string> out;
  for (auto it = std::sregex_iterator(help.begin(), help.end(), flag); it != std::sregex_iterator(); ++it)
    out.insert(it->str());
  return out;
}

std::vector<std::string> missing_flags(const std::vector<std::string>& args, const std::set<std::string>& known) {
  std::vector<std::string> out;
  if (known.empty()) return out;
  for (const auto& a : args)
    if (a.rfind("--", 0) == 0 && a.size() > 2 && !known.count(a)) out.push_back(a);
  return out;
}

namespace {

Identity identity_of(const nlohmann::json& run, const std::vector<TraceRow>& ref) {
  return compare_traces(ref, read_trace_hash(run.at("trace_hash").get<std::string>()));
}

void set_identity(nlohmann::json& run, const std::string& text) {
  run["identity"] = {{"identical", false}, {"text", text}};
}

}  // namespace

void check_identity(const Suite& s, nlohmann::json& results) {
  auto& runs = results["runs"];
  for (auto& run : runs) {
    if (!run.value("ok", false)) continue;
    const Arm& ref_arm = s.arms[s.reference_of(run["group"].get<std::string>())];
    const nlohmann::json* ref = nullptr;
    for (const auto& r : runs)
      if (r["tag"] == ref_arm.tag && r.value("ok", false) && (!ref || r["repeat"] < (*ref)["repeat"])) ref = &r;
    if (!ref) {
      set_identity(run, "no reference: every run of '" + ref_arm.tag + "' failed");
      continue;
    }
    try {
      Identity id = identity_of(run, read_trace_hash((*ref).at("trace_hash").get<std::string>()));
      run["identity"] = id.to_json();
      run["identity"]["reference"] = fmt::format("{} r{}", ref_arm.tag, (*ref)["repeat"].get<int64_t>() + 1);
    } catch (const Error& e) {
      set_identity(run, e.what());
    }
  }
}

}  // namespace ferry::bench
