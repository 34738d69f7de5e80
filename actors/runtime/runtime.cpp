#include "actors/runtime/runtime.hpp"

#include <algorithm>
#include <deque>
#include <mutex>

#include <caf/all.hpp>
#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include "actors/tracing/tracer_actor.hpp"
#include "io/errors.hpp"

namespace ferry {

// What the Runtime (any thread) and the supervisor actor share: every registered actor, by id.
struct SupervisorRegistry {
  struct Entry {
    std::string name;
    std::function<caf::actor()> start;  // empty: cannot be restarted
    bool critical = true;               // its loss fails the listeners' pending requests
    bool stopped = false;               // its owner stopped it: an orderly end, never restarted
    caf::actor current;                 // the running incarnation (empty once it is gone)
    uint32_t restarts = 0;
    std::deque<std::chrono::steady_clock::time_point> recent;  // restarts inside the window
  };
  RuntimeOptions opt;
  mutable std::mutex mu;
  std::vector<Entry> entries;  // never erased: Supervised holds an index
  std::string failure;
};

caf::actor Supervised::current() const {
  std::lock_guard lk(reg_->mu);
  return reg_->entries[id_].current;
}

uint32_t Supervised::restarts() const {
  std::lock_guard lk(reg_->mu);
  return reg_->entries[id_].restarts;
}

caf::actor Supervised::stop() {
  std::lock_guard lk(reg_->mu);
  auto& e = reg_->entries[id_];
  e.stopped = true;
  return std::exchange(e.current, nullptr);
}

namespace {

struct supervisor_state {
  std::shared_ptr<SupervisorRegistry> reg;
  std::vector<caf::actor> listeners;
  static inline const char* name = "supervisor";
};
using sup = supervisor_actor::stateful_pointer<supervisor_state>;

bool orderly(const caf::error& reason) {
  return !reason || reason == caf::exit_reason::user_shutdown || reason == caf::exit_reason::normal;
}

// Restarts `e` when it may be restarted within the budget (the registry lock is held). True: done.
bool try_restart(sup self, SupervisorRegistry::Entry& e, const std::string& why) {
  const auto& opt = self->state.reg->opt;
  if (!e.start) return false;
  const auto now = std::chrono::steady_clock::now();
  while (!e.recent.empty() && now - e.recent.front() > opt.restart_window) e.recent.pop_front();
  if (e.recent.size() >= opt.restart_budget) return false;
  e.recent.push_back(now);
  ++e.restarts;
  e.current = e.start();
  self->monitor(e.current);
  spdlog::warn("runtime: {} stopped ({}); restarted ({} of {} in {} s)", e.name, why, e.recent.size(),
               opt.restart_budget, opt.restart_window.count());
  return true;
}

void fail_listeners(sup self, const std::string& msg) {
  spdlog::error("runtime: {}", msg);
  const auto err = caf::make_error(errc::actor_down, msg);
  for (const auto& l : self->state.listeners) caf::anon_send(l, err);
}

void on_down(sup self, const caf::down_msg& dm) {
  auto& st = self->state;
  if (std::erase_if(st.listeners, [&](const caf::actor& l) { return l.address() == dm.source; }) > 0) return;
  std::unique_lock lk(st.reg->mu);
  auto it = std::find_if(st.reg->entries.begin(), st.reg->entries.end(),
                         [&](const auto& e) { return e.current && e.current.address() == dm.source; });
  if (it == st.reg->entries.end()) return;
  SupervisorRegistry::Entry& e = *it;
  if (e.stopped || orderly(dm.reason)) {
    e.current = nullptr;
    return;
  }
  const std::string why = self->system().render(dm.reason);
  if (try_restart(self, e, why)) return;
  e.current = nullptr;
  const std::string msg = fmt::format("the {} actor stopped ({}){}", e.name, why,
                                      e.start ? ", past its restart budget" : " and cannot be restarted");
  if (!e.critical) {
    lk.unlock();
    spdlog::warn("runtime: {}", msg);
    return;
  }
  if (st.reg->failure.empty()) st.reg->failure = msg;
  lk.unlock();
  fail_listeners(self, msg);
}

supervisor_actor::behavior_type supervisor_fun(sup self, std::shared_ptr<SupervisorRegistry> reg) {
  self->state.reg = std::move(reg);
  self->set_down_handler([=](caf::down_msg& dm) { on_down(self, dm); });
  return {
      [=](watch_atom, const caf::actor& a) { self->monitor(a); },
      [=](listen_atom, const caf::actor& l) {
        self->monitor(l);
        self->state.listeners.push_back(l);
        std::unique_lock lk(self->state.reg->mu);
        const std::string failure = self->state.reg->failure;
        lk.unlock();
        if (!failure.empty()) caf::anon_send(l, caf::make_error(errc::actor_down, failure));
      },
  };
}

}  // namespace

std::string describe_error(caf::actor_system& sys, const caf::error& e) {
  if (e.category() == caf::atom("ferry") && static_cast<errc>(e.code()) == errc::actor_down &&
      e.context().match_element<std::string>(0))
    return e.context().get_as<std::string>(0);
  return sys.render(e);
}

struct Runtime::Impl {
  caf::actor_system_config cfg;
  std::unique_ptr<caf::actor_system> sys;
  std::shared_ptr<SupervisorRegistry> reg = std::make_shared<SupervisorRegistry>();
  supervisor_actor supervisor;
  tracer_actor tracer;
  std::string trace_path;

