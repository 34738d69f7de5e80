// The project's error enum for errors that travel between actors as caf::error values. Each error's
// context message carries what a person needs to act on it: for I/O errors the file path first, then
// the errno (see io_error_file()).
#pragma once

#include <cstdint>
#include <string>

#include <caf/error.hpp>
#include <caf/fwd.hpp>

namespace ferry {

enum class errc : uint8_t {
  none = 0,
  io_error,          // the kernel returned an error for a read (context: path, errno)
  short_read,        // fewer bytes than requested before EOF (context: path, got, wanted)
  file_missing,      // no such expert file in that directory (context: path)
  no_replica,        // every copy of an expert failed (context: path of the last copy, errno)
  reader_down,       // the reader for a directory died and its restart budget is spent
  bad_request,       // a request outside the reader's limits (alignment, slot size) (context: why)
  restart_budget,    // a supervisor escalates: too many restarts in its window
  timeout,           // a read did not complete before its deadline
  drafter_unavailable,  // the drafter sidecar is not running (starting, backing off) (context: why)
  drafter_failed,       // the sidecar crashed, hung, or answered garbage (context: kind, detail)
  actor_down,           // a runtime actor that cannot be restarted stopped (context: what and why)
};

std::string to_string(errc x);

// The path an I/O error names, or "" when the error carries none.
std::string io_error_file(const caf::error& e);

// Registers the ferry type-ID block and the "ferry" error category on a CAF config. Every actor system
// that runs ferry actors calls this once.
void register_ferry_types(caf::actor_system_config& cfg);

}  // namespace ferry

CAF_ERROR_CODE_ENUM(ferry::errc, "ferry")
