// Writing a synthetic checkpoint: config, tensors (streamed, one at a time), tokenizer.
#include "io/synth.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <cstring>
#include <map>
#include <set>

#include "io/convert.hpp"
#include "io/errors.hpp"
#include "io/expert_store.hpp"
#include "io/progress.hpp"
#include "io/safetensors.hpp"
#include "io/synth_layout.hpp"
#include "io/synth_router.hpp"
#include "io/synth_tokenizer_data.hpp"
#include "io/synth_values.hpp"

namespace fs = std::filesystem;

namespace ferry {

namespace {

// The usage file's counts for one of our MoE layers: our m-th MoE layer takes the m-th layer
// present in the file (wrapping), our expert e takes its expert e (wrapping past the file's count).
struct UsageMap {
  UsageCounts counts;
  std::vector<int> layers;
  int n_experts = 0;

  explicit UsageMap(const fs::path& file) : counts(load_usage(file)) {
    std::set<int> ls;
    for (const auto& [id, n] : counts) {
      ls.insert(int(id >> 32));
      n_experts = std::max(n_experts, int(id & 0xffffffffu) + 1);
    }
    layers.assign(ls.begin(), ls.end());
    if (layers.empty()) throw FormatError(fmt::format("{}: no usage counts", file.string()));
  }
  std::vector<int64_t> layer_counts(int moe_index, int64_t E, int& usage_layer) const {
    usage_layer = layers[size_t(moe_index) % layers.size()];
    std::vector<int64_t> v(size_t(E), 0);
    for (int64_t e = 0; e < E; ++e) {
      auto it = counts.find(key_id({usage_layer, int(e % n_experts)}));
      if (it != counts.end()) v[size_t(e)] = it->second;
    }
    return v;
  }
};

// State shared by the fill callbacks, which the writer calls in order, one tensor at a time.
struct Filler {
  const ModelConfig& c;
  const SynthOptions& opt;
  std::unique_ptr<UsageMap> usage;
  std::map<int, int> moe_index;                // decoder layer -> 0-based MoE layer count
  std::string stash_base;                      // the expert matrix whose scales are in stash
  std::vector<uint8_t> stash;
  std::vector<float> gate;                     // the last router weight written (BF16-rounded)
  std::vector<RouterTracking> tracking;
  Progress* progress = nullptr;

  void expert(const TensorSpec& t, uint8_t* dst) {
    const auto base = t.name.substr(0, t.name.rfind('.'));
    const auto [rows, cols] = expert_matrix_shape(c, t.matrix);
    if (t.is_scale && stash_base == base) {
      std::memcpy(dst, stash.data(), stash.size());
      return;
    }
    const auto blocks = synth_expert_blocks(rows, cols, opt.seed, base);
    std::vector<uint8_t> packed(size_t(rows * cols / 2));
    stash.resize(size_t(rows * cols / kQK));
    ggml_mxfp4_to_ct(blocks.data(), rows, cols, packed.data(), stash.data());
    stash_base = base;
    std::memcpy(dst, t.is_scale ? stash.data() : packed.data(), t.is_scale ? stash.size() : packed.size());
  }

  void plain(const TensorSpec& t, uint8_t* dst) {
    const bool router_w = t.name.size() > 12 && t.name.ends_with(".gate.weight") && t.layer >= 0 && c.ffn[size_t(t.layer)] == Ffn::moe;
    const bool bias = t.name.ends_with(".e_score_correction_bias");
    if (bias && usage) return fitted_bias(t, dst);
    synth_fill_plain(t, c, opt.seed, dst);
    if (router_w && usage) {
      gate.resize(size_t(t.numel()));
      for (size_t i = 0; i < gate.size(); ++i) {
        uint16_t h;
        std::memcpy(&h, dst + 2 * i, 2);
        gate[i] = bf16_to_f32(h);
      }
    }
  }

  void fitted_bias(const TensorSpec& t, uint8_t* dst) {
    RouterSim r{c.moe.n_experts, c.hidden, c.moe.top_k, c.moe.n_group, c.moe.topk_group, gate};
    int usage_layer = 0;
    const int m = moe_index.at(t.layer);
    const auto fit = fit_router_bias(r, usage_shares(usage->layer_counts(m, c.moe.n_experts, usage_layer)), opt.seed + uint64_t(t.layer));
    std::memcpy(dst, fit.bias.data(), fit.bias.size() * 4);
    RouterTracking tr = fit.tracking;
    tr.layer = t.layer;
    tr.usage_layer = usage_layer;
    tracking.push_back(tr);
  }
};

void write_text(const fs::path& p, std::string_view text) { write_file_atomic(p, text.data(), text.size()); }

int64_t default_shard_bytes(int64_t total) {
  const int64_t third = (total + 2) / 3;  // small models still get 3 shards and an index, like the real layout
  return std::clamp<int64_t>(third, int64_t(1) << 20, int64_t(5'000'000'000));
}

}  // namespace

SynthResult synth_checkpoint(const fs::path& out, const SynthOptions& opt) {
  fs::create_directories(out);
  const std::string cfg_text = synth_config_json(opt);
  const ModelConfig c = parse_model_config(cfg_text, (out / "config.json").string());
  Filler f{c, opt, nullptr, {}, {}, {}, {}, {}, nullptr};
  if (!opt.usage.empty()) f.usage = std::make_unique<UsageMap>(opt.usage);
  for (int64_t il = 0, m = 0; il < c.n_layers; ++il)
    if (c.ffn[size_t(il)] == Ffn::moe) f.moe_index[int(il)] = int(m++);

  std::vector<TensorToWrite> tensors;
  int64_t total = 0;
  visit_checkpoint_layout(c, [&](const TensorSpec& t) {
    total += t.bytes();
    tensors.push_back({t.name, t.dtype, t.shape, [&f, t](uint8_t* dst, size_t n) {
                         if (t.routed()) f.expert(t, dst);
                         else f.plain(t, dst);
                         if (f.progress) f.progress->add(1, int64_t(n));
                       }});
  });
  Progress progress("synth", int64_t(tensors.size()), total, Progress::Options{opt.progress, -1, 5.0, stderr});
  f.progress = &progress;
  SynthResult r;
  r.files = write_safetensors_checkpoint(out, tensors, uint64_t(opt.shard_bytes > 0 ? opt.shard_bytes : default_shard_bytes(total)));
  progress.finish();
  r.tensors = int64_t(tensors.size());
  r.bytes = total;
  r.tracking = std::move(f.tracking);
  write_text(out / "config.json", cfg_text);
  r.files.push_back(out / "config.json");
  if (c.is_kimi()) {
    write_text(out / "tiktoken.model", synth_tokenizer::kTiktokenModel);
    write_text(out / "tokenizer_config.json", synth_tokenizer::kTokenizerConfig);
    write_text(out / "special_tokens_map.json", synth_tokenizer::kSpecialTokensMap);
    for (const char* n : {"tiktoken.model", "tokenizer_config.json", "special_tokens_map.json"}) r.files.push_back(out / n);
  }
  return r;
}

}  // namespace ferry
