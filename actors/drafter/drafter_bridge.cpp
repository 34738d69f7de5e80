#include "actors/drafter/drafter_bridge.hpp"

#include <spdlog/spdlog.h>
#include <unistd.h>

#include <caf/all.hpp>
#include <filesystem>
#include <thread>

#include "actors/runtime/runtime.hpp"

namespace ferry {
namespace {

using clock_type = std::chrono::steady_clock;

// ---- worker: owns one sidecar process; blocking calls, so it runs detached --------------------------

struct worker_state {
  std::unique_ptr<Sidecar> sidecar;
};
using worker = caf::stateful_actor<worker_state>*;

caf::error failure(SidecarFailure k, const std::string& what) {
  return caf::make_error(errc::drafter_failed, std::string(to_string(k)), what);
}

caf::behavior worker_fun(worker self, DrafterBridgeOptions o, drafter_bridge_actor sup) {
  try {
    self->state.sidecar = std::make_unique<Sidecar>(o.sidecar, o.target);
  } catch (const SidecarError& e) {
    spdlog::warn("drafter bridge: {}", e.what());
    self->quit(failure(e.kind, e.what()));
    return {};
  }
  spdlog::info("drafter bridge: sidecar {} up (pid {}, {} mode)", self->state.sidecar->name(),
               self->state.sidecar->pid(), self->state.sidecar->text_mode() ? "text" : "token");
  self->send(sup, ready_atom::value, static_cast<int32_t>(self->state.sidecar->pid()));
  return {
      [=](propose_atom, draft_request& rq) -> caf::result<draft_reply> {
        const clock_type::time_point deadline{std::chrono::nanoseconds(rq.deadline_ns)};
        try {
          DraftProposal p = self->state.sidecar->propose(rq.history, static_cast<int>(rq.max_tokens), rq.gate, deadline);
          return draft_reply{std::move(p.ids), std::move(p.conf)};
        } catch (const SidecarError& e) {
          spdlog::warn("drafter bridge: {}", e.what());
          auto err = failure(e.kind, e.what());
          self->quit(err);  // the sidecar is not to be trusted any more: restart it
          return err;
        } catch (const std::exception& e) {
          auto err = failure(SidecarFailure::garbage, e.what());
          self->quit(err);
          return err;
        }
      },
  };
}

// ---- supervisor --------------------------------------------------------------------------------------

struct bridge_state {
  DrafterBridgeOptions opt;
  // Shared with the exit functor, which runs after the state is gone.
  std::shared_ptr<caf::actor> worker = std::make_shared<caf::actor>();
  bool ready = false;
  uint64_t starts = 0;
  int failures_in_row = 0;
  drafter_status st;
};
using bridge = drafter_bridge_actor::stateful_pointer<bridge_state>;

void start_worker(bridge self) {
  auto& s = self->state;
  s.ready = false;
  if (s.starts++ > 0) ++s.st.restarts;
  *s.worker = self->spawn<caf::detached + caf::monitored>(worker_fun, s.opt,
                                                          caf::actor_cast<drafter_bridge_actor>(self));
}

void on_worker_down(bridge self, const caf::down_msg& dm) {
  auto& s = self->state;
  if (dm.source != s.worker->address()) return;
  if (!s.ready) ++s.st.start_failures;
  s.ready = false;
  s.st.up = false;
  s.st.pid = -1;
  *s.worker = nullptr;
  if (dm.reason.category() == caf::atom("ferry") && dm.reason.context().match_element<std::string>(0) &&
      dm.reason.context().get_as<std::string>(0) == to_string(SidecarFailure::version)) {
    // Restarting the same binary cannot change the version it speaks.
    spdlog::error("drafter bridge: drafter disabled for this run (protocol version mismatch); plain decoding");
    return;
  }
  const int k = std::min(++s.failures_in_row, 16);
  const auto delay = std::chrono::milliseconds(
      std::min<int64_t>(s.opt.backoff_max_ms, static_cast<int64_t>(s.opt.backoff_min_ms) << (k - 1)));
  spdlog::warn("drafter bridge: drafter down ({}); plain decoding until it is back, restart in {} ms",
               self->system().render(dm.reason), delay.count());
  self->delayed_send(self, delay, restart_atom::value);
}

// Counts one failed call by what went wrong.
void count_failure(drafter_status& st, const caf::error& e) {
  if (e == caf::sec::request_timeout) {
    ++st.timeouts;
  } else if (e.category() == caf::atom("ferry") && e.code() == static_cast<uint8_t>(errc::drafter_failed) &&
             e.context().match_element<std::string>(0)) {
    const std::string kind = e.context().get_as<std::string>(0);
    if (kind == to_string(SidecarFailure::timeout)) ++st.timeouts;
    else if (kind == to_string(SidecarFailure::garbage)) ++st.garbage;
    else ++st.crashes;
  } else {
    ++st.crashes;  // the worker died under the call (killed)
  }
}

caf::result<draft_reply> on_propose(bridge self, draft_request& rq) {
  auto& s = self->state;
  ++s.st.calls;
  const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
      clock_type::time_point{std::chrono::nanoseconds(rq.deadline_ns)} - clock_type::now());
  if (!s.ready || left.count() <= 0) {
    ++s.st.unavailable;
    ++s.st.fallbacks;
    return caf::make_error(errc::drafter_unavailable, s.ready ? "deadline already passed" : "sidecar not running");
  }
  auto rp = self->make_response_promise<draft_reply>();
  auto w = *s.worker;
  self->request(w, left, propose_atom::value, std::move(rq))
      .then(
          [=](draft_reply& r) mutable {
            ++self->state.st.ok;
            self->state.failures_in_row = 0;
            rp.deliver(std::move(r));
          },
          [=](caf::error& e) mutable {
            ++self->state.st.fallbacks;
            count_failure(self->state.st, e);
            if (e == caf::sec::request_timeout) self->send_exit(w, caf::exit_reason::kill);  // hung sidecar
            rp.deliver(std::move(e));
          });
  return rp;
}

drafter_bridge_actor::behavior_type bridge_fun(bridge self, DrafterBridgeOptions o) {
  self->state.opt = std::move(o);
  self->set_down_handler([=](caf::down_msg& dm) { on_worker_down(self, dm); });
  self->attach_functor([w = self->state.worker](const caf::error&) {
    if (*w) caf::anon_send_exit(*w, caf::exit_reason::user_shutdown);
  });
  start_worker(self);
  return {
      [=](propose_atom, draft_request& rq) { return on_propose(self, rq); },
      [=](stats_atom) { return self->state.st; },
      [=](kill_atom) {
        if (*self->state.worker) self->send_exit(*self->state.worker, caf::exit_reason::kill);
      },
      [=](restart_atom) {
        if (!*self->state.worker) start_worker(self);
      },
      [=](ready_atom, int32_t pid) {
        auto& s = self->state;
        if (!*s.worker || self->current_sender() != s.worker->address()) return;
        s.ready = true;
        s.st.up = true;
        s.st.pid = pid;
      },
  };
}

}  // namespace

