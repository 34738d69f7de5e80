// Reading a trace file written by the tracer actor back into its Protobuf records.
#pragma once

#include <string>
#include <vector>

#include "messages/trace.pb.h"

namespace ferry {

struct TraceFile {
  trace::Header header;
  std::vector<trace::Event> events;
};

// Throws ferry::FormatError naming the file and the record index for a truncated or malformed file.
TraceFile read_trace_file(const std::string& path);

}  // namespace ferry
