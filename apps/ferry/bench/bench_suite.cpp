#include "apps/ferry/bench/bench_suite.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <fstream>
#include <set>

#include "io/errors.hpp"
#include "io/formats/json_fields.hpp"

namespace ferry::bench {

namespace fs = std::filesystem;

namespace {

const std::set<std::string> kSuiteKeys = {"name", "description", "repeats", "models_dir", "setup", "defaults", "arms"};
const std::set<std::string> kArmKeys = {"tag",  "group",   "reference", "model",  "prompt",    "prompt_file",
                                        "prompt_ids", "mode", "system", "n", "ctx", "temp", "top_p", "seed",
                                        "threads", "ignore_eos", "cache", "draft", "args", "repeats",
                                        "timeout_s", "series", "note"};
const std::set<std::string> kCacheKeys = {"ssd_streaming", "experts", "host_pool", "expert_dirs", "prefetch_router"};
const std::set<std::string> kDraftKeys = {"spec", "gate", "max", "cost_gate"};

// A typo ("prompt_fle") must not silently fall back to a default.
void check_keys(const JsonFields& f, const std::set<std::string>& allowed) {
  for (auto it = f.json().begin(); it != f.json().end(); ++it)
    if (!allowed.count(it.key())) {
      std::string list;
      for (const auto& k : allowed) list += (list.empty() ? "" : ", ") + k;
      f.fail(it.key(), "unknown field (known: " + list + ")");
    }
}

std::string substitute(std::string s, const std::string& key, const std::string& value) {
  for (size_t p = s.find(key); p != std::string::npos; p = s.find(key, p + value.size()))
    s.replace(p, key.size(), value);
  return s;
}

struct Paths {
  std::string models, suite_dir;
  std::string operator()(const std::string& s) const {
    return substitute(substitute(s, "{models}", models), "{suite_dir}", suite_dir);
  }
};

// "64" or 64 -> "64": capacities may be counts or sizes ("2GB"); `ferry run` parses them.
std::string str_or_int(const JsonFields& f, const std::string& key) {
  const auto* v = f.find(key);
  if (!v) return "";
  if (v->is_number_integer()) return std::to_string(v->get<int64_t>());
  return f.req_str(key);
}

void parse_cache(const JsonFields& f, Arm& a, const Paths& p) {
  check_keys(f, kCacheKeys);
  a.ssd_streaming = f.opt_bool("ssd_streaming", false);
  a.prefetch_router = f.opt_bool("prefetch_router", false);
  a.cache_experts = str_or_int(f, "experts");
  a.host_pool = str_or_int(f, "host_pool");
  for (const auto& d : f.opt_str_list("expert_dirs")) a.expert_dirs.push_back(p(d));
}

void parse_draft(const JsonFields& f, Arm& a, const Paths& p) {
  check_keys(f, kDraftKeys);
  a.draft = p(f.req_str("spec"));
  if (a.draft.empty()) f.fail("spec", "empty drafter spec (ngram, replay:FILE, qwen3:DIR)");
  if (const auto* g = f.find("gate")) a.draft_gate = g->is_number() ? fmt::format("{}", g->get<double>()) : f.req_str("gate");
  a.draft_max = f.opt_int("max", 0);
  if (a.draft_max < 0 || a.draft_max > 15) f.fail("max", fmt::format("{} is outside 1..15", a.draft_max));
  if (f.find("cost_gate")) a.draft_cost_gate = f.opt_bool("cost_gate", true) ? "on" : "off";
}

void parse_prompt(const JsonFields& f, Arm& a, const Paths& p) {
  a.prompt = f.opt_str("prompt", "");
  a.prompt_file = p(f.opt_str("prompt_file", ""));
  if (const auto* ids = f.find("prompt_ids")) {
    if (ids->is_string()) {
      a.prompt_ids = ids->get<std::string>();
    } else {
      for (int64_t id : f.req_int_list("prompt_ids")) {
        if (!a.prompt_ids.empty()) a.prompt_ids += ',';
        a.prompt_ids += std::to_string(id);
      }
    }
  }
  const int given = !a.prompt.empty() + !a.prompt_file.empty() + !a.prompt_ids.empty();
  if (given != 1) f.fail("prompt", "give exactly one of prompt, prompt_file, prompt_ids");
  if (!a.prompt_file.empty() && !fs::exists(a.prompt_file)) f.fail("prompt_file", "no such file: " + a.prompt_file);
}

Arm parse_arm(const JsonFields& f, const Paths& p) {
  check_keys(f, kArmKeys);
  Arm a;
  a.tag = f.req_str("tag");
  if (a.tag.empty() || a.tag.find_first_of("/ \t") != std::string::npos)
    f.fail("tag", "'" + a.tag + "' must be non-empty without spaces or '/' (it names files)");
  a.group = f.opt_str("group", a.tag);
  a.reference = f.opt_bool("reference", false);
  a.model = p(f.req_str("model"));
  parse_prompt(f, a, p);
  a.mode = f.opt_str("mode", "raw");
  if (a.mode != "raw" && a.mode != "chat") f.fail("mode", "'" + a.mode + "' is not raw or chat");
  a.system = f.opt_str("system", "");
  a.n = f.req_int("n");
  if (a.n < 1) f.fail("n", fmt::format("{} tokens: must be at least 1", a.n));
  a.ctx = f.opt_int("ctx", 0);
  if (a.ctx < 0) f.fail("ctx", "must not be negative");
  a.temp = f.maybe_num("temp");
  a.top_p = f.maybe_num("top_p");
  if (f.has("seed")) a.seed = static_cast<uint64_t>(f.req_int("seed"));
  a.threads = f.opt_int("threads", 0);
  a.ignore_eos = f.opt_bool("ignore_eos", true);
  if (auto c = f.maybe_obj("cache")) parse_cache(*c, a, p);
  if (auto d = f.maybe_obj("draft")) parse_draft(*d, a, p);
  for (const auto& s : f.opt_str_list("args")) a.args.push_back(p(s));
  a.repeats = f.opt_int("repeats", 0);
  if (a.repeats < 0) f.fail("repeats", "must not be negative");
  a.timeout_s = f.opt_num("timeout_s", 0);
  a.series = f.opt_str("series", a.drafted() ? "drafted" : "plain");
  return a;
}

SetupStep parse_setup(const JsonFields& f, const Paths& p) {
  check_keys(f, {"creates", "run", "note"});
  SetupStep s{p(f.req_str("creates")), {}};
  for (const auto& a : f.opt_str_list("run")) s.run.push_back(p(a));
  if (s.run.empty()) f.fail("run", "missing or empty: the ferry subcommand and its arguments");
  return s;
}

// The defaults object fills what an arm leaves out (an arm's own value wins, nested objects whole).
nlohmann::json with_defaults(const nlohmann::json& arm, const nlohmann::json* defaults) {
  if (!defaults || !arm.is_object()) return arm;
  nlohmann::json m = *defaults;
  for (auto it = arm.begin(); it != arm.end(); ++it) m[it.key()] = it.value();
  return m;
}

void check_groups(const Suite& s, const std::string& origin) {
  std::set<std::string> tags;
  for (size_t i = 0; i < s.arms.size(); ++i) {
    const Arm& a = s.arms[i];
    const std::string field = fmt::format("{}: field 'arms[{}].", origin, i);
    if (!tags.insert(a.tag).second) throw ConfigError(field + "tag': duplicate tag '" + a.tag + "'");
    size_t refs = 0;
    for (const Arm& b : s.arms) refs += b.group == a.group && b.reference;
    if (refs > 1) throw ConfigError(field + "reference': group '" + a.group + "' has more than one reference arm");
    const size_t r = s.reference_of(a.group);
    if (a.uses_reference_file() && r >= i)
      throw ConfigError(field + "draft.spec': '{reference}' needs the group's reference arm ('" + s.arms[r].tag +
                        "') listed before this arm and different from it");
  }
}

}  // namespace

int64_t Suite::repeats_of(const Arm& a, int64_t override_repeats) const {
  if (override_repeats > 0) return override_repeats;
  return a.repeats > 0 ? a.repeats : repeats;
}

size_t Suite::reference_of(const std::string& group) const {
  size_t first = arms.size();
  for (size_t i = 0; i < arms.size(); ++i) {
    if (arms[i].group != group) continue;
    if (arms[i].reference) return i;
    first = std::min(first, i);
  }
  return first;
}

Suite parse_suite(const nlohmann::json& j, const fs::path& file, const std::string& models_dir_override) {
  const std::string origin = file.string();
  JsonFields f(j, origin);
  check_keys(f, kSuiteKeys);
  Suite s;
  s.file = file;
  s.name = f.opt_str("name", file.stem().string());
  s.description = f.opt_str("description", "");
  s.repeats = f.opt_int("repeats", 3);
  if (s.repeats < 1) f.fail("repeats", fmt::format("{}: must be at least 1", s.repeats));
  s.models_dir = models_dir_override.empty() ? f.opt_str("models_dir", s.models_dir) : models_dir_override;
  const std::string dir = file.has_parent_path() ? file.parent_path().string() : ".";
  const Paths p{s.models_dir, dir};
  const auto* defaults = f.find("defaults");
  if (defaults && !defaults->is_object()) f.fail("defaults", "expected a JSON object");
  if (const auto* setup = f.find("setup")) {
    if (!setup->is_array()) f.fail("setup", "expected a list of {\"creates\", \"run\"} steps");
    for (size_t i = 0; i < setup->size(); ++i)
      s.setup.push_back(parse_setup(JsonFields((*setup)[i], origin, fmt::format("setup[{}].", i)), p));
  }
  const auto* arms = f.find("arms");
  if (!arms || !arms->is_array() || arms->empty()) f.fail("arms", "expected a non-empty list of arms");
  for (size_t i = 0; i < arms->size(); ++i) {
    const nlohmann::json merged = with_defaults((*arms)[i], defaults);
    s.arms.push_back(parse_arm(JsonFields(merged, origin, fmt::format("arms[{}].", i)), p));
  }
  check_groups(s, origin);
  return s;
}

Suite load_suite(const fs::path& file, const std::string& models_dir_override) {
  std::ifstream in(file);
  if (!in) throw ConfigError("cannot read suite file " + file.string());
  nlohmann::json j;
  try {
    j = nlohmann::json::parse(in);
  } catch (const nlohmann::json::exception& e) {
    throw ConfigError(file.string() + ": not valid JSON (" + e.what() + ")");
  }
  return parse_suite(j, file, models_dir_override);
}

std::vector<Slot> interleave(const Suite& s, int64_t override_repeats) {
  int64_t rounds = 0;
  for (const Arm& a : s.arms) rounds = std::max(rounds, s.repeats_of(a, override_repeats));
  std::vector<Slot> order;
  for (int64_t r = 0; r < rounds; ++r)
    for (size_t i = 0; i < s.arms.size(); ++i)
      if (r < s.repeats_of(s.arms[i], override_repeats)) order.push_back({i, r});
  return order;
}

std::vector<std::string> run_args(const Arm& a, const std::string& trace_hash, const std::string& reference_file) {
  std::vector<std::string> v = {"run", "-m", a.model};
  if (!a.prompt.empty()) v.insert(v.end(), {"-p", a.prompt});
  if (!a.prompt_file.empty()) v.insert(v.end(), {"-f", a.prompt_file});
  if (!a.prompt_ids.empty()) v.insert(v.end(), {"--prompt-ids", a.prompt_ids});
  v.insert(v.end(), {"-n", std::to_string(a.n)});
  if (a.ctx > 0) v.insert(v.end(), {"-c", std::to_string(a.ctx)});
  if (a.temp) v.insert(v.end(), {"--temp", fmt::format("{}", *a.temp)});
  if (a.top_p) v.insert(v.end(), {"--top-p", fmt::format("{}", *a.top_p)});
  if (a.seed) v.insert(v.end(), {"--seed", std::to_string(*a.seed)});
  if (a.threads > 0) v.insert(v.end(), {"-t", std::to_string(a.threads)});
  if (a.mode == "chat") v.push_back("--chat");
  if (a.mode == "chat" && !a.system.empty()) v.insert(v.end(), {"--system", a.system});
  if (a.ignore_eos) v.push_back("--ignore-eos");
  if (a.ssd_streaming) v.push_back("--ssd-streaming");
  if (a.prefetch_router) v.push_back("--prefetch-router");
  if (!a.cache_experts.empty()) v.insert(v.end(), {"--cache-experts", a.cache_experts});
  if (!a.host_pool.empty()) v.insert(v.end(), {"--host-pool", a.host_pool});
  for (const auto& d : a.expert_dirs) v.insert(v.end(), {"--expert-dir", d});
  if (a.drafted()) v.insert(v.end(), {"--draft", substitute(a.draft, "{reference}", reference_file)});
  if (!a.draft_gate.empty()) v.insert(v.end(), {"--draft-gate", a.draft_gate});
  if (a.draft_max > 0) v.insert(v.end(), {"--draft-max", std::to_string(a.draft_max)});
  if (!a.draft_cost_gate.empty()) v.insert(v.end(), {"--draft-cost-gate", a.draft_cost_gate});
  v.insert(v.end(), a.args.begin(), a.args.end());
  if (!trace_hash.empty()) v.insert(v.end(), {"--trace-hash", trace_hash});
  v.push_back("--json");
  return v;
}

}  // namespace ferry::bench