  size_t add(SupervisorRegistry::Entry e) {
    std::lock_guard lk(reg->mu);
    reg->entries.push_back(std::move(e));
    return reg->entries.size() - 1;
  }
};

Runtime::Runtime(RuntimeOptions o) : impl_(std::make_unique<Impl>()) {
  impl_->reg->opt = o;
  register_ferry_types(impl_->cfg);
  impl_->sys = std::make_unique<caf::actor_system>(impl_->cfg);
  impl_->supervisor = impl_->sys->spawn(supervisor_fun, impl_->reg);
}

Runtime::~Runtime() {
  Impl& s = *impl_;
  flush_trace();
  std::vector<caf::actor> left;
  {
    std::lock_guard lk(s.reg->mu);
    for (auto& e : s.reg->entries) {
      e.stopped = true;
      if (e.current) left.push_back(std::exchange(e.current, nullptr));
    }
  }
  for (auto& a : left) caf::anon_send_exit(a, caf::exit_reason::user_shutdown);  // owners normally did this
  left.clear();  // a handle kept here would keep a detached actor (the tracer) alive: the join below hangs
  caf::anon_send_exit(s.supervisor, caf::exit_reason::user_shutdown);
  s.supervisor = nullptr;
  s.tracer = nullptr;
  s.sys.reset();  // waits for every actor (detached readers drain their rings first)
}

caf::actor_system& Runtime::system() { return *impl_->sys; }

void Runtime::watch(const caf::actor& a, std::string name, bool critical) {
  if (!a) return;
  SupervisorRegistry::Entry e;
  e.name = std::move(name);
  e.critical = critical;
  e.current = a;
  impl_->add(std::move(e));
  caf::anon_send(impl_->supervisor, watch_atom_v, a);
}

std::shared_ptr<Supervised> Runtime::supervise(std::string name, std::function<caf::actor()> start) {
  SupervisorRegistry::Entry e;
  e.name = std::move(name);
  e.critical = false;
  e.current = start();
  e.start = std::move(start);
  const caf::actor a = e.current;
  const size_t id = impl_->add(std::move(e));
  caf::anon_send(impl_->supervisor, watch_atom_v, a);
  return std::make_shared<Supervised>(impl_->reg, id);
}

void Runtime::listen(const caf::actor& listener) { caf::anon_send(impl_->supervisor, listen_atom_v, listener); }

tracer_actor Runtime::start_tracer(const std::string& path, const std::vector<std::string>& dirs, TraceCapacities caps) {
  Impl& s = *impl_;
  if (s.tracer) {
    if (path != s.trace_path)
      throw ConfigError(fmt::format("trace file {}: this process already traces to {}", path, s.trace_path));
    return s.tracer;
  }
  s.tracer = spawn_tracer(*s.sys, path, dirs, caps);
  s.trace_path = path;
  watch(s.tracer, "tracer", false);  // a lost tracer loses events, never a generation
  return s.tracer;
}

tracer_actor Runtime::tracer() const { return impl_->tracer; }

uint64_t Runtime::flush_trace() {
  Impl& s = *impl_;
  if (!s.tracer) return 0;
  uint64_t n = 0;
  caf::scoped_actor self{*s.sys};
  self->request(s.tracer, std::chrono::seconds(30), flush_atom_v)
      .receive([&](uint64_t x) { n = x; }, [&](caf::error& e) { spdlog::warn("trace flush: {}", s.sys->render(e)); });
  return n;
}

caf::actor Runtime::find(const std::string& name) const {
  std::lock_guard lk(impl_->reg->mu);
  for (auto it = impl_->reg->entries.rbegin(); it != impl_->reg->entries.rend(); ++it)
    if (it->name == name && it->current) return it->current;
  return nullptr;
}

std::string Runtime::failure() const {
  std::lock_guard lk(impl_->reg->mu);
  return impl_->reg->failure;
}

}  // namespace ferry
