// The one way actors and the model thread put an event in the trace: a component keeps a TraceEmitter
// naming its tier and the usual byte count of its events (an expert file), and each event gives only
// what differs. An emitter without a tracer does nothing, so call sites need no `if (tracer)`.
#pragma once

#include <cstdint>
#include <string>

#include "messages/messages.hpp"

namespace ferry {

// The fields of one event beyond kind, request id and key (trace.proto Event).
struct TraceFields {
  uint32_t rows = 0;
  uint64_t dur_ns = 0;
  uint32_t dir = 0;
  uint64_t bytes = UINT64_MAX;  // UINT64_MAX: the emitter's default
  std::string detail;
};

class TraceEmitter {
 public:
  TraceEmitter() = default;
  TraceEmitter(tracer_actor tracer, uint32_t tier, uint64_t bytes)
      : tracer_(std::move(tracer)), tier_(tier), bytes_(bytes) {}

  explicit operator bool() const { return static_cast<bool>(tracer_); }
  // Stamps the event now and sends it to the tracer (fire and forget).
  void operator()(uint32_t kind, uint64_t request_id, const expert_key& k, TraceFields f = {}) const;

 private:
  tracer_actor tracer_;
  uint32_t tier_ = 0;
  uint64_t bytes_ = 0;
};

}  // namespace ferry
