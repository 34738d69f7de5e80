#include "kernels/model/model.hpp"

#include <algorithm>
#include <cmath>
#include <stdexcept>
#include <string>

#include "io/errors.hpp"
#include "kernels/cpu/thread_pool.hpp"
#include "kernels/model/kept_x.hpp"
#include "kernels/model/model_ctx.hpp"

namespace ferry {

uint64_t fnv1a64(const void* data, size_t bytes) {
  const auto* p = static_cast<const unsigned char*>(data);
  uint64_t h = 1469598103934665603ull;
  for (size_t i = 0; i < bytes; ++i) {
    h ^= p[i];
    h *= 1099511628211ull;
  }
  return h;
}

namespace {

// RoPE inverse frequencies (HF modeling_rope_utils: default and YaRN), computed in double and rounded
// once; HF computes them in float32, the difference is below 1e-7 relative.
std::vector<float> rope_inv_freq(const RopeConfig& r, int64_t dim) {
  std::vector<float> f(static_cast<size_t>(dim / 2));
  const double base = r.theta;
  for (int64_t i = 0; i < dim / 2; ++i) {
    double inv = 1.0 / std::pow(base, static_cast<double>(2 * i) / static_cast<double>(dim));
    if (r.type == RopeType::yarn) {
      auto corr = [&](double rot) {
        return (static_cast<double>(dim) * std::log(static_cast<double>(r.original_max_position) / (rot * 2 * M_PI))) /
               (2 * std::log(base));
      };
      double low = std::max(std::floor(corr(r.beta_fast)), 0.0);
      double high = std::min(std::ceil(corr(r.beta_slow)), static_cast<double>(dim - 1));
      if (low == high) high += 0.001;
      double ramp = std::clamp((static_cast<double>(i) - low) / (high - low), 0.0, 1.0);
      double extrap = 1.0 - ramp;  // HF: inv_freq_extrapolation_factor = 1 - ramp
      inv = (inv / r.factor) * (1.0 - extrap) + inv * extrap;
    }
    f[static_cast<size_t>(i)] = static_cast<float>(inv);
  }
  return f;
}

}  // namespace

Model::Model(const ModelConfig& cfg, const TensorSource& src, Backend& be, const LoadOptions& opt,
             ExpertSource* experts)
    : cfg_(cfg), be_(be), indexer_ties_(opt.indexer_ties) {
  w_ = load_spine(cfg_, src, be_, opt, storage_);
  if (cfg_.count(Ffn::moe) > 0) {
    if (experts) {
      experts_ = experts;
    } else {
      resident_ = std::make_unique<ResidentExperts>(cfg_, src, be_);
      experts_ = resident_.get();
    }
    score_bias_host_.resize(static_cast<size_t>(cfg_.n_layers));
    for (int il = 0; il < cfg_.n_layers; ++il) {
      const LayerWeights& L = w_.layers[static_cast<size_t>(il)];
      if (cfg_.ffn[static_cast<size_t>(il)] != Ffn::moe) continue;
      auto& b = score_bias_host_[static_cast<size_t>(il)];
      b.resize(static_cast<size_t>(cfg_.moe.n_experts));
      be_.download(b.data(), L.moe.score_bias.get(), b.size() * sizeof(float));
    }
  }
  // Attention scale and RoPE tables.
  if (cfg_.count(Mixer::gqa) > 0) {
    attn_scale_ = 1.0f / std::sqrt(static_cast<float>(cfg_.head_dim));
    if (cfg_.rope.type != RopeType::none) inv_freq_ = rope_inv_freq(cfg_.rope, cfg_.head_dim);
  } else {
    attn_scale_ = static_cast<float>(1.0 / std::sqrt(static_cast<double>(cfg_.qk_head_dim())));
    if (cfg_.rope.type == RopeType::yarn) {
      if (cfg_.rope.mscale_all_dim > 0) {
        const float m = yarn_mscale(cfg_.rope.factor, cfg_.rope.mscale_all_dim);
        attn_scale_ = static_cast<float>(static_cast<double>(attn_scale_) * m * m);
        rope_attention_factor_ =
            yarn_mscale(cfg_.rope.factor, cfg_.rope.mscale) / yarn_mscale(cfg_.rope.factor, cfg_.rope.mscale_all_dim);
      } else {
        rope_attention_factor_ = yarn_mscale(cfg_.rope.factor, 1.0);
      }
    }
    if (cfg_.rope.type != RopeType::none && cfg_.qk_rope_dim > 0)
      inv_freq_ = rope_inv_freq(cfg_.rope, cfg_.qk_rope_dim);
  }
}

Model::~Model() = default;

std::unique_ptr<SeqState> Model::new_state(int64_t max_ctx) const {
  auto s = std::make_unique<SeqState>();
  s->max_ctx = max_ctx;
  s->layers.resize(static_cast<size_t>(cfg_.n_layers));
  const int64_t p = cfg_.kda_width(), w = cfg_.kda.conv_kernel;
  for (int il = 0; il < cfg_.n_layers; ++il) {
    LayerState& L = s->layers[static_cast<size_t>(il)];
    switch (cfg_.mixer[static_cast<size_t>(il)]) {
      case Mixer::kda:
        L.conv_q = Buf(be_, static_cast<size_t>((w - 1) * p));
        L.conv_k = Buf(be_, static_cast<size_t>((w - 1) * p));
        L.conv_v = Buf(be_, static_cast<size_t>((w - 1) * p));
        L.kda_state = Buf(be_, static_cast<size_t>(cfg_.kda.n_heads * cfg_.kda.head_dim * cfg_.kda.head_dim));
        break;
      case Mixer::dsa:
        L.index_k = Buf(be_, static_cast<size_t>(max_ctx * cfg_.index_head_dim));
        [[fallthrough]];
      case Mixer::mla:
        L.latent = Buf(be_, static_cast<size_t>(max_ctx * (cfg_.kv_lora_rank + cfg_.qk_rope_dim)));
        break;
      case Mixer::gqa:
        L.k = Buf(be_, static_cast<size_t>(max_ctx * cfg_.n_kv_heads * cfg_.head_dim));
        L.v = Buf(be_, static_cast<size_t>(max_ctx * cfg_.n_kv_heads * cfg_.head_dim));
        break;
    }
  }
  return s;
}

void Model::snapshot(const SeqState& s, SeqSnapshot& into) const {
  into.len = s.len;
  size_t k = 0;
  for (const LayerState& L : s.layers) {
    if (!L.kda_state.get()) continue;
    const size_t n = L.kda_state.size() + 3 * L.conv_q.size();
    if (into.kda.size() <= k) into.kda.emplace_back(be_, n, Buf::Uninit{});
    float* dst = into.kda[k++].get();
    for (const Buf* b : {&L.kda_state, &L.conv_q, &L.conv_k, &L.conv_v}) {
      be_.copy(dst, b->get(), b->size() * sizeof(float));
      dst += b->size();
    }
  }
}

SeqSnapshot Model::snapshot(const SeqState& s) const {
  SeqSnapshot snap;
  snapshot(s, snap);
  return snap;
}

void Model::restore(SeqState& s, const SeqSnapshot& snap) const {
  s.len = snap.len;
  size_t k = 0;
  for (LayerState& L : s.layers) {
    if (!L.kda_state.get()) continue;
    const float* src = snap.kda.at(k++).get();
    for (Buf* b : {&L.kda_state, &L.conv_q, &L.conv_k, &L.conv_v}) {
      be_.copy(b->get(), src, b->size() * sizeof(float));
      src += b->size();
    }
  }
}

std::vector<std::vector<float>> Model::download(const SeqSnapshot& snap) const {
  std::vector<std::vector<float>> out;
  for (const Buf& b : snap.kda) {
    out.emplace_back(b.size());
    be_.download(out.back().data(), b.get(), b.size() * sizeof(float));
  }
  return out;
}

void Model::attn_res_norm(const std::vector<Buf>& blocks, float* p, const Buf& w, int64_t n, float* out,
                          const Buf& norm_w, float* y, const float* add) {
  std::vector<const float*> vs;
  for (const Buf& b : blocks) vs.push_back(b.get());
  vs.push_back(p);
  const auto eps = static_cast<float>(cfg_.rms_eps);
  const auto nv = static_cast<int64_t>(vs.size());
  if (add)
    be_.add_attn_res_norm(p, add, vs.data(), nv, w.get(), n, cfg_.hidden, eps, out, norm_w.get(), eps, y);
  else
    be_.attn_res_norm(vs.data(), nv, w.get(), n, cfg_.hidden, eps, out, norm_w.get(), eps, y);
}

void Model::profile_mark(const char* section) {
  if (!profile_on_) return;
  be_.synchronize();
  const auto now = std::chrono::steady_clock::now();
  if (profile_section_) {
    ProfileEntry& e = profile_[profile_section_];
    e.seconds += std::chrono::duration<double>(now - profile_t0_).count();
    e.calls += 1;
  }
  profile_section_ = section;
  profile_t0_ = now;
}

void Model::set_prefill_chunk(int64_t rows) {
  if (rows < 0 || rows % kPrefillChunkAlign != 0)
    throw std::invalid_argument("prefill chunk of " + std::to_string(rows) + " rows: must be 0 or a positive multiple of " +
                                std::to_string(kPrefillChunkAlign));
  prefill_chunk_ = rows;
}

void Model::check_ids(const SeqState& s, std::span<const int32_t> ids) const {
  const int64_t n = static_cast<int64_t>(ids.size());
  if (s.len + n > s.max_ctx)
    throw LimitError(std::to_string(s.len) + " tokens in context + " + std::to_string(n) +
                     " new tokens exceed the context size of " + std::to_string(s.max_ctx) + " tokens (-c)");
  for (int32_t id : ids)
    if (id < 0 || id >= cfg_.vocab)
      throw LimitError("token id " + std::to_string(id) + " is outside the vocabulary (0.." +
                       std::to_string(cfg_.vocab - 1) + ")");
}

float* Model::snapshot_part(SeqSnapshot& snap, const SeqState& s, int il) const {
  size_t k = 0;
  for (int j = 0; j < il; ++j)
    if (s.layers[static_cast<size_t>(j)].kda_state.get()) ++k;
  const LayerState& L = s.layers[static_cast<size_t>(il)];
  while (snap.kda.size() <= k) snap.kda.emplace_back(be_, L.kda_state.size() + 3 * L.conv_q.size(), Buf::Uninit{});
  return snap.kda[k].get();
}

std::vector<float> Model::forward(SeqState& s, std::span<const int32_t> ids, const ForwardOptions& opt) {
  const int64_t n = static_cast<int64_t>(ids.size());
  if (n == 0) return {};
  check_ids(s, ids);  // the whole call, before any pass changes the state
  const int64_t row = opt.snapshot ? opt.snapshot_row : 0;
  if (opt.snapshot && (!opt.prefill || row <= 0 || row >= n || row % kPrefillChunkAlign != 0))
    throw std::invalid_argument("snapshot at row " + std::to_string(row) + " of a " + std::to_string(n) +
                                "-row call: a prompt pass, 0 < row < n, a multiple of " +
                                std::to_string(kPrefillChunkAlign));
  const int64_t chunk = prefill_chunk_;
  if (!opt.prefill || chunk == 0 || n <= chunk) return forward_rows(s, ids, opt);
  // A long prompt: passes of `chunk` rows; only the last one (or each, for all_logits) has logits.
  std::vector<float> out;
  for (int64_t r0 = 0; r0 < n; r0 += chunk) {
    const int64_t m = std::min(chunk, n - r0);
    ForwardOptions o = opt;
    o.no_logits = opt.no_logits || (!opt.all_logits && r0 + m < n);
    if (opt.snapshot && row == r0) snapshot(s, *opt.snapshot);  // the point falls between two passes
    o.snapshot = opt.snapshot && row > r0 && row < r0 + m ? opt.snapshot : nullptr;
    o.snapshot_row = row - r0;
    std::vector<float> l = forward_rows(s, ids.subspan(static_cast<size_t>(r0), static_cast<size_t>(m)), o);
    if (out.empty()) out = std::move(l);
    else out.insert(out.end(), l.begin(), l.end());
  }
  return out;
}

namespace {

// Backend::set_prompt_pass for the duration of one pass (also when the pass throws).
class PromptPassScope {
 public:
  PromptPassScope(Backend& be, bool on) : be_(be), on_(on) {
    if (on_) be_.set_prompt_pass(true);
  }
  ~PromptPassScope() {
    if (on_) be_.set_prompt_pass(false);
  }
  PromptPassScope(const PromptPassScope&) = delete;
  PromptPassScope& operator=(const PromptPassScope&) = delete;

