// Writing a synthetic checkpoint: config, tensors (streamed, one at a time), tokenizer.
#include "io/synth/synth.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <cstring>

#include "io/formats/convert.hpp"
#include "io/errors.hpp"
#include "io/store/expert_store.hpp"
#include "io/progress.hpp"
#include "io/formats/safetensors.hpp"
#include "io/synth/synth_layout.hpp"
#include "io/synth/synth_router.hpp"
#include "io/synth/synth_usage.hpp"
#include "io/synth/synth_tokenizer_data.hpp"
#include "io/synth/synth_values.hpp"

namespace fs = std::filesystem;

namespace ferry {

namespace {

// State shared by the fill callbacks, which the writer calls in order, one tensor at a time.
struct Filler {
  const ModelConfig& c;
  const SynthOptions& opt;
  std::unique_ptr<SynthUsage> usage;
  std::string stash_base;                      // the expert matrix whose scales are in stash
  std::vector<uint8_t> stash;
  std::vector<uint8_t> gate;                   // the last router weight written (stored BF16 bytes)
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
    if (router_w && usage) gate.assign(dst, dst + t.bytes());
  }

  void fitted_bias(const TensorSpec& t, uint8_t* dst) {
    const auto fit = fit_synth_router_bias(c, *usage, t.layer, gate.data(), opt.seed);
    std::memcpy(dst, fit.bias.data(), fit.bias.size() * 4);
    tracking.push_back(fit.tracking);
  }
};

void write_text(const fs::path& p, std::string_view text) { write_file_atomic(p, text.data(), text.size()); }

}  // namespace

int64_t synth_shard_bytes(const SynthOptions& opt, int64_t total) {
  if (opt.shard_bytes > 0) return opt.shard_bytes;
  const int64_t third = (total + 2) / 3;  // small models still get 3 shards and an index, like the real layout
  return std::clamp<int64_t>(third, int64_t(1) << 20, int64_t(5'000'000'000));
}

std::vector<fs::path> write_synth_side_files(const fs::path& dir, const ModelConfig& c, const std::string& cfg_text) {
  std::vector<fs::path> files;
  write_text(dir / "config.json", cfg_text);
  files.push_back(dir / "config.json");
  if (c.is_kimi()) {
    write_text(dir / "tiktoken.model", synth_tokenizer::kTiktokenModel);
    write_text(dir / "tokenizer_config.json", synth_tokenizer::kTokenizerConfig);
    write_text(dir / "special_tokens_map.json", synth_tokenizer::kSpecialTokensMap);
    for (const char* n : {"tiktoken.model", "tokenizer_config.json", "special_tokens_map.json"}) files.push_back(dir / n);
  }
  return files;
}

SynthResult synth_checkpoint(const fs::path& out, const SynthOptions& opt) {
  fs::create_directories(out);
  const std::string cfg_text = synth_config_json(opt);
  const ModelConfig c = parse_model_config(cfg_text, (out / "config.json").string());
  Filler f{c, opt, nullptr, {}, {}, {}, {}, nullptr};
  if (!opt.usage.empty()) f.usage = std::make_unique<SynthUsage>(opt.usage);

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
  r.files = write_safetensors_checkpoint(out, tensors, uint64_t(synth_shard_bytes(opt, total)));
  progress.finish();
  r.tensors = int64_t(tensors.size());
  r.bytes = total;
  r.tracking = std::move(f.tracking);
  for (auto& p : write_synth_side_files(out, c, cfg_text)) r.files.push_back(std::move(p));
  return r;
}

}  // namespace ferry
