// The runtime root alone: one actor system, a supervisor that restarts what can be restarted (within a
// budget) and tells every listener at once when an actor that cannot be restarted is lost, and an
// orderly shutdown that is no failure.
#include <gtest/gtest.h>

#include <caf/all.hpp>
#include <thread>

#include "actors/runtime/runtime.hpp"

using namespace ferry;
using namespace std::chrono_literals;

namespace {

// Spawned with an argument: CAF 0.17.6 binds a reference to its null argument tuple when a function
// actor is spawned with none (init_fun_factory.hpp), which UBSan reports (scripts/sanitize.sh).
caf::behavior idle_fun(int32_t offset) {
  return {[offset](int32_t x) { return x + offset; }};
}

caf::actor spawn_idle(caf::actor_system& sys) { return sys.spawn(idle_fun, int32_t{0}); }

// Waits until `pred` holds (polling), at most `limit`; returns whether it did.
template <class Pred>
bool eventually(Pred pred, std::chrono::milliseconds limit = 2000ms) {
  const auto end = std::chrono::steady_clock::now() + limit;
  while (!pred()) {
    if (std::chrono::steady_clock::now() > end) return false;
    std::this_thread::sleep_for(2ms);
  }
  return true;
}

// The next message of `self` within `limit`, rendered; "" when none came.
std::string next_error(caf::scoped_actor& self, caf::actor_system& sys, std::chrono::milliseconds limit) {
  std::string got;
  self->receive([&](caf::error& e) { got = describe_error(sys, e); }, caf::after(limit) >> [] {});
  return got;
}

}  // namespace

TEST(Runtime, SupervisedActorKilledIsStartedAgain) {
  Runtime rt;
  auto s = rt.supervise("echo", [&] { return spawn_idle(rt.system()); });
  const caf::actor first = s->current();
  ASSERT_TRUE(first);
  caf::anon_send_exit(first, caf::exit_reason::kill);
  ASSERT_TRUE(eventually([&] { return s->current() && s->current() != first; }));
  EXPECT_EQ(s->restarts(), 1u);
  EXPECT_EQ(rt.find("echo"), s->current());
  EXPECT_EQ(rt.failure(), "") << "a restartable actor's loss is no failure";
}

TEST(Runtime, SupervisedActorPastItsRestartBudgetStaysDown) {
  RuntimeOptions o;
  o.restart_budget = 2;
  Runtime rt(o);
  auto s = rt.supervise("echo", [&] { return spawn_idle(rt.system()); });
  for (uint32_t k = 0; k < 3; ++k) {
    const caf::actor a = s->current();
    ASSERT_TRUE(a) << "kill " << k;
    caf::anon_send_exit(a, caf::exit_reason::kill);
    ASSERT_TRUE(eventually([&] { return s->current() != a; })) << "kill " << k;
  }
  EXPECT_FALSE(s->current()) << "the third loss is past the budget of 2";
  EXPECT_EQ(s->restarts(), 2u);
}

TEST(Runtime, LostWatchedActorFailsEveryListenerAtOnceNamingIt) {
  Runtime rt;
  caf::scoped_actor listener{rt.system()};
  rt.listen(caf::actor_cast<caf::actor>(listener));
  const caf::actor a = spawn_idle(rt.system());
  rt.watch(a, "layer scheduler 7");
  std::this_thread::sleep_for(20ms);  // the supervisor monitors it
  const auto t0 = std::chrono::steady_clock::now();
  caf::anon_send_exit(a, caf::exit_reason::kill);
  const std::string got = next_error(listener, rt.system(), 2000ms);
  const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  EXPECT_LT(s, 1.0);
  EXPECT_NE(got.find("layer scheduler 7"), std::string::npos) << got;
  EXPECT_NE(got.find("cannot be restarted"), std::string::npos) << got;
  EXPECT_EQ(rt.failure(), got);
}

TEST(Runtime, ListenerArrivingAfterALossIsToldAtOnce) {
  Runtime rt;
  const caf::actor a = spawn_idle(rt.system());
  rt.watch(a, "host pool");
  caf::anon_send_exit(a, caf::exit_reason::kill);
  ASSERT_TRUE(eventually([&] { return !rt.failure().empty(); }));
  caf::scoped_actor listener{rt.system()};
  rt.listen(caf::actor_cast<caf::actor>(listener));
  EXPECT_NE(next_error(listener, rt.system(), 2000ms).find("host pool"), std::string::npos);
}

TEST(Runtime, OrderlyShutdownOfAWatchedActorIsNoFailure) {
  Runtime rt;
  caf::scoped_actor listener{rt.system()};
  rt.listen(caf::actor_cast<caf::actor>(listener));
  const caf::actor a = spawn_idle(rt.system());
  rt.watch(a, "read service");
  std::this_thread::sleep_for(20ms);
  caf::anon_send_exit(a, caf::exit_reason::user_shutdown);
  EXPECT_EQ(next_error(listener, rt.system(), 200ms), "");
  EXPECT_EQ(rt.failure(), "");
  EXPECT_FALSE(rt.find("read service")) << "gone, and not restarted";
}

TEST(Runtime, NonCriticalLossIsOnlyLogged) {
  Runtime rt;
  caf::scoped_actor listener{rt.system()};
  rt.listen(caf::actor_cast<caf::actor>(listener));
  const caf::actor a = spawn_idle(rt.system());
  rt.watch(a, "tracer", false);
  std::this_thread::sleep_for(20ms);
  caf::anon_send_exit(a, caf::exit_reason::kill);
  EXPECT_EQ(next_error(listener, rt.system(), 200ms), "");
  EXPECT_EQ(rt.failure(), "");
}
