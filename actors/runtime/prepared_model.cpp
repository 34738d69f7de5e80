#include "actors/runtime/prepared_model.hpp"

#include <fstream>
#include <sstream>

#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include "actors/streaming/compute_tier.hpp"
#include "actors/streaming/expert_catalog.hpp"
#include "io/errors.hpp"
#include "io/store/expert_store.hpp"
#include "io/store/expert_store_prepare.hpp"
#include "io/formats/gguf.hpp"
#include "io/formats/mapped_file.hpp"

namespace ferry {

namespace fs = std::filesystem;

bool is_prepared_model(const fs::path& dir) {
  return fs::exists(dir / "manifest.json") && fs::exists(dir / "spine.gguf");
}

ModelConfig load_prepared_config(const fs::path& dir) {
  if (fs::exists(dir / "config.json")) return load_model_config(dir / "config.json");
  GgufFile g(dir / "spine.gguf");
  return parse_model_config(g.get_value<std::string>("ferry.config_json"), (dir / "spine.gguf").string() + " ferry.config_json");
}

namespace {

class SpineSource final : public TensorSource {
 public:
  SpineSource(const fs::path& file, std::string prefix) : g_(file), prefix_(std::move(prefix)) {}
  bool has(const std::string& name) const override { return g_.has(map(name)); }
  TensorView get(const std::string& name) const override {
    if (!g_.has(map(name)))
      throw TensorError(fmt::format("tensor '{}' (spine name '{}') is missing from {}", name, map(name), describe()));
    TensorView v = g_.get(map(name));
    v.name = name;
    return v;
  }
  std::vector<std::string> names() const override {
    std::vector<std::string> out;
    for (auto& n : g_.names()) out.push_back(hf_name_from_spine(n, prefix_));
    return out;
  }
  std::string describe() const override { return g_.describe(); }

 private:
  // Names already in spine form pass through (spine_gguf_name only strips prefixes).
  std::string map(const std::string& name) const { return g_.has(name) ? name : spine_gguf_name(name, prefix_); }
  GgufFile g_;
  std::string prefix_;
};

}  // namespace

std::unique_ptr<TensorSource> open_spine(const fs::path& dir, const ModelConfig& cfg) {
  return std::make_unique<SpineSource>(dir / "spine.gguf", cfg.tensor_prefix);
}

namespace {
// The first copy of k whose bytes match the manifest (the primary alone without verify). Throws
// FormatError naming the last bad copy when none does.
MappedFile open_good_copy(const ExpertCatalog& cat, const expert_key& k, bool verify) {
  std::string last;
  for (uint32_t dir : cat.copies_of(k)) {
    const std::string path = cat.path_of(k, dir);
    MappedFile f(path);
    if (f.size() < cat.expert_bytes)
      throw FormatError(fmt::format("expert file {}: {} bytes, expected {}", path, f.size(), cat.expert_bytes));
    if (!verify) return f;
    const uint64_t got = xxh64_bytes(f.data(), f.size()), want = cat.hash_of(k);
    if (got == want) return f;
    last = fmt::format("{}: xxh64 {:016x} != manifest {:016x}", path, got, want);
    spdlog::warn("expert file {}", last);
  }
  throw FormatError(fmt::format("expert file {} (checksum mismatch, no good copy; --no-verify-reads skips the check)", last));
}
}  // namespace

FileExperts::FileExperts(const ModelConfig& cfg, const ExpertCatalog& cat, Backend& be, bool verify)
    : n_experts_(cfg.moe.n_experts) {
  const ExpertGeometry geo = expert_geometry(cfg);
  if (geo.payload_bytes() != cat.expert_bytes)
    throw FormatError(fmt::format("manifest.json: expert_bytes {} but the model config makes experts of {} bytes",
                                  cat.expert_bytes, geo.payload_bytes()));
  experts_.resize(size_t(cfg.n_layers * n_experts_));
  for (int l = 0; l < cfg.n_layers; ++l) {
    if (cfg.ffn[size_t(l)] != Ffn::moe) continue;
    for (int e = 0; e < n_experts_; ++e) {
      const expert_key k{uint32_t(l), uint32_t(e)};
      MappedFile f = open_good_copy(cat, k, verify);
      Buf b(be, (cat.expert_bytes + 3) / 4);
      be.upload(b.get(), f.data(), cat.expert_bytes);
      experts_[size_t(l * n_experts_ + e)] = geo.view(reinterpret_cast<const std::byte*>(b.get()));
      storage_.push_back(std::move(b));
    }
  }
  prepare_resident_experts(experts_, be);
}

void FileExperts::fetch(int layer, std::span<const ExpertUse> uses, const ExpertCompute& compute) {
  std::vector<size_t> idx(uses.size());
  std::vector<ExpertWeights> w(uses.size());
  for (size_t i = 0; i < uses.size(); ++i) {
    idx[i] = i;
    w[i] = experts_[size_t(layer * n_experts_ + uses[i].expert)];
  }
  compute(idx, w);
}

}  // namespace ferry
