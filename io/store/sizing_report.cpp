// Parsing and printing of sizes, and the `ferry inspect` report (text and JSON).
#include <fmt/format.h>

#include <cctype>
#include <cmath>
#include <limits>

#include "io/errors.hpp"
#include "io/store/sizing.hpp"

namespace ferry {

namespace {

std::string grouped(int64_t v) {
  std::string s = std::to_string(v), out;
  const int n = int(s.size());
  for (int i = 0; i < n; ++i) {
    out += s[i];
    const int left = n - 1 - i;
    if (left > 0 && left % 3 == 0 && s[i] != '-') out += ',';
  }
  return out;
}

std::string ctx_name(int64_t ctx) {
  return ctx >= (1 << 20) ? fmt::format("{}M", ctx >> 20) : fmt::format("{}K", ctx >> 10);
}

}  // namespace

nlohmann::json sizing_json(const ModelSizing& s, const FitInput& in) {
  nlohmann::json j;
  j["arch"] = s.arch;
  j["layers"] = {{"total", s.n_layers}, {"kda", s.n_kda}, {"mla", s.n_mla}, {"dsa", s.n_dsa},
                 {"gqa", s.n_gqa}, {"dense_ffn", s.n_dense}, {"moe", s.n_moe}};
  auto& d = j["params_by_dtype"] = nlohmann::json::array();
  for (const auto& x : s.by_dtype) d.push_back({{"dtype", x.dtype}, {"params", x.params}, {"bytes", x.bytes}});
  j["params_total"] = s.params_total;
  j["params_active"] = s.params_active;
  j["experts"] = {{"per_layer", s.n_experts}, {"files", s.expert_files}, {"payload_bytes", s.expert_bytes},
                  {"file_bytes", s.expert_file_bytes}, {"total_bytes", s.experts_total_bytes}};
  j["spine"] = {{"tensors", s.spine_tensors}, {"q8_0_bytes", s.spine_bytes[0]}, {"bf16_bytes", s.spine_bytes[1]},
                {"f32_bytes", s.spine_bytes[2]}};
  j["kv_bytes_per_token"] = s.kv_bytes_per_token;
  j["kda_state_bytes_per_seq"] = s.kda_state_bytes;
  j["conv_state_bytes_per_seq"] = s.conv_state_bytes;
  auto& t = j["memory"] = nlohmann::json::array();
  for (const auto& r : memory_table(s, in)) {
    nlohmann::json row = {{"context", r.context}, {"seqs", r.seqs}, {"kv_bytes", r.kv_bytes},
                          {"state_bytes", r.state_bytes}, {"gpu_bytes", r.gpu_bytes}};
    if (in.gpu_mem > 0) {
      row["fits"] = r.fits;
      row["gpu_expert_slots"] = r.gpu_expert_slots;
    }
    t.push_back(row);
  }
  j["fit"] = {{"spine_type", to_string(in.spine)}, {"gpu_mem", in.gpu_mem}, {"host_mem", in.host_mem},
              {"host_expert_slots", host_expert_slots(s, in)}, {"max_context_one_seq", max_context_one_seq(s, in)}};
  return j;
}

namespace {

void report_fit(std::string& o, const ModelSizing& s, const FitInput& in) {
  if (in.gpu_mem > 0) {
    const int64_t mc = max_context_one_seq(s, in);
    o += fmt::format("GPU {}: spine ({}) + KV + state; one sequence fits up to {} tokens\n",
                     format_bytes(in.gpu_mem), to_string(in.spine),
                     mc == std::numeric_limits<int64_t>::max() ? std::string("any number of") : grouped(mc));
  }
  if (in.host_mem > 0 && s.expert_files > 0) {
    const int64_t h = host_expert_slots(s, in);
    o += fmt::format("host pool {}: {} experts ({:.1f}% of all {})\n", format_bytes(in.host_mem), grouped(h),
                     100.0 * double(std::min(h, s.expert_files)) / double(s.expert_files), grouped(s.expert_files));
  }
}

}  // namespace

std::string sizing_report(const ModelSizing& s, const FitInput& in) {
  std::string o;
  o += fmt::format("architecture   {}\n", s.arch);
  o += fmt::format("layers         {} (KDA {}, MLA {}, DSA {}, GQA {}; dense FFN {}, MoE {})\n", s.n_layers, s.n_kda,
                   s.n_mla, s.n_dsa, s.n_gqa, s.n_dense, s.n_moe);
  o += fmt::format("parameters     {} total, {} active per token\n", grouped(s.params_total), grouped(s.params_active));
  for (const auto& d : s.by_dtype)
    o += fmt::format("  {:<24} {:>20} params {:>12}\n", d.dtype, grouped(d.params), format_bytes(d.bytes));
  if (s.expert_files > 0)
    o += fmt::format("experts        {} per MoE layer, {} files of {} B ({} on disk), {} in all\n", s.n_experts,
                     grouped(s.expert_files), grouped(s.expert_bytes), grouped(s.expert_file_bytes),
                     format_bytes(s.experts_total_bytes));
  o += fmt::format("spine          {} tensors: q8_0 {}, bf16 {}, f32 {}\n", s.spine_tensors, format_bytes(s.spine_bytes[0]),
                   format_bytes(s.spine_bytes[1]), format_bytes(s.spine_bytes[2]));
  o += fmt::format("KV cache       {} B per token\n", grouped(s.kv_bytes_per_token));
  o += fmt::format("KDA state      {:.2f} GB per sequence ({} B) + conv state {}\n", double(s.kda_state_bytes) / 1e9,
                   grouped(s.kda_state_bytes), format_bytes(s.conv_state_bytes));
  o += fmt::format("\nmemory ({} spine)  context seqs       KV      state   GPU total{}\n", to_string(in.spine),
                   in.gpu_mem > 0 ? "   GPU expert cache" : "");
  for (const auto& r : memory_table(s, in)) {
    o += fmt::format("                  {:>7} {:>4} {:>10} {:>10} {:>11}", ctx_name(r.context), r.seqs,
                     format_bytes(r.kv_bytes), format_bytes(r.state_bytes), format_bytes(r.gpu_bytes));
    if (in.gpu_mem > 0) o += r.fits ? fmt::format("   {} experts", grouped(r.gpu_expert_slots)) : "   does not fit";
    o += "\n";
  }
  report_fit(o, s, in);
  return o;
}

}  // namespace ferry