 private:
  Backend& be_;
  bool on_;
};

}  // namespace

std::vector<float> Model::forward_rows(SeqState& s, std::span<const int32_t> ids, const ForwardOptions& opt) {
  const int64_t n = static_cast<int64_t>(ids.size()), d = cfg_.hidden;
  const PromptPassScope prompt_pass(be_, opt.prefill);
  Ctx c;
  c.s = &s;
  c.n = n;
  c.pos0 = s.len;
  c.prefill = opt.prefill;
  if (opt.snapshot) {
    c.snap = opt.snapshot;
    c.snap_row = opt.snapshot_row;
    c.snap->len = s.len + opt.snapshot_row;
  }
  for (int64_t i = 0; i < n; ++i) c.pos.push_back(static_cast<int32_t>(s.len + i));

  const size_t nd = static_cast<size_t>(n * d);
  profile_mark("embed");
  // Each is written in full before it is read (embed, copy/AttnRes, norm, mixer, ffn): no zero fill.
  const Buf::Uninit u;
  Buf p(be_, nd, u), h(be_, nd, u), xn(be_, nd, u), a(be_, nd, u), f(be_, nd, u);
  be_.embed(w_.embed, ids.data(), n, p);
  const bool res = cfg_.attn_res_block > 0;
  std::vector<Buf> blocks;  // AttnRes: banked raw streams
  // p's pending addend: the last layer's FFN output, added by the next AttnRes (Backend::add_attn_res_norm)
  // where there is one; the same adds in the same order as p += f at the layer's end.
  const float* pending = nullptr;
  for (int il = 0; il < cfg_.n_layers; ++il) {
    const LayerWeights& L = w_.layers[static_cast<size_t>(il)];
    const bool bank = res && il % cfg_.attn_res_block == 0;
    const auto eps = static_cast<float>(cfg_.rms_eps);
    // The mixer's input xn: AttnRes (or p) and the norm, in one launch where the back-end can. xn is kept
    // (Backend::rmsnorm_kept) while the mixer reads it, as for the FFN below.
    {
      if (res && !blocks.empty()) {
        attn_res_norm(blocks, p, L.attn_res_w, n, h, L.attn_norm, xn, pending);
        pending = nullptr;
      } else {
        if (pending) be_.add(p, pending, static_cast<int64_t>(nd), p);
        pending = nullptr;
        be_.copy(h, p, nd * sizeof(float));
        be_.rmsnorm_kept(h, L.attn_norm, n, d, eps, xn);
      }
      const KeptX kept(be_, xn);
      if (bank) {
        blocks.emplace_back(be_, nd);
        be_.copy(blocks.back(), p, nd * sizeof(float));
      }
      static constexpr const char* kMixer[] = {"mixer.kda", "mixer.mla", "mixer.dsa", "mixer.gqa"};
      profile_mark(kMixer[static_cast<size_t>(cfg_.mixer[static_cast<size_t>(il)])]);
      switch (cfg_.mixer[static_cast<size_t>(il)]) {
        case Mixer::kda: mixer_kda(il, c, xn, a); break;
        case Mixer::mla:
        case Mixer::dsa: mixer_mla(il, c, xn, a); break;
        case Mixer::gqa: mixer_gqa(il, c, xn, a); break;
      }
    }
    if (bank)
      be_.copy(p, a, nd * sizeof(float));
    else if (!res)
      be_.add(p, a, static_cast<int64_t>(nd), p);
    {
      if (res)
        attn_res_norm(blocks, p, L.mlp_res_w, n, h, L.ffn_norm, xn, bank ? nullptr : a.get());  // p += a first
      else
        be_.rmsnorm_kept(p, L.ffn_norm, n, d, eps, xn);
      const KeptX kept(be_, xn);
      profile_mark(cfg_.ffn[static_cast<size_t>(il)] == Ffn::moe ? "ffn.moe" : "ffn.dense");
      ffn(il, c, xn, f);
    }
    if (res && !opt.on_layer && il + 1 < cfg_.n_layers)
      pending = f.get();  // the next layer's AttnRes adds it
    else
      be_.add(p, f, static_cast<int64_t>(nd), p);
    if (opt.on_layer) opt.on_layer(il, p, n);
  }
  s.len += n;
  profile_mark("head");
  if (opt.no_logits) {
    profile_mark(nullptr);
    return {};
  }

  const int64_t rows = opt.all_logits ? n : 1;
  const float* last = p.get() + (n - rows) * d;
  const auto eps = static_cast<float>(cfg_.rms_eps);
  if (res) {
    // The output mix is per row: mix only the rows whose logits are wanted.
    std::vector<const float*> vs;
    for (const Buf& b : blocks) vs.push_back(b.get() + (n - rows) * d);
    vs.push_back(last);
    be_.attn_res_norm(vs.data(), static_cast<int64_t>(vs.size()), w_.out_res_w.get(), rows, d, eps, h,
                      w_.final_norm, eps, xn);
  } else {
    be_.rmsnorm_kept(last, w_.final_norm, rows, d, eps, xn);
  }
  Buf logits;
  {
    const KeptX kept(be_, xn);
    logits = Buf(be_, static_cast<size_t>(rows * cfg_.vocab), Buf::Uninit{});
    be_.matmul(w_.lm_head, xn, rows, logits);
  }
  std::vector<float> out(static_cast<size_t>(rows * cfg_.vocab));
  be_.download(out.data(), logits.get(), out.size() * sizeof(float));
  profile_mark(nullptr);
  return out;
}

}  // namespace ferry
