// The tracer writes length-delimited Protobuf records that parse back with the same fields, and the
// read service's reads show up in the trace.
#include <filesystem>
#include <fstream>

#include "actors/readers/reader_supervisor.hpp"
#include "actors/tracing/trace_file.hpp"
#include "actors/tracing/tracer_actor.hpp"
#include "messages/trace_record.hpp"
#include "io/errors.hpp"
#include "tests/actors/readers/test_support.hpp"

using namespace ferry;
using namespace ferry::test;
using namespace std::chrono_literals;

namespace {
uint64_t flush(caf::scoped_actor& self, const tracer_actor& t) {
  uint64_t n = 0;
  self->request(t, 5s, flush_atom_v).receive([&](uint64_t x) { n = x; }, [&](caf::error& e) { FAIL() << caf::to_string(e); });
  return n;
}
}  // namespace

TEST(Tracer, EventsWrittenParseBackWithTheirFields) {
  auto path = fresh_dir("tracer") + "/events.trace";
  ActorSystem as;
  caf::scoped_actor self{*as.sys};
  auto t = spawn_tracer(*as.sys, path, {"/nvme0/x", "/nvme1/x"});
  for (uint32_t i = 0; i < 100; ++i) {
    trace::Event e;
    e.set_kind(static_cast<trace::Kind>(1 + i % 12));
    e.set_t_ns(trace_now_ns());
    e.set_request_id(i);
    e.set_layer(i % 7);
    e.set_expert(i);
    e.set_tier(static_cast<trace::Tier>(1 + i % 3));
    e.set_dir(i % 2);
    e.set_bytes(4096ull * i);
    e.set_dur_ns(10 * i);
    e.set_rows(i % 16);
    e.set_detail(i == 42 ? "L3-E42.bin: Input/output error" : "");
    self->send(t, trace_atom_v, e);
  }
  EXPECT_EQ(flush(self, t), 100u);
  auto tf = read_trace_file(path);
  EXPECT_EQ(tf.header.format(), "ferry-trace/1");
  ASSERT_EQ(tf.header.dirs_size(), 2);
  EXPECT_EQ(tf.header.dirs(1), "/nvme1/x");
  ASSERT_EQ(tf.events.size(), 100u);
  uint64_t last_t = 0;
  for (uint32_t i = 0; i < 100; ++i) {
    const auto& ev = tf.events[i];
    EXPECT_EQ(static_cast<uint32_t>(ev.kind()), 1 + i % 12);
    EXPECT_EQ(ev.request_id(), i);
    EXPECT_EQ(ev.layer(), i % 7);
    EXPECT_EQ(ev.expert(), i);
    EXPECT_EQ(static_cast<uint32_t>(ev.tier()), 1 + i % 3);
    EXPECT_EQ(ev.bytes(), 4096ull * i);
    EXPECT_EQ(ev.rows(), i % 16);
    EXPECT_GE(ev.t_ns(), last_t) << "one sender's events keep their order";
    last_t = ev.t_ns();
  }
  EXPECT_EQ(tf.events[42].detail(), "L3-E42.bin: Input/output error");
  caf::anon_send_exit(t, caf::exit_reason::user_shutdown);
}

TEST(Tracer, TruncatedTraceFileIsAFormatErrorNamingTheFile) {
  auto path = fresh_dir("tracer-trunc") + "/cut.trace";
  {
    ActorSystem as;
    caf::scoped_actor self{*as.sys};
    auto t = spawn_tracer(*as.sys, path, {});
    trace::Event e;
    e.set_kind(trace::READ_COMPLETED);
    e.set_detail(std::string(300, 'x'));
    self->send(t, trace_atom_v, e);
    flush(self, t);
    caf::anon_send_exit(t, caf::exit_reason::user_shutdown);
  }
  std::filesystem::resize_file(path, std::filesystem::file_size(path) - 10);
  try {
    read_trace_file(path);
    FAIL() << "a truncated trace parsed";
  } catch (const FormatError& e) {
    EXPECT_NE(std::string(e.what()).find("cut.trace"), std::string::npos) << e.what();
  }
  EXPECT_THROW(spawn_tracer(*ActorSystem().sys, "/nonexistent-dir/x.trace", {}), Error);
}

TEST(Tracer, ReadServiceTracesIssuedAndCompletedReads) {
  auto dir = fresh_dir("tracer-svc");
  auto path = dir + "/svc.trace";
  write_experts({dir}, 2, 8, 64 * 1024);
  ActorSystem as;
  caf::scoped_actor self{*as.sys};
  auto t = spawn_tracer(*as.sys, path, {dir});
  ReadServiceConfig cfg;
  cfg.dirs = {dir};
  cfg.arena = std::make_shared<io::PinnedArena>(8, 64 * 1024);
  cfg.tracer = t;
  auto svc = spawn_read_service(*as.sys, cfg);
  std::vector<std::tuple<fetch_atom, fetch_req>> reqs;
  for (uint32_t e = 0; e < 8; ++e) reqs.emplace_back(fetch_atom_v, fetch_req{e, {0}, {{2, e}, 0, 64 * 1024, {e, 0}}});
  for (auto& g : request_all(self, svc, reqs)) ASSERT_TRUE(g) << caf::to_string(g.error());
  caf::anon_send_exit(svc, caf::exit_reason::user_shutdown);
  flush(self, t);
  auto tf = read_trace_file(path);
  size_t issued = 0, completed = 0;
  for (auto& ev : tf.events) {
    issued += ev.kind() == trace::READ_ISSUED;
    if (ev.kind() == trace::READ_COMPLETED) {
      ++completed;
      EXPECT_EQ(ev.bytes(), 64u * 1024);
      EXPECT_GT(ev.dur_ns(), 0u);
      EXPECT_EQ(ev.tier(), trace::DISK);
    }
  }
  EXPECT_EQ(issued, 8u);
  EXPECT_EQ(completed, 8u);
  caf::anon_send_exit(t, caf::exit_reason::user_shutdown);
}
