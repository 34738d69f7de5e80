// `ferry bench`'s loop: setup, the flag probe, the interleaved runs, the results file.
#include "apps/ferry/bench/bench_runner.hpp"

#include <fmt/format.h>
#include <unistd.h>

#include <chrono>
#include <ctime>
#include <fstream>
#include <map>
#include <thread>

#include "apps/ferry/bench/bench_process.hpp"
#include "io/errors.hpp"

namespace ferry::bench {

namespace fs = std::filesystem;

namespace {

std::string utc_now() {
  const std::time_t t = std::time(nullptr);
  char buf[32];
  std::strftime(buf, sizeof buf, "%Y-%m-%dT%H:%M:%SZ", std::gmtime(&t));
  return buf;
}

std::string first_line_of(const fs::path& file, const std::string& prefix) {
  std::ifstream f(file);
  for (std::string line; std::getline(f, line);)
    if (line.rfind(prefix, 0) == 0) return line.substr(line.find(':') + 1);
  return "";
}

// What the numbers were measured on; load average because this machine may be shared.
nlohmann::json host_info() {
  char name[256] = {};
  ::gethostname(name, sizeof name - 1);
  double load[3] = {};
  ::getloadavg(load, 3);
  std::string cpu = first_line_of("/proc/cpuinfo", "model name");
  if (auto p = cpu.find_first_not_of(' '); p != std::string::npos) cpu = cpu.substr(p);
  return {{"hostname", name},
          {"cpu", cpu},
          {"cores", std::thread::hardware_concurrency()},
          {"loadavg", {load[0], load[1], load[2]}}};
}

// What the report needs to know of each arm beyond its runs (skipped arms have none).
nlohmann::json arms_json(const Suite& s) {
  nlohmann::json out = nlohmann::json::array();
  for (size_t i = 0; i < s.arms.size(); ++i) {
    const Arm& a = s.arms[i];
    out.push_back({{"tag", a.tag}, {"group", a.group}, {"series", a.series}, {"mode", a.mode}, {"n", a.n},
                   {"drafted", a.drafted()}, {"draft", a.draft}, {"reference", s.reference_of(a.group) == i},
                   {"cache_experts", a.cache_experts}, {"host_pool", a.host_pool}});
  }
  return out;
}

class Runner {
 public:
  Runner(const Suite& s, const RunnerOptions& o) : s_(s), o_(o) {
    dir_ = o.out;
    dir_ += ".runs";
  }
  nlohmann::json run();

 private:
  void log(const std::string& line) const {
    if (o_.log) *o_.log << line << std::endl;
  }
  void setup();
  void probe();
  void run_slot(const Slot& slot, size_t order, size_t total);
  nlohmann::json attempt(const Arm& a, const Slot& slot, const fs::path& stem, double& steady);
  std::string reference_file(const Arm& a);
  void write() const;

