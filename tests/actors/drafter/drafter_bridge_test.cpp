// The drafter bridge actor with the real sidecar process, on k3-tiny-a: whatever the drafter does
// (crash, hang past the deadline, garbage, refusing to start, another protocol version, its process
// killed or stopped, its actor killed), generation takes plain steps meanwhile, the bridge restarts
// it with back-off, and every position's logits hash equals plain decoding's.
#include <signal.h>
#include <spdlog/sinks/ostream_sink.h>
#include <spdlog/spdlog.h>

#include <caf/all.hpp>
#include <fstream>
#include <sstream>
#include <thread>

#include "actors/drafter/drafter_bridge.hpp"
#include "actors/runtime/runtime.hpp"
#include "tests/actors/drafter/drafter_util.hpp"
#include "tests/actors/drafter/sidecar_util.hpp"

namespace ferry::test {
namespace {

class Bridge : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    K3& k = K3::get();
    replay_ = new std::string((std::filesystem::temp_directory_path() /
                               ("ferry-bridge-test-" + std::to_string(::getpid()) + ".txt"))
                                  .string());
    std::ofstream f(*replay_);
    for (int32_t id : k.sequence(160)) f << id << ' ';  // the longest run below
  }
  static void TearDownTestSuite() {
    std::filesystem::remove(*replay_);
    delete replay_;
  }
  void SetUp() override {
    sink_ = std::make_shared<spdlog::sinks::ostream_sink_mt>(log_);
    spdlog::default_logger()->sinks().push_back(sink_);
  }
  void TearDown() override { spdlog::default_logger()->sinks().pop_back(); }

  DrafterBridgeOptions options(std::vector<std::string> flags, int deadline_ms = 300) {
    DrafterBridgeOptions o;
    o.sidecar = sidecar_for_spec("replay:" + *replay_ + ",rate=0.9,len=6", 1, drafter_exe());
    o.sidecar.args.insert(o.sidecar.args.end(), flags.begin(), flags.end());
    o.target = {nullptr, static_cast<int32_t>(K3::get().cfg.vocab)};
    o.deadline_ms = deadline_ms;
    o.backoff_min_ms = 5;
    o.backoff_max_ms = 40;
    return o;
  }

  // Generates n tokens through the bridge; `before` runs before each drafter call (fault injection).
  // Returns the bridge's counters; fails the test on any position differing from plain decoding.
  drafter_status run(const DrafterBridgeOptions& o, int64_t n, const std::function<void(DrafterClient&, int)>& before,
                     SpecStats& st) {
    Runtime rt;
    DrafterClient client(rt, o);
    client.wait_up(std::chrono::milliseconds(3000));
    int calls = 0;
    ProposeFn propose = [&](std::span<const int32_t> h, int k, float g) {
      if (before) before(client, ++calls);
      const auto t0 = std::chrono::steady_clock::now();
      auto p = client.propose(h, k, g);
      const auto ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
      EXPECT_LE(ms, o.deadline_ms + 60) << "a drafter call outlived its deadline";
      return p;
    };
    K3& k = K3::get();
    EXPECT_EQ(0, mismatches(k.ref(n), k.spec(n, propose, st)));
    return client.status();
  }

  std::ostringstream log_;
  std::shared_ptr<spdlog::sinks::ostream_sink_mt> sink_;
  static std::string* replay_;
};
std::string* Bridge::replay_ = nullptr;

TEST_F(Bridge, HealthySidecarGivesBlocksAndExactOutput) {
  SpecStats st;
  const auto ds = run(options({}), 128, {}, st);
  EXPECT_EQ(ds.fallbacks, 0u);
  EXPECT_EQ(ds.restarts, 0u);
  EXPECT_GT(st.accepted, 60);
}

TEST_F(Bridge, GarbageAnswersFallBackAndRestart) {
  SpecStats st;
  const auto ds = run(options({"--fault-garbage-every", "2"}), 128, {}, st);
  EXPECT_GT(ds.garbage, 0u);
  EXPECT_GT(ds.restarts, 0u);
  EXPECT_NE(log_.str().find("out-of-vocabulary id"), std::string::npos) << log_.str();
}

