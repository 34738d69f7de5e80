// The memory plan's arithmetic. Estimates are deliberately on the safe side: the KV cache and state
// are f32 as Model::new_state allocates them, the prompt pass may cover the whole context at once,
// and a margin of max(512 MiB, 5%) stays free for what the estimate misses (allocator slack, CUDA
// workspaces, the HTTP server).
#include "io/store/memory_plan.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>

#include "io/errors.hpp"
#include "io/formats/gguf.hpp"
#include "io/store/expert_store.hpp"

namespace ferry {

ModelFootprint model_footprint(const ModelConfig& c, SpineType spine) {
  const ModelSizing s = size_model(c);
  ModelFootprint f;
  f.spine_bytes = s.spine_bytes[int(spine)];
  f.expert_file_bytes = s.expert_file_bytes;
  f.expert_files = s.expert_files;
  f.experts_bytes = s.expert_files * s.expert_bytes;
  f.kv_bytes_per_token = ((s.n_mla + s.n_dsa) * (c.kv_lora_rank + c.qk_rope_dim) + s.n_dsa * c.index_head_dim +
                          s.n_gqa * 2 * c.n_kv_heads * c.head_dim) * 4;
  f.state_bytes = s.kda_state_bytes + s.conv_state_bytes;
  const int64_t heads_qkv = c.n_heads * (c.qk_head_dim() + c.v_head_dim + 2 * c.head_dim);
  const int64_t ffn = std::max(c.intermediate, c.moe.moe_inter * std::max<int64_t>(c.moe.n_shared, 1));
  // A CUDA prompt pass prepares each tensor-core matmul's x as two fp16 halves (4 bytes per element,
  // kernels/cuda/matmul_mma.cuh) in one scratch: the widest plain input (ffn), or a routed batch's x and
  // its intermediate (hidden + top_k x moe_inter per row).
  const int64_t mma_prep = std::max(ffn, c.hidden + c.moe.top_k * c.moe.moe_inter);
  f.act_bytes_per_row = 4 * (8 * c.hidden + 2 * heads_qkv + c.q_lora_rank + c.kv_lora_rank + 6 * c.kda_width() +
                             3 * c.moe.top_k * c.moe.moe_inter + 3 * ffn + 2 * c.moe.n_experts + mma_prep);
  f.act_bytes_per_ctx = 4 * heads_qkv;
  f.top_k = c.moe.top_k;
  return f;
}

ModelFootprint prepared_footprint(const ModelConfig& c, const Manifest& m, const std::filesystem::path& spine) {
  ModelFootprint f = model_footprint(c, SpineType::f32);
  f.prepared = true;
  f.spine_bytes = 0;
  // The loader keeps Q8_0 matrices as stored and widens BF16/F16 to f32.
  const GgufFile gguf(spine);
  for (const auto& t : gguf.tensor_infos()) {
    int64_t n = 1;
    for (auto d : t.shape) n *= d;
    f.spine_bytes += (t.dtype == DType::bf16 || t.dtype == DType::f16) ? n * 4 : int64_t(t.nbytes);
  }
  f.expert_file_bytes = m.file_bytes;
  f.expert_files = int64_t(m.experts.size());
  f.experts_bytes = f.expert_files * m.expert_bytes;
  return f;
}

uint64_t host_memory_available() {
  std::ifstream f("/proc/meminfo");
  std::string key;
  uint64_t kb = 0;
  std::string unit;
  while (f >> key >> kb >> unit)
    if (key == "MemAvailable:") return kb * 1024;
  return 0;
}

}  // namespace ferry

namespace ferry {
namespace {

std::string budget_line(const char* name, const MemoryBudget& b) {
  std::string o = fmt::format("  {:<6} {}: spine {}, KV {}, state {}, activations {}", name,
                              b.total ? format_bytes(int64_t(b.total)) : std::string("(size unknown)"),
                              format_bytes(int64_t(b.spine)), format_bytes(int64_t(b.kv)), format_bytes(int64_t(b.state)),
                              format_bytes(int64_t(b.activations)));
  if (b.scratch) o += fmt::format(", scratch slots {}", format_bytes(int64_t(b.scratch)));
  if (b.experts) o += fmt::format(", all experts {}", format_bytes(int64_t(b.experts)));
  return o + fmt::format(", margin {}; left {}\n", format_bytes(int64_t(b.margin)), format_bytes(int64_t(b.left())));
}

nlohmann::json budget_json(const MemoryBudget& b) {
  return {{"total", b.total},   {"spine", b.spine},     {"kv", b.kv},         {"state", b.state},
          {"activations", b.activations}, {"scratch", b.scratch}, {"experts", b.experts}, {"margin", b.margin},
          {"left", b.left()}};
}

std::string joined(const std::vector<std::string>& v) {
  std::string s;
  for (const auto& x : v) s += (s.empty() ? "" : " ") + x;
  return s;
}

}  // namespace

std::string format_plan(const MemoryPlan& p) {
  std::string o = fmt::format("memory plan ({}, context {} tokens{}):\n", p.gpu ? "CUDA" : "CPU", p.ctx,
                              p.prefill_chunk ? fmt::format(", prompts in passes of {} tokens", p.prefill_chunk) : "");
  if (p.gpu) o += budget_line("GPU", p.device);
  o += budget_line("host", p.host);
  if (!p.refusal.empty()) return o + "  refused: " + p.refusal + "\n";
  if (!p.streaming) {
    o += fmt::format("  experts: all {} in memory ({})\n", p.expert_files, format_bytes(int64_t(p.experts_in_memory)));
  } else {
    if (p.gpu) o += fmt::format("  device cache: {} experts\n", p.device_cache_experts);
    o += fmt::format("  host pool: {} ({} of {} experts); the rest streams from the expert files\n",
                     format_bytes(int64_t(p.host_pool_bytes)), p.host_pool_experts, p.expert_files);
  }
  return o + "  flags: " + joined(p.flags) + "\n";
}

nlohmann::json plan_json(const MemoryPlan& p) {
  nlohmann::json j = {{"backend", p.gpu ? "cuda" : "cpu"}, {"ctx", p.ctx}, {"prefill_chunk", p.prefill_chunk},
                      {"streaming", p.streaming},
                      {"host", budget_json(p.host)}, {"experts_in_memory", p.experts_in_memory},
                      {"device_cache_experts", p.device_cache_experts}, {"host_pool_bytes", p.host_pool_bytes},
                      {"host_pool_experts", p.host_pool_experts}, {"flags", joined(p.flags)}};
  if (p.gpu) j["gpu"] = budget_json(p.device);
  if (!p.refusal.empty()) j["refusal"] = p.refusal;
  return j;
}

}  // namespace ferry
