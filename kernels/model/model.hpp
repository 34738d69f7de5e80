// The model forward pass for every supported family, written once against the Backend interface.
//
// Two forms per step, both exact in the sense of DESIGN.md "Exactness":
//  - prefill (prompt pass): chunked KDA and unabsorbed MLA, fast for many tokens;
//  - decode (plain steps and verification blocks of up to 16 rows): recurrent KDA and absorbed MLA.
//    Every op in this form is row-invariant, so a row's logits are bit-identical whether it runs
//    alone or inside a block.
#pragma once

#include <cstdint>
#include <chrono>
#include <functional>
#include <map>
#include <memory>
#include <span>
#include <vector>

#include "io/formats/model_config.hpp"
#include "io/formats/tensor_source.hpp"
#include "kernels/backend.hpp"
#include "kernels/model/weights.hpp"

namespace ferry {

namespace cpu {
class ThreadPool;
}  // namespace cpu

// Per-sequence state: attention caches, KDA recurrent state and convolution history.
struct LayerState {
  Buf conv_q, conv_k, conv_v;  // KDA: previous W-1 inputs [W-1, P]
  Buf kda_state;               // KDA: [H, K, V] fp32
  Buf latent;                  // MLA/DSA: [max_ctx, R + dr] (normalised latent c, then k_pe)
  Buf index_k;                 // DSA: [max_ctx, di] indexer keys
  Buf k, v;                    // GQA: [max_ctx, Hk * hd]
};

// A copy of the parts of a SeqState that cannot be rolled back by truncating `len` (KDA state and
// convolution history). Attention caches roll back by resetting `len`: rows past it are rewritten.
// Held in back-end memory: on the GPU a snapshot and a restore are device-to-device copies on the
// compute stream (no host round trip, no synchronisation).
struct SeqSnapshot {
  int64_t len = 0;
  std::vector<Buf> kda;  // per KDA layer: state, conv_q, conv_k, conv_v concatenated
};

struct SeqState {
  int64_t len = 0;      // tokens already in the caches
  int64_t max_ctx = 0;
  std::vector<LayerState> layers;
  SeqSnapshot block_snapshot;  // the verification block's rollback point: allocated once, reused
};

struct ForwardOptions {
  bool prefill = false;          // chunked KDA / unabsorbed MLA (prompt pass), whatever the row count
  bool all_logits = false;       // logits for every row (else only the last row)
  bool no_logits = false;        // skip the LM head entirely (e.g. prompt chunks before the last)
  // A prompt pass can leave in `snapshot` the KDA state and conv history as they were after its first
  // `snapshot_row` rows (0 < row < n, a multiple of 64), what Model::snapshot would have taken after a
  // pass over just those rows: the server's prompt cache, without splitting the pass in two (which
  // would read a streamed layer's experts twice). Nothing else changes: the same bits.
  int64_t snapshot_row = 0;
  SeqSnapshot* snapshot = nullptr;
  // Called after each decoder layer with the layer output (back-end memory, [n, hidden]); once per
  // pass of a long prompt (Model::prefill_chunk).
  std::function<void(int layer, const float* out, int64_t n)> on_layer;
};

class Model {
 public:
  // experts: where routed experts come from; nullptr = load them all into back-end memory.
  Model(const ModelConfig& cfg, const TensorSource& src, Backend& be, const LoadOptions& opt,
        ExpertSource* experts = nullptr);
  ~Model();

  const ModelConfig& config() const { return cfg_; }
  Backend& backend() const { return be_; }

  std::unique_ptr<SeqState> new_state(int64_t max_ctx) const;
  // Copies the KDA state of `s` into `into` (allocated on first use, then reused).
  void snapshot(const SeqState& s, SeqSnapshot& into) const;
  SeqSnapshot snapshot(const SeqState& s) const;
  void restore(SeqState& s, const SeqSnapshot& snap) const;
  // The snapshot's KDA buffers in host memory (tests compare states with it).
  std::vector<std::vector<float>> download(const SeqSnapshot& snap) const;

  // Runs ids at positions s.len … s.len+n-1 and advances s.len. Returns host logits
  // [rows, vocab] where rows = n (all_logits) or 1 (the last row) or 0 (no_logits).
  // Throws LimitError when the context would overflow or an id is outside the vocabulary, before
  // anything runs. A prompt pass (opt.prefill) longer than prefill_chunk() runs in passes of that
  // many rows, each layer's activations sized for one pass: the logits are the same bits (every
  // prompt-pass op is row-invariant, and the chunk is a multiple of KDA's chunk length). The same
  // holds for a prompt pass the caller splits itself at a multiple of 64 positions (the server's
  // prompt cache continues one from a snapshot): a pass starting there computes one pass's bits.
  std::vector<float> forward(SeqState& s, std::span<const int32_t> ids, const ForwardOptions& opt = {});

