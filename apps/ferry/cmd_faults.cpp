// `ferry faults -m DIR [-n N]`: fault-injection runs. One plain run gives the reference: per position,
// the token and the FNV-1a hash of its logits. Then every scenario generates the same N tokens with
// the drafter on (a replay of the reference at 80% acceptance, so blocks of every kind run) while
// faults hit the drafter: its worker actor killed, its sidecar process killed (between calls and in
// the middle of one) or stopped (SIGSTOP) past the deadline, garbage answers, crashes, hangs, a
// sidecar that cannot start or speaks another protocol version. Each run's hashes are compared with
// the reference; the exit status is non-zero if any position differs. On a prepared model the storage
// scenarios follow (apps/ferry/faults_storage.hpp): drives that die, fail, slow down, return damaged
// bytes or vanish while the experts stream. `--only drafter|storage` runs one half.
#include <signal.h>
#include <unistd.h>

#include <CLI/CLI.hpp>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <random>
#include <thread>

#include "actors/drafter/drafter_bridge.hpp"
#include "actors/runtime/engine.hpp"
#include "apps/engine_cli/engine_cli.hpp"
#include "actors/runtime/runtime.hpp"
#include "apps/ferry/commands.hpp"
#include "apps/ferry/faults_storage.hpp"
#include "actors/runtime/prepared_model.hpp"
#include "io/errors.hpp"

