#include "io/read_engine/uring_reader_log.hpp"

#include <cstdio>
#include <mutex>

namespace ferry::io {
namespace {
std::mutex g_mu;
LogSink g_sink;
}  // namespace

void set_log_sink(LogSink sink) {
  std::lock_guard lk(g_mu);
  g_sink = std::move(sink);
}

void log_message(LogLevel level, const std::string& msg) {
  std::lock_guard lk(g_mu);
  if (g_sink) {
    g_sink(level, msg);
  } else if (level >= LogLevel::warn) {
    std::fprintf(stderr, "ferry io: %s\n", msg.c_str());
  }
}

}  // namespace ferry::io
