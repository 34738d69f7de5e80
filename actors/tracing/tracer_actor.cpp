#include "actors/tracing/tracer_actor.hpp"

#include <cerrno>
#include <chrono>
#include <cstring>
#include <fstream>

#include <caf/all.hpp>
#include <fmt/format.h>
#include <google/protobuf/util/delimited_message_util.h>
#include <spdlog/spdlog.h>

#include "io/errors.hpp"
#include "messages/trace_record.hpp"

namespace ferry {

uint64_t trace_now_ns() {
  return static_cast<uint64_t>(
      std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now().time_since_epoch())
          .count());
}

namespace {

struct tracer_state {
  std::unique_ptr<std::ofstream> out;
  std::string path;
  uint64_t start_ns = 0;
  uint64_t written = 0;
  bool failed = false;
  static inline const char* name = "tracer";
};

using tracer_impl = tracer_actor::stateful_pointer<tracer_state>;

void write_record(tracer_state& st, const trace::Record& rec) {
  if (st.failed) return;
  if (!google::protobuf::util::SerializeDelimitedToOstream(rec, st.out.get()) || !*st.out) {
    // A full disk must not stop generation: report once and drop later events.
    spdlog::error("tracer: writing {} failed ({}); dropping further events", st.path, std::strerror(errno));
    st.failed = true;
  }
}

tracer_actor::behavior_type tracer_fun(tracer_impl self, std::shared_ptr<std::ofstream> file, std::string path,
                                       std::vector<std::string> dirs, TraceCapacities caps) {
  auto& st = self->state;
  st.out.reset(new std::ofstream(std::move(*file)));
  st.path = std::move(path);
  st.start_ns = trace_now_ns();
  trace::Record head;
  head.mutable_header()->set_format("ferry-trace/1");
  head.mutable_header()->set_start_unix_ns(static_cast<uint64_t>(
      std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::system_clock::now().time_since_epoch())
          .count()));
  for (auto& d : dirs) head.mutable_header()->add_dirs(d);
  head.mutable_header()->set_device_slots(caps.device_slots);
  head.mutable_header()->set_host_slots(caps.host_slots);
  head.mutable_header()->set_expert_bytes(caps.expert_bytes);
  write_record(st, head);
  return {
      [=](trace_atom, const trace::Event& e) {
        trace::Record rec;
        *rec.mutable_event() = e;
        const uint64_t t = e.t_ns() ? e.t_ns() : trace_now_ns(), start = self->state.start_ns;
        rec.mutable_event()->set_t_ns(t > start ? t - start : 0);  // since the tracer started
        write_record(self->state, rec);
        if (!self->state.failed) ++self->state.written;
      },
      [=](flush_atom) -> uint64_t {
        self->state.out->flush();
        return self->state.written;
      },
  };
}

}  // namespace

tracer_actor spawn_tracer(caf::actor_system& sys, const std::string& path, std::vector<std::string> dirs,
                          TraceCapacities caps) {
  // Open here so a bad path is the caller's exception, not a dead actor.
  auto file = std::make_shared<std::ofstream>(path, std::ios::binary | std::ios::trunc);
  if (!*file) throw Error(fmt::format("tracer: cannot create trace file {}: {}", path, std::strerror(errno)));
  return sys.spawn<caf::detached>(tracer_fun, file, path, std::move(dirs), caps);
}

}  // namespace ferry
