#include "actors/tracing/trace_emitter.hpp"

#include <caf/send.hpp>

#include "actors/tracing/tracer_actor.hpp"
#include "messages/trace_record.hpp"

namespace ferry {

void TraceEmitter::operator()(uint32_t kind, uint64_t request_id, const expert_key& k, TraceFields f) const {
  if (!tracer_) return;
  trace::Event e;
  e.set_kind(static_cast<trace::Kind>(kind));
  e.set_t_ns(trace_now_ns());  // steady clock; the tracer makes it relative to its start
  e.set_request_id(request_id);
  e.set_layer(k.layer);
  e.set_expert(k.expert);
  e.set_tier(static_cast<trace::Tier>(tier_));
  e.set_dir(f.dir);
  e.set_bytes(f.bytes == UINT64_MAX ? bytes_ : f.bytes);
  e.set_dur_ns(f.dur_ns);
  e.set_rows(f.rows);
  e.set_detail(std::move(f.detail));
  caf::anon_send(tracer_, trace_atom_v, std::move(e));
}

}  // namespace ferry