  // Rows per pass of a long prompt (0: the whole prompt in one pass). A multiple of
  // kPrefillChunkAlign, else InvalidArgument. The engine sets it from the memory plan.
  void set_prefill_chunk(int64_t rows);
  int64_t prefill_chunk() const { return prefill_chunk_; }

  // Section profile (`ferry run --profile`): while on, forward() synchronises the back-end at the
  // edges of each section (embedding, each layer's mixer and feed-forward by kind, the head) and adds
  // the wall time to that section's entry. It slows decoding (one sync per section): use it to see
  // where the time goes, not to measure the rate.
  struct ProfileEntry {
    double seconds = 0;
    uint64_t calls = 0;
  };
  void set_profile(bool on) { profile_on_ = on; }
  const std::map<std::string, ProfileEntry>& profile() const { return profile_; }

 private:
  void profile_mark(const char* section);  // closes the running section (if any), opens `section`
  void check_ids(const SeqState& s, std::span<const int32_t> ids) const;
  // Layer il's part of a snapshot (a KDA layer: state, conv_q, conv_k, conv_v), allocated on first use.
  float* snapshot_part(SeqSnapshot& snap, const SeqState& s, int il) const;
  std::vector<float> forward_rows(SeqState& s, std::span<const int32_t> ids, const ForwardOptions& opt);
  struct Ctx;  // one forward call's shared values (n, positions, mode)
  void mixer_kda(int il, Ctx& c, const float* x, float* out);
  void mixer_mla(int il, Ctx& c, const float* x, float* out);
  void mixer_gqa(int il, Ctx& c, const float* x, float* out);
  void indexer(int il, Ctx& c, const float* x, const float* cq, Buf& sel);
  void ffn(int il, Ctx& c, const float* x, float* out);
  // The gated MLP; `with`, when given, joins its gate / up matmul group of x (the MoE's latent projection).
  void mlp(const MlpWeights& w, const float* x, int64_t n, float* out, const MatmulOut* with = nullptr);
  void moe(int il, Ctx& c, const float* x, float* out);
  void route(int il, const float* x, int64_t n, std::vector<int32_t>& ids, std::vector<float>& w);
  // What route_start leaves for route_finish: the back-end's own selection (picked: ids, then the weights' bits)
  // or the scores to select from on the host.
  struct RouteWait {
    bool selected = false;
    std::vector<uint32_t> picked;
    std::vector<float> scores;
  };
  RouteRule route_rule() const;
  void route_start(int il, const float* x, int64_t n, RouteWait& w);
  void route_finish(int il, int64_t n, RouteWait& w, std::vector<int32_t>& ids, std::vector<float>& wts);
  void hint_next_layer(int il, const float* x, int64_t n);
  // attn_res, then rmsnorm_kept(out, norm_w) into y (Backend::attn_res_norm); with add, p += add first
  // (Backend::add_attn_res_norm).
  void attn_res_norm(const std::vector<Buf>& blocks, float* p, const Buf& w, int64_t n, float* out, const Buf& norm_w,
                     float* y, const float* add = nullptr);

  ModelConfig cfg_;
  Backend& be_;
  std::vector<Buf> storage_;
  SpineWeights w_;
  std::unique_ptr<ResidentExperts> resident_;
  ExpertSource* experts_ = nullptr;
  std::vector<float> inv_freq_;            // RoPE frequencies (qk_rope_dim/2 or head_dim/2)
  float rope_attention_factor_ = 1.0f;
  float attn_scale_ = 1.0f;
  IndexerTies indexer_ties_ = IndexerTies::by_position;                // softmax scale of MLA / GQA
  std::vector<std::vector<float>> score_bias_host_;  // per layer, router correction bias
  // Host threads for the routing of many rows (route_finish), made on first use.
  std::unique_ptr<cpu::ThreadPool> route_pool_;
  int64_t prefill_chunk_ = 0;
  bool profile_on_ = false;
  std::map<std::string, ProfileEntry> profile_;
  const char* profile_section_ = nullptr;
  std::chrono::steady_clock::time_point profile_t0_;
};

// FNV-1a 64 of the raw bytes of a float array (the --trace-hash of a position's logits).
uint64_t fnv1a64(const void* data, size_t bytes);

}  // namespace ferry
