// The CAF side of the trace record: ferry.trace.Event (messages/trace.proto) travels between actors as
// itself, and this is its inspect (its Protobuf bytes, so serialization and to_string work). Included by
// whatever sends or receives trace events (the TraceEmitter, the tracer) and by the type-ID registration.
#pragma once

#include <string>

#include <caf/error.hpp>
#include <caf/meta/load_callback.hpp>
#include <caf/meta/type_name.hpp>
#include <caf/sec.hpp>

#include "messages/trace.pb.h"

namespace ferry::trace {

template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, Event& x) {
  std::string bytes;
  if constexpr (Inspector::reads_state) bytes = x.SerializeAsString();
  auto parse = [&]() -> caf::error {
    return x.ParseFromString(bytes) ? caf::error{} : caf::make_error(caf::sec::invalid_argument);
  };
  return f(caf::meta::type_name("trace_event"), bytes, caf::meta::load_callback(parse));
}

}  // namespace ferry::trace
