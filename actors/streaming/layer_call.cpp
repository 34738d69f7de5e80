#include "actors/streaming/layer_call.hpp"

#include <algorithm>
#include <thread>

#include <caf/all.hpp>
#include <fmt/format.h>

#include "actors/runtime/runtime.hpp"
#include "actors/streaming/device_tier.hpp"
#include "actors/streaming/host_lease.hpp"
#include "actors/streaming/upload_watcher.hpp"
#include "io/read_engine/pinned_arena.hpp"
#include "messages/trace.pb.h"

namespace ferry {
namespace {

uint32_t block_rows_of(std::span<const ExpertUse> uses) {
  uint32_t n = 1;
  for (const auto& u : uses)
    for (int32_t r : u.rows) n = std::max(n, uint32_t(r) + 1);
  return n;
}

// A call that failed because an actor it talked to is gone: the runtime's supervisor names that actor
// (its verdict may trail the bounced request by a moment, so a bounce waits up to 200 ms for it).
std::string name_the_loss(Runtime& rt, std::string error, bool receiver_down) {
  for (int i = 0; i < 20 && receiver_down && rt.failure().empty(); ++i)
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  std::string lost = rt.failure();
  return lost.empty() ? error : lost;
}

}  // namespace

LayerCall::LayerCall(const LayerCallEnv& env, uint64_t step, uint32_t layer, std::span<const ExpertUse> uses,
                     const ExpertCompute& compute)
    : env_(env), uses_(uses), compute_(compute), block_rows_(block_rows_of(uses)), dslot_(uses.size(), 0),
      dkeep_(uses.size(), false) {
  req_.step = step;
  req_.layer = layer;
  req_.block_rows = block_rows_;
}

std::string LayerCall::plan_device() {
  if (!env_.dev) return {};
  device_request dr{req_.step, req_.layer, block_rows_, {}, {}};
  for (const auto& u : uses_) {
    dr.experts.push_back(uint32_t(u.expert));
    dr.rows.push_back(uint32_t(u.rows.size()));
  }
  device_plan plan;
  std::string error;
  bool receiver_down = false;
  auto& self = *env_.self;
  self->request(env_.dcache, std::chrono::seconds(30), plan_atom_v, std::move(dr))
      .receive([&](device_plan& p) { plan = std::move(p); },
               [&](caf::error& e) {
                 error = describe_error(self->system(), e);
                 receiver_down = e == caf::sec::request_receiver_down;
               });
  if (error.empty() && plan.places.size() != uses_.size()) error = "malformed plan";
  if (!error.empty()) return "device cache: " + name_the_loss(*env_.rt, error, receiver_down);
  for (size_t i = 0; i < uses_.size(); ++i) {
    dslot_[i] = plan.places[i].slot;
    dkeep_[i] = plan.places[i].admitted;
    if (plan.places[i].hit) hits_.push_back(i);
  }
  return {};
}

void LayerCall::schedule_misses() {
  size_t next_hit = 0;
  for (size_t i = 0; i < uses_.size(); ++i) {
    if (next_hit < hits_.size() && hits_[next_hit] == i) {
      ++next_hit;
      continue;
    }
    expert_use u;
    u.expert = uint32_t(uses_[i].expert);
    u.device_keeps = dkeep_[i] && env_.exclusive_tiers;
    for (int32_t r : uses_[i].rows) u.rows.push_back(uint32_t(r));
    index_[u.expert] = i;
    req_.experts.push_back(std::move(u));
  }
  auto& self = *env_.self;
  if (has_misses()) self->send(env_.sched, schedule_atom_v, req_, caf::actor_cast<expert_sink_actor>(self));
}

void LayerCall::compute_device_hits() {
  if (hits_.empty()) return;  // device hits: no read, no upload; computed while the reads run
  std::vector<ExpertWeights> w;
  for (size_t i : hits_) w.push_back(env_.dev->at(dslot_[i]));
  compute_(hits_, w);
  for (size_t i : hits_) env_.dev->computed(dslot_[i]);
  computed_ += hits_.size();
}

void LayerCall::compute_one(size_t i, const ExpertWeights& w) {
  compute_(std::span<const size_t>(&i, 1), std::span<const ExpertWeights>(&w, 1));
  ++computed_;
}

// One landed expert. Its host-slot pin came with the message: the lease adopts it, so it is released
// whatever happens here (at once for a stale arrival, after compute on the CPU, after the upload).
void LayerCall::on_ready(const expert_ready& r) {
  const expert_key k{r.layer, r.expert};
  HostLease lease = env_.release_via_scheduler ? HostLease(env_.sched, k) : HostLease(env_.pool, k);
  auto it = index_.find(r.expert);
  if (r.step != req_.step || it == index_.end()) return;  // a call that failed earlier
  const size_t i = it->second;
  const std::byte* host = env_.arena->slot(r.where.slot) + r.where.offset;
  if (!env_.dev) return compute_one(i, env_.geo.view(host));
  const ExpertWeights w = env_.dev->upload(dslot_[i], host);
  env_.trace(trace::UPLOAD, req_.step, k,  // dir = the upload queue it went on
             {uint32_t(uses_[i].rows.size()), 0, env_.dev->last_queue(), env_.dev->expert_bytes(), {}});
  compute_one(i, w);
  env_.dev->computed(dslot_[i]);
  env_.uploads->watch(dslot_[i], std::move(lease));
}

LayerCallResult LayerCall::finish() {
  LayerCallResult res;
  res.device_hits = uint32_t(hits_.size());
  auto& self = *env_.self;
  bool done = !has_misses(), receiver_down = false;
  const auto deadline = std::chrono::steady_clock::now() + env_.timeout;
  while (!done) {
    const auto left = std::max(std::chrono::steady_clock::duration::zero(), deadline - std::chrono::steady_clock::now());
    self->receive(
        [&](ready_atom, const expert_ready& r) { on_ready(r); },
        [&](layer_summary& x) {
          res.sum = x;
          done = true;
        },
        [&](caf::error& e) {
          res.error = describe_error(self->system(), e);
          receiver_down = e == caf::sec::request_receiver_down;
          done = true;
        },
        caf::after(std::chrono::duration_cast<std::chrono::microseconds>(left)) >> [&] {
          res.error = fmt::format("layer {} waited {} ms for its experts", req_.layer, env_.timeout.count());
          done = true;
        });
  }
  if (env_.dev) {
    env_.uploads->drain();  // the call ends after every upload (the host slots are back in the pool)
    self->send(env_.dcache, done_atom_v, req_.step);
  }
  if (res.error.empty() && computed_ != uses_.size())
    res.error = fmt::format("layer {}: {} of {} experts arrived", req_.layer, computed_, uses_.size());
  if (!res.error.empty()) res.error = name_the_loss(*env_.rt, std::move(res.error), receiver_down);
  return res;
}

}  // namespace ferry
