// plan_memory(): the fixed needs first, then the streaming decision, then the caches from what is left.
#include <fmt/format.h>

#include <algorithm>

#include "io/store/memory_plan.hpp"
#include "io/store/sizing.hpp"
#include "io/units.hpp"

namespace ferry {
namespace {

constexpr uint64_t kMinMargin = uint64_t(512) << 20;

uint64_t margin_of(uint64_t total) { return total ? std::max(kMinMargin, total / 20) : 0; }

// Rows a prompt pass computes at once: the whole context, or the prefill chunk when it is shorter.
uint64_t pass_rows(const PlanRequest& r, int64_t chunk) {
  const uint64_t ctx = uint64_t(std::max<int64_t>(r.ctx, 1));
  return chunk > 0 ? std::min(ctx, uint64_t(chunk)) : ctx;
}

// Spine, KV, state and activations of one sequence of r.ctx tokens, in the compute memory: the
// activations of one prompt pass of pass_rows rows, plus the keys and values a pass expands for every
// context token (unabsorbed MLA).
void fixed_needs(const PlanRequest& r, int64_t chunk, MemoryBudget& b) {
  const ModelFootprint& m = r.model;
  const uint64_t ctx = uint64_t(std::max<int64_t>(r.ctx, 1));
  b.spine = uint64_t(m.spine_bytes);
  b.kv = ctx * uint64_t(m.kv_bytes_per_token);
  b.state = uint64_t(m.state_bytes) * uint64_t(1 + std::max(r.state_snapshots, 0));
  b.activations = pass_rows(r, chunk) * uint64_t(m.act_bytes_per_row) + ctx * uint64_t(m.act_bytes_per_ctx);
  b.margin = margin_of(b.total);
}

uint64_t host_scratch_slots(const PlanRequest& r) {
  return r.scratch_slots ? r.scratch_slots : uint64_t(std::max<int64_t>(8, 2 * r.model.top_k));
}

// The scratch slots a prepared model's streaming needs in the compute memory.
uint64_t scratch_reserve(const PlanRequest& r) {
  if (!r.model.prepared) return 0;
  return (r.gpu ? uint64_t(r.device_scratch) : host_scratch_slots(r)) * uint64_t(r.model.expert_file_bytes);
}

// No --prefill-chunk: one pass over the whole context when it fits (with room for streaming's scratch
// slots), else the longest pass (a multiple of kPrefillChunkAlign, at least one) that does.
int64_t choose_chunk(const PlanRequest& r, MemoryBudget b) {
  fixed_needs(r, 0, b);
  const uint64_t scratch = scratch_reserve(r);
  if (!b.total || b.needed() + scratch <= b.total) return 0;
  const uint64_t per_row = uint64_t(r.model.act_bytes_per_row);
  const uint64_t rest = b.needed() + scratch - pass_rows(r, 0) * per_row;  // all but the pass's rows
  if (!per_row || rest >= b.total) return kPrefillChunkAlign;
  const int64_t rows = int64_t((b.total - rest) / per_row) / kPrefillChunkAlign * kPrefillChunkAlign;
  return std::max<int64_t>(rows, kPrefillChunkAlign);
}

// Longest context that fits beside the spine, state, scratch, margin and one pass's activations.
int64_t max_ctx(const PlanRequest& r, int64_t chunk, const MemoryBudget& b) {
  const uint64_t rows = chunk > 0 ? uint64_t(chunk) : 0;
  const uint64_t fixed = b.spine + b.state + b.scratch + b.margin + rows * uint64_t(r.model.act_bytes_per_row);
  const uint64_t per = uint64_t(r.model.kv_bytes_per_token + r.model.act_bytes_per_ctx + (chunk > 0 ? 0 : r.model.act_bytes_per_row));
  return b.total > fixed && per ? int64_t((b.total - fixed) / per) : 0;
}

std::string refuse_fixed(const PlanRequest& r, int64_t chunk, const MemoryBudget& b, const char* where) {
  if (b.spine + b.margin > b.total)
    return fmt::format("the spine ({}) does not fit in the {} {} {} (with a {} margin): {}", format_bytes(b.spine),
                       format_bytes(b.total), where, r.gpu ? "free" : "available", format_bytes(b.margin),
                       r.gpu ? "use --backend cpu, or a GPU with more memory" : "free host memory or use a smaller spine type");
  return fmt::format("a context of {} tokens needs {} ({} KV cache, {} state, {} activations of {}-row prompt passes) "
                     "beside the {} spine; the {} has {} {}: use -c {} or less",
                     r.ctx, format_bytes(b.kv + b.state + b.activations), format_bytes(b.kv), format_bytes(b.state),
                     format_bytes(b.activations), pass_rows(r, chunk), format_bytes(b.spine), where,
                     format_bytes(b.total), r.gpu ? "free" : "available", max_ctx(r, chunk, b)) +
         (r.prefill_chunk > kPrefillChunkAlign ? ", or a smaller --prefill-chunk" : "");
}

// Streams when asked, or (auto) when the experts do not fit where the in-memory engine keeps them.
std::string decide_streaming(const PlanRequest& r, MemoryPlan& p, MemoryBudget& compute) {
  const uint64_t all = uint64_t(r.model.experts_bytes);
  const bool known = compute.total > 0;
  const bool fit = !known || all <= compute.left();
  if (!r.model.prepared) {
    if (r.streaming == 1) return "--ssd-streaming needs a prepared model directory (spine.gguf + manifest.json from `ferry prepare`)";
    if (!fit)
      return fmt::format("the routed experts ({}) do not fit in the {} left of the {}: prepare the checkpoint with "
                         "`ferry prepare` to stream them from disk", format_bytes(all), format_bytes(compute.left()),
                         r.gpu ? "GPU" : "host memory");
    p.streaming = false;
  } else if (r.streaming == 0 && !fit) {
    return fmt::format("--no-ssd-streaming: the routed experts ({}) do not fit in the {} left of the {}: drop "
                       "--no-ssd-streaming (or pass --ssd-streaming) to stream them", format_bytes(all),
                       format_bytes(compute.left()), r.gpu ? "GPU" : "host memory");
  } else {
    p.streaming = r.streaming == 1 || (r.streaming == -1 && !fit);
  }
  if (!p.streaming) p.experts_in_memory = all;
  return "";
}

uint64_t requested_cache_bytes(const PlanRequest& r) {
  return r.cache_experts ? r.cache_experts * uint64_t(r.model.expert_file_bytes) : r.cache_bytes;
}

// CUDA: the device cache from the GPU's rest, the host pool from the host's.
std::string size_gpu_caches(const PlanRequest& r, MemoryPlan& p) {
  const uint64_t slot = uint64_t(r.model.expert_file_bytes), files = uint64_t(r.model.expert_files);
  const uint64_t dev_fit = p.device.total ? p.device.left() / slot : files;
  if (r.cache_set) {
    p.device_cache_experts = requested_cache_bytes(r) / slot;
    if (p.device_cache_experts > dev_fit)
      return fmt::format("--cache-experts: {} experts do not fit in the {} left on the GPU: use --cache-experts {} or less",
                         p.device_cache_experts, format_bytes(p.device.left()), dev_fit);
  } else {
    p.device_cache_experts = std::min(dev_fit, files);
  }
  const uint64_t host_fit = p.host.total ? p.host.left() : files * slot;
  if (r.host_pool_set) {
    p.host_pool_bytes = r.host_pool_bytes;
    if (p.host_pool_bytes > host_fit)
      return fmt::format("--host-pool {}: only {} of host memory is left: use --host-pool {} or less",
                         format_bytes(r.host_pool_bytes), format_bytes(host_fit), size_flag_value(host_fit));
  } else {
    p.host_pool_bytes = std::min(host_fit, files * slot) / slot * slot;
  }
  return "";
}

// CPU: the host pool is the compute tier (--cache-experts and --host-pool both size it).
std::string size_cpu_pool(const PlanRequest& r, MemoryPlan& p) {
  const uint64_t slot = uint64_t(r.model.expert_file_bytes), files = uint64_t(r.model.expert_files);
  const uint64_t host_fit = p.host.total ? p.host.left() : files * slot;
  if (r.cache_set || r.host_pool_set) {
    p.host_pool_bytes = std::max(requested_cache_bytes(r), r.host_pool_bytes);
    if (p.host_pool_bytes > host_fit)
      return fmt::format("{}: {} does not fit in the {} of host memory left: use {} {} or less",
                         r.cache_set ? "--cache-experts" : "--host-pool", format_bytes(p.host_pool_bytes),
                         format_bytes(host_fit), r.cache_set ? "--cache-experts" : "--host-pool",
                         r.cache_set ? std::to_string(host_fit / slot) : size_flag_value(host_fit));
  } else {
    p.host_pool_bytes = std::min(host_fit, files * slot) / slot * slot;
  }
  return "";
}

void plan_flags(const PlanRequest& r, MemoryPlan& p) {
  p.flags.push_back(fmt::format("-c {}", r.ctx));
  if (p.prefill_chunk) p.flags.push_back(fmt::format("--prefill-chunk {}", p.prefill_chunk));
  if (!p.streaming) {
    if (r.model.prepared) p.flags.push_back("--no-ssd-streaming");
    return;
  }
  p.flags.push_back("--ssd-streaming");
  if (p.gpu) p.flags.push_back(fmt::format("--cache-experts {}", p.device_cache_experts));
  p.flags.push_back("--host-pool " + size_flag_value(p.host_pool_bytes));
}

}  // namespace

MemoryPlan plan_memory(const PlanRequest& r) {
  MemoryPlan p;
  p.gpu = r.gpu;
  p.ctx = r.ctx;
  p.expert_files = r.model.expert_files;
  p.host.total = r.host_available;
  p.host.margin = margin_of(p.host.total);
  MemoryBudget& compute = r.gpu ? p.device : p.host;
  if (r.gpu) p.device.total = r.gpu_free;
  const int64_t chunk = r.prefill_chunk ? r.prefill_chunk : choose_chunk(r, compute);
  p.prefill_chunk = uint64_t(chunk) < pass_rows(r, 0) ? chunk : 0;
  fixed_needs(r, chunk, compute);
  if (compute.total && compute.needed() > compute.total) {
    p.refusal = refuse_fixed(r, chunk, compute, r.gpu ? "GPU" : "host memory");
    return p;
  }
  if (!(p.refusal = decide_streaming(r, p, compute)).empty()) return p;
  const uint64_t slot = uint64_t(r.model.expert_file_bytes);
  if (p.streaming) {
    p.host.scratch = host_scratch_slots(r) * slot;
    if (r.gpu) p.device.scratch = uint64_t(r.device_scratch) * slot;
    p.refusal = r.gpu ? size_gpu_caches(r, p) : size_cpu_pool(r, p);
    p.host_pool_experts = slot ? p.host_pool_bytes / slot : 0;
  } else {
    compute.experts = p.experts_in_memory;
  }
  if (p.refusal.empty()) plan_flags(r, p);
  return p;
}

}  // namespace ferry