namespace ferry::cli {
namespace {

struct FaultOptions {
  EngineOptions engine;  // the one engine option set; its drafter is the replay below (--draft refused)
  int64_t n = 128;
  uint64_t seed = 1;
  std::string only;  // "", "drafter" or "storage"
};

// What a scenario does: extra sidecar flags, another executable, and random faults from outside.
struct Scenario {
  std::string name;
  std::vector<std::string> sidecar_flags;
  std::string exe;  // "" = the real one
  double p_kill_sidecar = 0, p_stop_sidecar = 0, p_kill_actor = 0;
};

std::vector<Scenario> scenarios() {
  return {
      {"drafter on, no faults", {}, "", 0, 0, 0},
      {"kill sidecar process", {}, "", 0.15, 0, 0},
      {"SIGSTOP sidecar", {}, "", 0, 0.1, 0},
      {"kill drafter actor", {}, "", 0, 0, 0.15},
      {"garbage answers", {"--fault-garbage-every", "3"}, "", 0, 0, 0},
      {"sidecar crashes", {"--fault-exit-after", "4"}, "", 0, 0, 0},
      {"sidecar hangs", {"--fault-hang-after", "3"}, "", 0, 0, 0},
      {"exits before hello", {"--fault-exit-at-start"}, "", 0, 0, 0},
      {"cannot exec", {}, "/nonexistent/ferry-drafter", 0, 0, 0},
      {"protocol version 99", {"--protocol-version", "99"}, "", 0, 0, 0},
      {"all random faults", {}, "", 0.07, 0.04, 0.07},
  };
}

struct Row {
  std::string name;
  uint64_t faults = 0, fallbacks = 0, restarts = 0;
  int64_t blocks = 0, accepted = 0, mismatches = 0;
};

int64_t count_mismatches(const std::vector<GeneratedToken>& ref, const std::vector<GeneratedToken>& got) {
  int64_t bad = static_cast<int64_t>(std::max(ref.size(), got.size()) - std::min(ref.size(), got.size()));
  for (size_t i = 0; i < std::min(ref.size(), got.size()); ++i)
    bad += ref[i].id != got[i].id || ref[i].logits_hash != got[i].logits_hash || ref[i].pos != got[i].pos;
  return bad;
}

Row run_scenario(Runtime& rt, LoadedModel& m, const FaultOptions& o, const Scenario& sc,
                 const std::string& replay, std::span<const int32_t> prompt, const std::vector<GeneratedToken>& ref) {
  DrafterBridgeOptions bo;
  bo.sidecar = sidecar_for_spec("replay:" + replay + ",rate=0.8,seed=" + std::to_string(o.seed), 1, o.engine.draft.exe);
  if (!sc.exe.empty()) bo.sidecar.exe = sc.exe;
  bo.sidecar.args.insert(bo.sidecar.args.end(), sc.sidecar_flags.begin(), sc.sidecar_flags.end());
  bo.target = {m.tokenizer.get(), static_cast<int32_t>(m.cfg.vocab)};
  bo.deadline_ms = o.engine.draft.deadline_ms;
  bo.backoff_max_ms = 100;
  Row row{sc.name};
  std::mt19937_64 rng(o.seed * 7919 + std::hash<std::string>{}(sc.name));
  std::uniform_real_distribution<double> u(0, 1);
  DrafterClient client(rt, bo);
  client.wait_up(std::chrono::milliseconds(2000));
  // Before some calls: a fault, now or a few milliseconds into the call (from another thread).
  ProposeFn propose = [&](std::span<const int32_t> h, int k, float gate) {
    std::thread later;
    const int32_t pid = client.status().pid;
    const double r = u(rng);
    if (pid > 0 && r < sc.p_kill_sidecar) {
      ++row.faults;
      const auto delay = std::chrono::microseconds(static_cast<int64_t>(u(rng) * 3000));
      later = std::thread([pid, delay] {
        std::this_thread::sleep_for(delay);
        ::kill(pid, SIGKILL);
      });
    } else if (pid > 0 && r < sc.p_kill_sidecar + sc.p_stop_sidecar) {
      ++row.faults;
      ::kill(pid, SIGSTOP);
    } else if (r < sc.p_kill_sidecar + sc.p_stop_sidecar + sc.p_kill_actor) {
      ++row.faults;
      client.kill_worker();
    }
    auto p = client.propose(h, k, gate);
    if (later.joinable()) later.join();
    return p;
  };
  auto state = m.model->new_state(static_cast<int64_t>(prompt.size()) + o.n + 1);
  GenerateParams gp;
  gp.n_predict = o.n;
  GenerateMetrics g;
  SpecStats st;
  const auto toks = generate_speculative(*m.model, *state, prompt, gp, SpecParams{}, propose, g, st);
  const drafter_status ds = client.status();
  if (sc.sidecar_flags.size() + sc.exe.size() > 0) row.faults = ds.garbage + ds.crashes + ds.timeouts + ds.start_failures;
  row.fallbacks = ds.fallbacks;
  row.restarts = ds.restarts;
  row.blocks = st.blocks;
  row.accepted = st.accepted;
  row.mismatches = count_mismatches(ref, toks);
  return row;
}

std::vector<int32_t> default_prompt(const LoadedModel& m) {
  if (!m.tokenizer) return {1, 2, 3, 4, 5, 6, 7, 8};
  std::vector<int32_t> ids;
  if (m.tokenizer->bos_id() >= 0) ids.push_back(m.tokenizer->bos_id());
  const auto t = m.tokenizer->encode("The experts stream from the drives while the drafter guesses ahead.", false);
  ids.insert(ids.end(), t.begin(), t.end());
  return ids;
}

int64_t drafter_matrix(Runtime& rt, const FaultOptions& o, LoadedModel& m, const std::string& replay, std::span<const int32_t> prompt,
                       const std::vector<GeneratedToken>& ref);
int64_t storage_matrix(Runtime& rt, const FaultOptions& o, std::span<const int32_t> prompt, const std::vector<GeneratedToken>& ref);

int faults_main(FaultOptions& o) {
  if (!o.engine.draft.spec.empty())
    throw UsageError("ferry faults runs its own replay drafter (the plain run's tokens): drop --draft " + o.engine.draft.spec);
  if (o.n < 1) throw UsageError("-n/--n-predict must be at least 1");
  Runtime rt;  // the one actor system of this process
  Engine e = start_engine(o.engine, &rt);
  LoadedModel& m = e.model;
  const std::vector<int32_t> prompt = default_prompt(m);
  auto state = m.model->new_state(static_cast<int64_t>(prompt.size()) + o.n + 1);
  GenerateParams gp;
  gp.n_predict = o.n;  // no stop ids: every scenario generates exactly N tokens
  GenerateMetrics g;
  const auto ref = generate(*m.model, *state, prompt, gp, g);
  const auto dir = std::filesystem::temp_directory_path() / ("ferry-faults-" + std::to_string(::getpid()));
  std::filesystem::create_directories(dir);
  const std::string replay = (dir / "reference.txt").string();
  {
    std::ofstream f(replay);
    for (int32_t id : prompt) f << id << '\n';
    for (const auto& t : ref) f << t.id << '\n';
  }
  std::printf("ferry faults: %s, %lld tokens per run, plain reference %.1f tok/s, drafter deadline %d ms\n\n",
              o.engine.model.dir.c_str(), static_cast<long long>(o.n), g.generation_tok_s(), o.engine.draft.deadline_ms);
  int64_t total = 0;
  if (o.only != "storage") total += drafter_matrix(rt, o, m, replay, prompt, ref);
  if (o.only != "drafter" && is_prepared_model(o.engine.model.dir)) total += storage_matrix(rt, o, prompt, ref);
  std::filesystem::remove_all(dir);
  std::printf("\ntotal mismatches: %lld\n", static_cast<long long>(total));
  return total == 0 ? 0 : 1;
}

int64_t drafter_matrix(Runtime& rt, const FaultOptions& o, LoadedModel& m, const std::string& replay, std::span<const int32_t> prompt,
                       const std::vector<GeneratedToken>& ref) {
  std::printf("%-24s %7s %9s %8s %7s %8s %10s\n", "drafter scenario", "faults", "fallbacks", "restarts", "blocks", "accepted",
              "mismatches");
  int64_t total = 0;
  for (const Scenario& sc : scenarios()) {
    const Row r = run_scenario(rt, m, o, sc, replay, prompt, ref);
    std::printf("%-24s %7llu %9llu %8llu %7lld %8lld %10lld\n", r.name.c_str(),
                static_cast<unsigned long long>(r.faults), static_cast<unsigned long long>(r.fallbacks),
                static_cast<unsigned long long>(r.restarts), static_cast<long long>(r.blocks),
                static_cast<long long>(r.accepted), static_cast<long long>(r.mismatches));
    std::fflush(stdout);
    total += r.mismatches;
  }
  return total;
}

// Storage rows. A run that ended with a clear error (no good copy of an expert left) is shown as that
// error, not counted as a mismatch: without a replica that is the expected outcome.
int64_t storage_matrix(Runtime& rt, const FaultOptions& o, std::span<const int32_t> prompt, const std::vector<GeneratedToken>& ref) {
  std::printf("\n%-32s %7s %10s %10s  %s\n", "storage scenario", "faults", "recoveries", "mismatches", "outcome");
  const auto rows = run_storage_faults(rt, o.engine.model, o.n, o.seed, prompt,
                                       [&](const std::vector<GeneratedToken>& got) { return count_mismatches(ref, got); });
  int64_t total = 0;
  for (const auto& r : rows) {
    std::printf("%-32s %7llu %10llu %10lld  %s\n", r.name.c_str(), static_cast<unsigned long long>(r.faults),
                static_cast<unsigned long long>(r.recoveries), static_cast<long long>(r.mismatches),
                r.error.empty() ? "identical output" : ("error: " + r.error).c_str());
    total += r.mismatches;
    if (r.faults == 0) std::printf("  (no fault was injected in this run)\n");
  }
  std::fflush(stdout);
  return total;
}

}  // namespace

void add_faults_command(CLI::App& app) {
  auto o = std::make_shared<FaultOptions>();
  CLI::App* c = app.add_subcommand("faults", "Fault-injection runs: the drafter fails in every way, output must not change");
  o->engine.draft.deadline_ms = 200;
  add_engine_flags(c, o->engine);
  c->add_option("-n,--n-predict", o->n, "Tokens per run")->capture_default_str();
  c->add_option("-s,--seed", o->seed, "Seed of the fault schedule and the replay drafter")->capture_default_str();
  c->add_option("--only", o->only, "Run one half: drafter or storage (storage needs a prepared model)")
      ->check(CLI::IsMember({"drafter", "storage"}));
  c->callback([o] {
    const int rc = faults_main(*o);
    if (rc != 0) throw CLI::RuntimeError(rc);
  });
}

}  // namespace ferry::cli