TEST_F(Bridge, CrashingSidecarIsRestarted) {
  SpecStats st;
  const auto ds = run(options({"--fault-exit-after", "3"}), 128, {}, st);
  EXPECT_GT(ds.crashes, 0u);
  EXPECT_GT(ds.restarts, 0u);
  EXPECT_NE(log_.str().find("exited with status 9"), std::string::npos) << log_.str();
}

TEST_F(Bridge, HangingSidecarNeverHoldsGenerationPastTheDeadline) {
  SpecStats st;
  const auto ds = run(options({"--fault-hang-after", "2"}, 80), 128, {}, st);
  EXPECT_GT(ds.timeouts, 0u);
  EXPECT_GT(ds.restarts, 0u);
}

TEST_F(Bridge, UnstartableSidecarMeansPlainDecoding) {
  auto o = options({});
  o.sidecar.exe = "/nonexistent/ferry-drafter";
  SpecStats st;
  const auto ds = run(o, 64, {}, st);
  EXPECT_EQ(st.blocks, 0);
  EXPECT_GT(ds.start_failures, 0u);
  EXPECT_NE(log_.str().find("cannot start drafter sidecar /nonexistent/ferry-drafter"), std::string::npos) << log_.str();
  SpecStats st2;
  const auto ds2 = run(options({"--fault-exit-at-start"}), 64, {}, st2);
  EXPECT_GT(ds2.start_failures, 0u);
}

TEST_F(Bridge, VersionMismatchIsLoggedAndMeansPlainDecoding) {
  SpecStats st;
  const auto ds = run(options({"--protocol-version", "2"}), 64, {}, st);
  EXPECT_EQ(st.blocks, 0);
  EXPECT_EQ(ds.start_failures, 1u) << "a version mismatch is permanent: no restarts";
  EXPECT_EQ(ds.restarts, 0u);
  EXPECT_NE(log_.str().find("protocol version mismatch: ferry-drafter speaks 2, the client speaks 1"),
            std::string::npos)
      << log_.str();
}

TEST_F(Bridge, KilledOrStoppedSidecarAndKilledActorAreSurvived) {
  int kills = 0, stops = 0, actor_kills = 0;
  auto faults = [&](DrafterClient& c, int call) {
    const int32_t pid = c.status().pid;
    if (call % 5 == 0 && pid > 0) {
      ::kill(pid, SIGKILL);
      ++kills;
    } else if (call % 7 == 0 && pid > 0) {
      ::kill(pid, SIGSTOP);
      ++stops;
    } else if (call % 11 == 0) {
      c.kill_worker();
      ++actor_kills;
    }
  };
  SpecStats st;
  const auto ds = run(options({}, 100), 160, faults, st);
  EXPECT_GT(kills + stops + actor_kills, 3);
  EXPECT_GT(ds.fallbacks, 0u);
  EXPECT_GT(ds.restarts, 0u);
  EXPECT_GT(st.blocks, 0);
}

// The bridge actor itself killed (not its worker): the runtime's supervisor starts a new bridge, the
// client talks to it from the next call on, and drafting resumes with exact output.
TEST_F(Bridge, KilledBridgeActorIsRestartedByTheRuntime) {
  std::vector<caf::actor> killed;
  auto faults = [&](DrafterClient& c, int call) {
    if (call == 10 || call == 30) {
      killed.push_back(caf::actor_cast<caf::actor>(c.bridge()));
      caf::anon_send_exit(c.bridge(), caf::exit_reason::kill);
      std::this_thread::sleep_for(std::chrono::milliseconds(20));  // the supervisor restarts it
    }
  };
  SpecStats st;
  run(options({}, 300), 160, faults, st);
  ASSERT_EQ(killed.size(), 2u);
  EXPECT_NE(killed[0], killed[1]) << "the second kill hit a new bridge";
  EXPECT_GT(st.accepted, 40) << "drafting resumed after the restarts";
  EXPECT_NE(log_.str().find("drafter bridge stopped"), std::string::npos) << log_.str();
}

}  // namespace
}  // namespace ferry::test
