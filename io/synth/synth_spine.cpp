#include "io/synth/synth_spine.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <atomic>
#include <cstring>
#include <mutex>
#include <numeric>
#include <thread>

#include "io/errors.hpp"
#include "io/synth/synth_usage.hpp"
#include "io/synth/synth_values.hpp"

namespace ferry {

SynthSpineSource::SynthSpineSource(const ModelConfig& c, uint64_t seed, Order order, const SynthUsage* usage)
    : c_(c), seed_(seed), usage_(usage) {
  visit_checkpoint_layout(c, [&](const TensorSpec& t) {
    if (t.routed()) return;
    index_.emplace(t.name, specs_.size());
    specs_.push_back(t);
    names_.push_back(t.name);
  });
  data_.resize(specs_.size());
  if (order == Order::sorted) std::sort(names_.begin(), names_.end());
}

bool SynthSpineSource::fitted(const TensorSpec& t) const {
  return usage_ && t.name.ends_with(".e_score_correction_bias");
}

std::vector<size_t> SynthSpineSource::generation_order() const {
  std::vector<size_t> idx(specs_.size());
  std::iota(idx.begin(), idx.end(), size_t(0));
  std::stable_sort(idx.begin(), idx.end(), [&](size_t a, size_t b) { return specs_[a].bytes() > specs_[b].bytes(); });
  return idx;
}

void SynthSpineSource::generate(size_t i) {
  const TensorSpec& t = specs_[i];
  data_[i].reset(new uint8_t[size_t(std::max<int64_t>(t.bytes(), 1))]);  // default-init: no 2 GB memset
  if (!fitted(t)) synth_fill_plain(t, c_, seed_, data_[i].get());
}

std::vector<RouterTracking> SynthSpineSource::fit_biases(int threads) {
  if (!usage_) return {};
  // (router weight index, bias index) per MoE layer, in layer order.
  std::vector<std::pair<size_t, size_t>> layers;
  for (int il = 0; il < int(c_.n_layers); ++il) {
    if (c_.ffn[size_t(il)] != Ffn::moe) continue;
    const std::string m = expert_matrix_name(c_, il, 0, ExpertMatrix::gate);
    const std::string module = m.substr(0, m.find(".experts.0."));
    layers.emplace_back(index_.at(module + ".gate.weight"), index_.at(module + ".gate.e_score_correction_bias"));
  }
  std::vector<RouterTracking> out(layers.size());
  std::atomic<size_t> next{0};
  std::exception_ptr error;
  std::mutex mu;
  auto work = [&] {
    for (size_t k; (k = next++) < layers.size();) {
      try {
        const auto [gate, bias] = layers[k];
        const auto fit = fit_synth_router_bias(c_, *usage_, specs_[bias].layer, data_[gate].get(), seed_);
        std::memcpy(data_[bias].get(), fit.bias.data(), fit.bias.size() * 4);
        out[k] = fit.tracking;
      } catch (...) {
        std::lock_guard lock(mu);
        if (!error) error = std::current_exception();
      }
    }
  };
  std::vector<std::thread> pool;
  for (int t = 0; t < std::max(1, std::min<int>(threads, int(layers.size()))); ++t) pool.emplace_back(work);
  for (auto& t : pool) t.join();
  if (error) std::rethrow_exception(error);
  return out;
}

void SynthSpineSource::release() {
  for (auto& d : data_) d.reset();
}

TensorView SynthSpineSource::get(const std::string& name) const {
  auto it = index_.find(name);
  if (it == index_.end()) throw TensorError(fmt::format("{}: no tensor '{}'", describe(), name));
  const TensorSpec& t = specs_[it->second];
  // Reading a tensor before it is generated is a bug in the caller's sequencing, not bad input.
  if (!data_[it->second]) throw TensorError(fmt::format("{}: tensor '{}' read before it was generated", describe(), name));
  return TensorView{t.name, t.dtype, t.shape, data_[it->second].get(), size_t(t.bytes()), describe()};
}

}  // namespace ferry
