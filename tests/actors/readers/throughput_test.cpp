// Throughput of the read service against a plain sequential O_DIRECT pread of the same files. Not in
// the default suite (DISABLED_): it writes ~0.5 GB. Run with
//   ferry_test_actors --gtest_also_run_disabled_tests --gtest_filter='*Throughput*'
// FERRY_THROUGHPUT_DIR=<dir> reads from another directory (e.g. an NVMe mount) instead of the build tree.
#include <fcntl.h>
#include <unistd.h>

#include <cstdlib>

#include "actors/readers/reader_supervisor.hpp"
#include "io/read_engine/pread_pool.hpp"
#include "tests/actors/readers/test_support.hpp"

using namespace ferry;
using namespace ferry::test;
using namespace std::chrono_literals;

namespace {

constexpr uint32_t kFiles = 32;
constexpr size_t kExpert = 17'547'264;  // K3's expert file (4,284 x 4096)

double seconds_since(io::Clock::time_point t0) {
  return std::chrono::duration<double>(io::Clock::now() - t0).count();
}

double run_service(const std::string& dir, io::EngineKind kind, unsigned cap) {
  ActorSystem as;
  caf::scoped_actor self{*as.sys};
  ReadServiceConfig cfg;
  cfg.dirs = {dir};
  cfg.arena = std::make_shared<io::PinnedArena>(kFiles, kExpert);
  cfg.engine = kind;
  cfg.engine_cfg.max_inflight = cap;
  auto svc = spawn_read_service(*as.sys, cfg);
  std::vector<std::tuple<fetch_atom, fetch_req>> reqs;
  for (uint32_t e = 0; e < kFiles; ++e) reqs.emplace_back(fetch_atom_v, fetch_req{e, {0}, {{0, e}, 0, kExpert, {e, 0}}});
  auto t0 = io::Clock::now();
  auto got = request_all(self, svc, reqs, 120s);
  double s = seconds_since(t0);
  for (auto& g : got) EXPECT_TRUE(g) << caf::to_string(g.error());
  caf::anon_send_exit(svc, caf::exit_reason::user_shutdown);
  return double(kFiles) * kExpert / s;
}

}  // namespace

TEST(ReaderThroughput, DISABLED_ReadServiceVersusSequentialODirect) {
  std::string dir;
  if (const char* d = std::getenv("FERRY_THROUGHPUT_DIR")) {
    dir = d;
    write_experts({dir}, 0, kFiles, kExpert);
  } else {
    dir = fresh_dir("throughput");
    write_experts({dir}, 0, kFiles, kExpert);
  }
  ::sync();
  // Baseline: one file after another, one pread each, O_DIRECT, into one aligned buffer. Measured
  // before and after the service runs (a VM disk's rate drifts); the faster of the two is the base.
  io::PinnedArena buf(1, kExpert);
  auto sequential = [&] {
    auto t0 = io::Clock::now();
    for (uint32_t e = 0; e < kFiles; ++e) {
      io::ReadOp op{e, dir + "/" + expert_file_name(0, int(e)), 0, kExpert, buf.slot(0), true};
      auto r = io::pread_fully(op);
      EXPECT_EQ(r.err, 0) << op.path;
      EXPECT_EQ(r.bytes_read, kExpert);
    }
    return double(kFiles) * kExpert / seconds_since(t0);
  };
  double base = sequential();
  std::printf("sequential O_DIRECT pread : %8.1f MB/s\n", base / 1e6);
  for (unsigned cap : {1u, 4u, 8u}) {
    double u = run_service(dir, io::EngineKind::automatic, cap);
    std::printf("read service, cap %u      : %8.1f MB/s  ratio %.2f\n", cap, u / 1e6, u / base);
  }
  double p = run_service(dir, io::EngineKind::pread_pool, 4);
  std::printf("read service, pread pool 4: %8.1f MB/s  ratio %.2f\n", p / 1e6, p / base);
  double again = sequential();
  std::printf("sequential O_DIRECT again : %8.1f MB/s (ratios above use %.1f)\n", again / 1e6, base / 1e6);
  if (!std::getenv("FERRY_THROUGHPUT_DIR")) fs::remove_all(dir);
}
