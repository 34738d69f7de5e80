// The runtime's supervisor under generation: an actor that cannot be restarted (a layer scheduler, the
// host pool, the device-cache manager) killed in the middle of a layer call ends generation at once
// with an error naming it, instead of after the call's timeout (30 s here, 540 s by default).
#include <caf/all.hpp>

#include "actors/runtime/runtime.hpp"
#include "io/errors.hpp"
#include "tests/actors/streaming/streaming_support.hpp"

using namespace ferry;
using namespace ferry::test;
using namespace std::chrono_literals;

namespace {

struct Outcome {
  std::string error;  // "" when generation did not fail
  double seconds_after_kill = 0;
  int kills = 0;
};

// Generates with `victim(layer)` (an actor name) killed right after the `at`-th layer call went out.
Outcome kill_mid_call(ModelOptions o, uint64_t at, const std::function<std::string(uint32_t)>& victim) {
  auto holder = std::make_shared<StreamingExperts*>(nullptr);
  auto killed_at = std::make_shared<std::chrono::steady_clock::time_point>();
  Outcome out;
  o.streaming.after_schedule = [&, holder, killed_at](uint32_t layer, uint64_t call) {
    if (call != at || !*holder) return;
    const caf::actor a = (*holder)->runtime().find(victim(layer));
    ASSERT_TRUE(a) << "no actor named " << victim(layer);
    *killed_at = std::chrono::steady_clock::now();
    caf::anon_send_exit(a, caf::exit_reason::kill);
    ++out.kills;
  };
  try {
    generate_run(o, [&](LoadedModel& m) { *holder = m.streaming; });
  } catch (const Error& e) {
    out.error = e.what();
    out.seconds_after_kill = std::chrono::duration<double>(std::chrono::steady_clock::now() - *killed_at).count();
  }
  return out;
}

}  // namespace

TEST(StreamingSupervision, KilledLayerSchedulerFailsTheCallAtOnceNamingIt) {
  std::string name;
  const auto r = kill_mid_call(streaming_options(prepared("one", 1, false), 0), 40, [&](uint32_t layer) {
    return name = "layer scheduler " + std::to_string(layer);
  });
  ASSERT_EQ(r.kills, 1);
  ASSERT_FALSE(r.error.empty()) << "generation should have failed";
  EXPECT_LT(r.seconds_after_kill, 2.0) << r.error;
  EXPECT_NE(r.error.find(name), std::string::npos) << r.error;
  EXPECT_NE(r.error.find("cannot be restarted"), std::string::npos) << r.error;
}

TEST(StreamingSupervision, KilledHostPoolFailsTheCallAtOnceNamingIt) {
  // One scratch slot and no cache: the pool holds waiting acquires when it dies, which no one answers.
  auto o = streaming_options(prepared("one", 1, false), 0);
  o.streaming.stream_slots = 1;
  const auto r = kill_mid_call(o, 40, [](uint32_t) { return std::string("host pool"); });
  ASSERT_EQ(r.kills, 1);
  ASSERT_FALSE(r.error.empty()) << "generation should have failed";
  EXPECT_LT(r.seconds_after_kill, 2.0) << r.error;
  EXPECT_NE(r.error.find("host pool"), std::string::npos) << r.error;
}

TEST(StreamingSupervision, KilledDeviceCacheManagerFailsTheNextCallAtOnceNamingIt) {
  auto o = streaming_options(prepared("one", 1, false), 4);
  o.streaming.device_tier = true;
  const auto r = kill_mid_call(o, 40, [](uint32_t) { return std::string("device-cache manager"); });
  ASSERT_EQ(r.kills, 1);
  ASSERT_FALSE(r.error.empty()) << "generation should have failed";
  EXPECT_LT(r.seconds_after_kill, 2.0) << r.error;
  EXPECT_NE(r.error.find("device-cache manager"), std::string::npos) << r.error;
}

TEST(StreamingSupervision, KilledReadServiceFailsTheCallAtOnceNamingIt) {
  const auto r = kill_mid_call(streaming_options(prepared("one", 1, false), 0), 40,
                               [](uint32_t) { return std::string("read service"); });
  ASSERT_EQ(r.kills, 1);
  ASSERT_FALSE(r.error.empty()) << "generation should have failed";
  EXPECT_LT(r.seconds_after_kill, 2.0) << r.error;
  EXPECT_NE(r.error.find("read service"), std::string::npos) << r.error;
}