  const Suite& s_;
  const RunnerOptions& o_;
  fs::path dir_;
  std::set<std::string> known_;
  std::map<std::string, std::string> ref_files_;  // group -> token file of its reference's first run
  nlohmann::json results_;
};

void Runner::setup() {
  for (const SetupStep& st : s_.setup) {
    if (fs::exists(st.creates)) {
      log("setup: " + st.creates + " exists");
      continue;
    }
    log("setup: " + command_line(o_.exe, st.run));
    if (o_.dry_run) continue;
    const auto t0 = std::chrono::steady_clock::now();
    const fs::path stem = dir_ / fmt::format("setup-{}", &st - s_.setup.data());
    ProcessResult r = run_process(o_.exe, st.run, stem.string() + ".out", stem.string() + ".err");
    if (!r.ok() || !fs::exists(st.creates))
      throw Error(fmt::format("suite setup step '{}' failed ({}): {}", command_line(o_.exe, st.run), r.describe(),
                              r.err.substr(r.err.size() > 2000 ? r.err.size() - 2000 : 0)));
    const double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    results_["setup"].push_back({{"creates", st.creates}, {"command", command_line(o_.exe, st.run)}, {"wall", secs}});
  }
}

// Which flags this `ferry run` knows, so an arm using a feature not built in yet is reported as such.
void Runner::probe() {
  ProcessResult r = run_process(o_.exe, {"run", "--help"}, dir_ / "run-help.out", dir_ / "run-help.err");
  known_ = help_flags(r.out + r.err);
  for (const Arm& a : s_.arms) {
    const auto missing = missing_flags(run_args(a, "x", "x"), known_);
    if (missing.empty()) continue;
    const std::string why = "unsupported flag " + fmt::format("{}", fmt::join(missing, ", ")) +
                            std::string(missing.size() > 1 ? ": this ferry run does not list them" : ": this ferry run does not list it") + " in --help";
    results_["unsupported"][a.tag] = why;
    log(fmt::format("arm {}: {}{}", a.tag, why, o_.skip_unsupported ? " (skipped)" : ""));
  }
}

std::string Runner::reference_file(const Arm& a) {
  if (!a.uses_reference_file()) return "";
  auto it = ref_files_.find(a.group);
  if (it == ref_files_.end())
    throw Error("the reference arm '" + s_.arms[s_.reference_of(a.group)].tag + "' has no successful run to replay");
  return it->second;
}

nlohmann::json Runner::attempt(const Arm& a, const Slot& slot, const fs::path& stem, double& steady) {
  const std::string hash = stem.string() + ".hash";
  const auto args = run_args(a, hash, reference_file(a));
  const double timeout = a.timeout_s;
  ProcessResult p = run_process(o_.exe, args, stem.string() + ".out", stem.string() + ".err", timeout);
  nlohmann::json rec = {{"tag", a.tag}, {"group", a.group}, {"n", a.n}};
  if (p.ok()) {
    const auto brace = p.out.rfind("\n{");
    try {
      rec = run_record(a, nlohmann::json::parse(p.out.substr(brace == std::string::npos ? 0 : brace + 1)));
      rec["ok"] = true;
    } catch (const nlohmann::json::exception& e) {
      rec["ok"] = false;
      rec["error"] = std::string("its --json output is not JSON: ") + e.what();
    }
  } else {
    rec["ok"] = false;
    const auto it = results_.find("unsupported");
    const bool unsupported = it != results_.end() && it->contains(a.tag);
    const std::string tail = p.err.substr(p.err.size() > 600 ? p.err.size() - 600 : 0);
    rec["error"] = unsupported ? (*it)[a.tag].get<std::string>() + " (" + p.describe() + ")"
                               : p.describe() + ": " + tail;
  }
  rec["repeat"] = slot.repeat;
  rec["wall"] = p.wall_s;
  rec["command"] = command_line(o_.exe, args);
  rec["trace_hash"] = hash;
  rec["stdout"] = stem.string() + ".out";
  rec["stderr"] = stem.string() + ".err";
  steady = rec.value("steady", nlohmann::json()).is_number() ? rec["steady"].get<double>() : 0.0;
  return rec;
}

void Runner::run_slot(const Slot& slot, size_t order, size_t total) {
  const Arm& a = s_.arms[slot.arm];
  const fs::path stem = dir_ / fmt::format("{:03}-{}-r{}", order + 1, a.tag, slot.repeat + 1);
  double steady = 0;
  nlohmann::json rec;
  try {
    rec = attempt(a, slot, stem, steady);
  } catch (const Error& e) {
    rec = {{"tag", a.tag}, {"group", a.group}, {"n", a.n}, {"repeat", slot.repeat}, {"ok", false}, {"error", e.what()}};
  }
  rec["order"] = order;
  const bool is_ref = s_.reference_of(a.group) == slot.arm;
  if (is_ref && rec["ok"] == true && !ref_files_.count(a.group)) {
    const auto& run = rec["run"];
    if (run.contains("prompt_ids")) {
      nlohmann::json ids = run["prompt_ids"];
      for (const auto& id : run.value("ids", nlohmann::json::array())) ids.push_back(id);
      const fs::path f = dir_ / (a.group + "-reference-ids.json");
      std::ofstream(f) << nlohmann::json{{"ids", ids}}.dump() << '\n';
      ref_files_[a.group] = f.string();
    }
  }
  log(rec["ok"] == true ? fmt::format("[{}/{}] {} r{}: steady {:.2f} tok/s, wall {:.2f} s", order + 1, total, a.tag,
                                      slot.repeat + 1, steady, rec["wall"].get<double>())
                        : fmt::format("[{}/{}] {} r{}: FAILED: {}", order + 1, total, a.tag, slot.repeat + 1,
                                      rec["error"].get<std::string>()));
  results_["runs"].push_back(rec);
}

void Runner::write() const {
  std::ofstream f(o_.out);
  f << results_.dump(1) << '\n';
  if (!f) throw Error("cannot write results file " + o_.out.string());
}

nlohmann::json Runner::run() {
  if (!o_.dry_run) fs::create_directories(dir_);
  results_ = {{"suite", s_.name},  {"suite_file", s_.file.string()}, {"description", s_.description},
              {"date", utc_now()}, {"host", host_info()},           {"command", o_.command},
              {"exe", o_.exe.string()}, {"skip_unsupported", o_.skip_unsupported},
              {"arms", arms_json(s_)}, {"runs", nlohmann::json::array()}};
  setup();
  const auto order = interleave(s_, o_.repeats);
  if (o_.dry_run) {
    for (size_t i = 0; i < order.size(); ++i) {
      const Arm& a = s_.arms[order[i].arm];
      log(fmt::format("[{}/{}] {} r{}: {}", i + 1, order.size(), a.tag, order[i].repeat + 1,
                      command_line(o_.exe, run_args(a, "RUN.hash", a.uses_reference_file() ? "REFERENCE-IDS.json" : ""))));
    }
    return results_;
  }
  probe();
  for (size_t i = 0; i < order.size(); ++i) {
    if (o_.skip_unsupported && results_.contains("unsupported") && results_["unsupported"].contains(s_.arms[order[i].arm].tag))
      continue;
    run_slot(order[i], i, order.size());
    write();
  }
  check_identity(s_, results_);
  results_["host"]["loadavg_end"] = host_info()["loadavg"];
  write();
  return results_;
}

}  // namespace

nlohmann::json run_suite(const Suite& s, const RunnerOptions& opts) { return Runner(s, opts).run(); }

}  // namespace ferry::bench
