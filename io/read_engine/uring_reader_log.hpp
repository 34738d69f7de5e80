// A logging seam for the storage I/O code: ferry_io does not depend on spdlog, so the actors layer
// installs a sink (actors/ routes it to spdlog); without one, warnings go to stderr. The I/O code
// says here which engine runs (io_uring or the pread pool), whether O_DIRECT and mlock held, and why not.
#pragma once

#include <functional>
#include <string>

#include <fmt/format.h>

namespace ferry::io {

enum class LogLevel { debug, info, warn, error };
using LogSink = std::function<void(LogLevel, const std::string&)>;

void set_log_sink(LogSink sink);
void log_message(LogLevel level, const std::string& msg);

template <class... Ts>
void log_info(fmt::format_string<Ts...> f, Ts&&... xs) {
  log_message(LogLevel::info, fmt::format(f, std::forward<Ts>(xs)...));
}
template <class... Ts>
void log_warn(fmt::format_string<Ts...> f, Ts&&... xs) {
  log_message(LogLevel::warn, fmt::format(f, std::forward<Ts>(xs)...));
}

}  // namespace ferry::io
