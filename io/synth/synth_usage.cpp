#include "io/synth/synth_usage.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <cstring>
#include <set>

#include "io/formats/convert.hpp"
#include "io/errors.hpp"

namespace ferry {

SynthUsage::SynthUsage(const std::filesystem::path& file) : counts(load_usage(file)) {
  std::set<int> ls;
  for (const auto& [id, n] : counts) {
    ls.insert(int(id >> 32));
    n_experts = std::max(n_experts, int(id & 0xffffffffu) + 1);
  }
  layers.assign(ls.begin(), ls.end());
  if (layers.empty()) throw FormatError(fmt::format("{}: no usage counts", file.string()));
}

std::vector<int64_t> SynthUsage::layer_counts(int moe_index, int64_t E, int& usage_layer) const {
  usage_layer = layers[size_t(moe_index) % layers.size()];
  std::vector<int64_t> v(size_t(E), 0);
  for (int64_t e = 0; e < E; ++e) {
    auto it = counts.find(key_id({usage_layer, int(e % n_experts)}));
    if (it != counts.end()) v[size_t(e)] = it->second;
  }
  return v;
}

UsageCounts synth_layer_usage(const ModelConfig& c, const SynthUsage& usage) {
  UsageCounts out;
  const auto moe = moe_layer_indexes(c);
  for (int64_t il = 0; il < c.n_layers; ++il) {
    if (moe[size_t(il)] < 0) continue;
    int ul = 0;
    const auto counts = usage.layer_counts(moe[size_t(il)], c.moe.n_experts, ul);
    for (size_t e = 0; e < counts.size(); ++e)
      if (counts[e] > 0) out[key_id({int32_t(il), int32_t(e)})] = counts[e];
  }
  return out;
}

std::vector<int> moe_layer_indexes(const ModelConfig& c) {
  std::vector<int> out(size_t(c.n_layers), -1);
  for (int64_t il = 0, m = 0; il < c.n_layers; ++il)
    if (c.ffn[size_t(il)] == Ffn::moe) out[size_t(il)] = int(m++);
  return out;
}

BiasFit fit_synth_router_bias(const ModelConfig& c, const SynthUsage& usage, int layer, const uint8_t* gate_bf16,
                              uint64_t seed) {
  RouterSim r{c.moe.n_experts, c.hidden, c.moe.top_k, c.moe.n_group, c.moe.topk_group, {}};
  r.gate.resize(size_t(c.moe.n_experts * c.hidden));
  for (size_t i = 0; i < r.gate.size(); ++i) {
    uint16_t h;
    std::memcpy(&h, gate_bf16 + 2 * i, 2);
    r.gate[i] = bf16_to_f32(h);
  }
  const int m = moe_layer_indexes(c).at(size_t(layer));
  if (m < 0) throw ConfigError(fmt::format("synth: layer {} has no router (not a MoE layer)", layer));
  int usage_layer = 0;
  BiasFit fit = fit_router_bias(r, usage_shares(usage.layer_counts(m, c.moe.n_experts, usage_layer)), seed + uint64_t(layer));
  fit.tracking.layer = layer;
  fit.tracking.usage_layer = usage_layer;
  return fit;
}

}  // namespace ferry
