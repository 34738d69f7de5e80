#include "actors/readers/reader_supervisor.hpp"

#include <algorithm>
#include <deque>
#include <unordered_map>

#include <caf/all.hpp>
#include <spdlog/spdlog.h>

#include "actors/tracing/trace_emitter.hpp"
#include "messages/trace.pb.h"

namespace ferry {
namespace {

using steady = std::chrono::steady_clock;

struct Fetch {
  fetch_req req;
  caf::typed_response_promise<read_done> promise;
  uint32_t attempts = 0;
  std::vector<uint32_t> failed;  // directories whose copy gave an I/O error
  caf::error last_error;
};

struct Dir {
  reader_actor reader;
  caf::actor_addr addr;
  bool alive = false;
  std::deque<steady::time_point> restarts;
  dir_stats stats;
};

struct service_state {
  ReadServiceConfig cfg;
  TraceEmitter trace;  // tier DISK
  std::vector<Dir> dirs;
  std::unique_ptr<SourceChooser> chooser;
  std::unordered_map<uint64_t, Fetch> fetches;  // by internal id (clients' ids may collide)
  uint64_t next_id = 1;
  // The current readers, shared with the exit hook (which may run after this state is gone).
  std::shared_ptr<std::vector<reader_actor>> readers = std::make_shared<std::vector<reader_actor>>();
  static inline const char* name = "read_service";
};

using service = read_service_actor::stateful_pointer<service_state>;

void trace(service self, uint32_t kind, const Fetch& f, uint32_t dir, uint64_t dur_ns, std::string detail = {}) {
  self->state.trace(kind, f.req.id, f.req.range.key,
                    {.dur_ns = dur_ns, .dir = dir, .bytes = f.req.range.bytes, .detail = std::move(detail)});
}

void start_reader(service self, uint32_t d) {
  auto& st = self->state;
  ReaderConfig rc;
  rc.dir = d;
  rc.path = st.cfg.dirs[d];
  rc.engine = st.cfg.engine;
  rc.engine_cfg = st.cfg.engine_cfg;
  rc.n_dirs = static_cast<unsigned>(st.cfg.dirs.size());
  rc.arena = st.cfg.arena;
  auto& dir = st.dirs[d];
  dir.reader = spawn_reader(self->system(), std::move(rc));
  dir.addr = dir.reader.address();
  dir.alive = true;
  self->monitor(dir.reader);
  st.readers->resize(st.dirs.size());
  (*st.readers)[d] = dir.reader;
  st.chooser->set_available(d, true);
}

void fail_fetch(service self, uint64_t id, caf::error err) {
  auto it = self->state.fetches.find(id);
  if (it == self->state.fetches.end()) return;
  it->second.promise.deliver(std::move(err));
  self->state.fetches.erase(it);
}

// The error a fetch ends with when no copy is left: the last copy's own error (it names the file).
caf::error final_error(const Fetch& f) {
  if (f.last_error) return f.last_error;
  return caf::make_error(errc::no_replica, expert_file_name(f.req.range.key.layer, f.req.range.key.expert), std::string("no copy could be read"));
}

bool is_copy_error(const caf::error& e) {
  if (e.category() != caf::atom("ferry")) return false;
  auto c = static_cast<errc>(e.code());
  return c == errc::io_error || c == errc::short_read || c == errc::file_missing;
}

bool is_reader_gone(const caf::error& e) {
  if (e.category() == caf::atom("ferry")) return static_cast<errc>(e.code()) == errc::reader_down;
  return e == caf::sec::request_receiver_down;
}

void dispatch(service self, uint64_t id);

void on_read_error(service self, uint64_t id, uint32_t d, uint64_t bytes, const caf::actor_addr& used,
                   caf::error err) {
  auto& st = self->state;
  st.chooser->on_fail(d, bytes);
  auto it = st.fetches.find(id);
  if (it == st.fetches.end()) return;
  Fetch& f = it->second;
  ++st.dirs[d].stats.failures;
  trace(self, trace::READ_FAILED, f, d, 0, self->system().render(err));
  if (err.category() == caf::atom("ferry") && static_cast<errc>(err.code()) == errc::bad_request)
    return fail_fetch(self, id, std::move(err));  // the request itself is wrong: no copy helps
  if (is_copy_error(err)) {
    spdlog::warn("read service: {} failed on directory {} ({}){}", expert_file_name(f.req.range.key.layer, f.req.range.key.expert), d,
                 self->system().render(err), f.req.dirs.size() > f.failed.size() + 1 ? "; trying another copy" : "");
    f.failed.push_back(d);
  } else if (is_reader_gone(err) && st.dirs[d].addr == used) {
    st.dirs[d].alive = false;  // its down_msg restarts it; until then dispatch avoids it
    st.chooser->set_available(d, false);
  }
  f.last_error = std::move(err);
  dispatch(self, id);
}

void dispatch(service self, uint64_t id) {
  auto& st = self->state;
  auto it = st.fetches.find(id);
  if (it == st.fetches.end()) return;
  Fetch& f = it->second;
  std::vector<uint32_t> copies;
  for (uint32_t d : f.req.dirs)
    if (std::find(f.failed.begin(), f.failed.end(), d) == f.failed.end()) copies.push_back(d);
  if (copies.empty() || f.attempts >= st.cfg.max_attempts) return fail_fetch(self, id, final_error(f));
  std::vector<uint32_t> live;
  for (uint32_t d : copies)
    if (st.dirs[d].alive) live.push_back(d);
  if (live.empty()) {  // every remaining copy's reader is restarting: wait, then try again
    self->delayed_send(self, st.cfg.retry_backoff, retry_atom::value, id);
    return;
  }
  uint32_t d = st.chooser->choose(live, f.req.range.bytes);
  ++f.attempts;
  st.chooser->on_issue(d, f.req.range.bytes);
  trace(self, trace::READ_ISSUED, f, d, 0);
  read_req r{id, d, f.req.range};
  auto used = st.dirs[d].addr;
  uint64_t bytes = f.req.range.bytes;
  self->request(st.dirs[d].reader, st.cfg.read_timeout, read_atom::value, r)
      .then(
          [=](read_done& done) {
            auto& s = self->state;
            s.chooser->on_complete(d, done.req.range.bytes, done.service_ns, done.inflight);
            auto fit = s.fetches.find(id);
            if (fit == s.fetches.end()) return;
            ++s.dirs[d].stats.reads;
            s.dirs[d].stats.bytes += done.req.range.bytes;
            trace(self, trace::READ_COMPLETED, fit->second, d, done.service_ns);
            done.req.id = fit->second.req.id;  // the client's id (ours index fetches)
            fit->second.promise.deliver(done);
            s.fetches.erase(fit);
          },
          [=](caf::error& err) { on_read_error(self, id, d, bytes, used, std::move(err)); });
}

void on_reader_down(service self, const caf::down_msg& dm) {
  auto& st = self->state;
  for (uint32_t d = 0; d < st.dirs.size(); ++d) {
    Dir& dir = st.dirs[d];
    if (dir.addr != dm.source) continue;
    dir.alive = false;
    st.chooser->set_available(d, false);
    auto now = steady::now();
    while (!dir.restarts.empty() && now - dir.restarts.front() > st.cfg.restart_window) dir.restarts.pop_front();
    if (dir.restarts.size() >= st.cfg.restart_budget) {
      // Escalate instead of looping: our own supervisor decides what a lost drive means.
      spdlog::error("read service: reader of {} died ({}) and used its restart budget ({} in {} s)", st.cfg.dirs[d],
                    self->system().render(dm.reason), st.cfg.restart_budget, st.cfg.restart_window.count());
      auto err = caf::make_error(errc::restart_budget, st.cfg.dirs[d]);
      for (auto& [id, f] : st.fetches) f.promise.deliver(err);
      st.fetches.clear();
      self->quit(err);
      return;
    }
    dir.restarts.push_back(now);
    ++dir.stats.restarts;
    spdlog::warn("read service: reader of {} died ({}); restarting ({} of {})", st.cfg.dirs[d],
                 self->system().render(dm.reason), dir.restarts.size(), st.cfg.restart_budget);
    st.trace(trace::READER_RESTART, 0, {}, {.dir = d, .bytes = 0, .detail = self->system().render(dm.reason)});
    start_reader(self, d);
    return;
  }
}

read_service_actor::behavior_type service_fun(service self, ReadServiceConfig cfg) {
  auto& st = self->state;
  st.chooser = std::make_unique<SourceChooser>(cfg.dirs.size(), cfg.chooser);
  for (uint32_t d = 0; d < cfg.initial_rates_bps.size() && d < cfg.dirs.size(); ++d)
    st.chooser->set_rate(d, cfg.initial_rates_bps[d]);
  st.cfg = std::move(cfg);
  st.trace = TraceEmitter(st.cfg.tracer, trace::DISK, 0);
  st.dirs.resize(st.cfg.dirs.size());
  for (uint32_t d = 0; d < st.dirs.size(); ++d) {
    st.dirs[d].stats.dir = d;
    start_reader(self, d);
  }
  // Readers are detached threads: they must stop when we do, whatever the reason.
  self->attach_functor([readers = st.readers](const caf::error&) {
    for (auto& r : *readers)
      if (r) caf::anon_send_exit(r, caf::exit_reason::user_shutdown);
  });
  self->set_down_handler([=](caf::down_msg& dm) { on_reader_down(self, dm); });
  return {
      [=](fetch_atom, fetch_req& req) -> caf::typed_response_promise<read_done> {
        auto rp = self->make_response_promise<read_done>();
        uint64_t id = self->state.next_id++;
        for (uint32_t d : req.dirs)
          if (d >= self->state.dirs.size()) {
            rp.deliver(caf::make_error(errc::bad_request, expert_file_name(req.range.key.layer, req.range.key.expert),
                                       "directory index " + std::to_string(d) + " out of range"));
            return rp;
          }
        self->state.fetches.emplace(id, Fetch{std::move(req), rp});
        dispatch(self, id);
        return rp;
      },
      [=](reader_atom, uint32_t d) -> caf::result<reader_actor> {
        if (d >= self->state.dirs.size()) return caf::make_error(errc::bad_request, "directory index out of range");
        return self->state.dirs[d].reader;
      },
      [=](stats_atom) {
        std::vector<dir_stats> out;
        for (uint32_t d = 0; d < self->state.dirs.size(); ++d) {
          auto s = self->state.dirs[d].stats;
          s.rate_bps = self->state.chooser->rate(d);
          s.queued_bytes = self->state.chooser->queued_bytes(d);
          out.push_back(s);
        }
        return out;
      },
      [=](retry_atom, uint64_t id) { dispatch(self, id); },
  };
}

}  // namespace

read_service_actor spawn_read_service(caf::actor_system& sys, ReadServiceConfig cfg) {
  return sys.spawn(service_fun, std::move(cfg));
}

}  // namespace ferry