std::string default_drafter_exe() {
  if (const char* e = std::getenv("FERRY_DRAFTER"); e && *e) return e;
  std::error_code ec;
  const auto self_dir = std::filesystem::read_symlink("/proc/self/exe", ec).parent_path();
  // Installed: side by side. Build tree: build/apps/ferry-drafter beside build/apps/ferry, one up from
  // build/apps/ferry-server/ferry-server, and build/apps/ from a test binary in build/tests/.
  for (const auto& p : {self_dir / "ferry-drafter", self_dir / ".." / "ferry-drafter", self_dir / ".." / "apps" / "ferry-drafter"})
    if (std::filesystem::exists(p, ec)) return p.lexically_normal().string();
  return (self_dir / "ferry-drafter").string();
}

SidecarOptions sidecar_for_spec(const std::string& spec, int threads, std::string exe) {
  SidecarOptions o;
  o.exe = exe.empty() ? default_drafter_exe() : std::move(exe);
  o.args = {"--drafter", spec, "-t", std::to_string(std::max(1, threads))};
  return o;
}

drafter_bridge_actor spawn_drafter_bridge(caf::actor_system& sys, const DrafterBridgeOptions& o) {
  return sys.spawn(bridge_fun, o);
}

struct DrafterClient::Impl {
  Impl(Runtime& rt, const DrafterBridgeOptions& o)
      : self(rt.system()),
        bridge(rt.supervise("drafter bridge",
                            [&sys = rt.system(), o] { return caf::actor_cast<caf::actor>(spawn_drafter_bridge(sys, o)); })),
        deadline(o.deadline_ms) {}
  caf::scoped_actor self;
  std::shared_ptr<Supervised> bridge;
  std::chrono::milliseconds deadline;
};

DrafterClient::DrafterClient(Runtime& rt, const DrafterBridgeOptions& o) : impl_(std::make_unique<Impl>(rt, o)) {}

DrafterClient::~DrafterClient() {
  const caf::actor b = impl_->bridge->stop();  // an orderly end: the supervisor does not restart it
  if (!b) return;
  impl_->self->send_exit(b, caf::exit_reason::user_shutdown);
  impl_->self->wait_for(b);
}

std::optional<DraftProposal> DrafterClient::propose(std::span<const int32_t> history, int max_tokens, float gate) {
  draft_request rq;
  rq.history.assign(history.begin(), history.end());
  rq.max_tokens = static_cast<uint32_t>(max_tokens);
  rq.gate = gate;
  rq.deadline_ns = std::chrono::duration_cast<std::chrono::nanoseconds>(
                       (clock_type::now() + impl_->deadline).time_since_epoch())
                       .count();
  std::optional<DraftProposal> out;
  impl_->self->request(bridge(), impl_->deadline, propose_atom::value, std::move(rq))
      .receive([&](draft_reply& r) { out = DraftProposal{std::move(r.ids), std::move(r.conf)}; },
               [&](caf::error&) {});
  return out;
}

ProposeFn DrafterClient::propose_fn() {
  return [this](std::span<const int32_t> h, int max_tokens, float gate) { return propose(h, max_tokens, gate); };
}

drafter_status DrafterClient::status() {
  drafter_status st;
  impl_->self->request(bridge(), std::chrono::seconds(5), stats_atom::value)
      .receive([&](drafter_status& s) { st = s; }, [&](caf::error&) {});
  return st;
}

bool DrafterClient::wait_up(std::chrono::milliseconds timeout) {
  const auto end = clock_type::now() + timeout;
  while (clock_type::now() < end) {
    const drafter_status st = status();
    if (st.up) return true;
    if (st.start_failures > 0) return false;  // the first start attempt failed
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  return false;
}

void DrafterClient::kill_worker() { impl_->self->send(bridge(), kill_atom::value); }

drafter_bridge_actor DrafterClient::bridge() const {
  return caf::actor_cast<drafter_bridge_actor>(impl_->bridge->current());
}

}  // namespace ferry
