// The CUDA back-end class. Op bodies are split by family like the CPU back-end's: memory and factory
// (cuda_backend.cu), matmul and embed (matmul.cu), norms and element-wise ops (elementwise.cu), KDA
// (kda.cu), rope / attention / indexer / attention residuals (attention.cu).
#pragma once

#include <cuda_runtime.h>

#include <array>
#include <cstddef>
#include <cstdint>
#include <unordered_map>
#include <vector>

#include "kernels/backend.hpp"
#include "kernels/cuda/matmul_mma_launch.cuh"
#include "kernels/cuda/splitk.cuh"
#include "kernels/cuda/xprep.cuh"

namespace ferry::cuda {

class CudaBackend final : public Backend {
 public:
  explicit CudaBackend(int device);
  ~CudaBackend() override;
  std::string name() const override;
  cudaStream_t stream() const { return stream_; }

  void* alloc(size_t bytes) override;
  void* alloc_uninit(size_t bytes) override;
  void release(void* p) override;
  void upload(void* dst, const void* src_host, size_t bytes) override;
  void download(void* dst_host, const void* src, size_t bytes) override;
  void download_start(void* dst_host, const void* src, size_t bytes) override;
  void download_wait() override;
  bool route_select_start(const float* scores, const float* bias, const RouteRule& rule, int64_t n,
                          uint32_t* picked_host) override;  // route.cu
  void copy(void* dst, const void* src, size_t bytes) override;
  void synchronize() override;
  void register_host(void* p, size_t bytes) override;
  void unregister_host(void* p) override;
  MemoryInfo device_memory() override;

  uint32_t upload_queues() const override { return static_cast<uint32_t>(uploads_.size()); }
  void set_upload_queues(uint32_t n) override;
  Event create_event() override;
  void destroy_event(Event e) override;
  void record_event(Event e, int queue) override;
  void wait_event(int queue, Event e) override;
  bool event_done(Event e) override;
  void sync_event(Event e) override;
  Event create_timing_event() override;
  double elapsed_ms(Event a, Event b) override;
  void upload_async(int queue, void* dst, const void* src_host, size_t bytes) override;

  void set_prompt_pass(bool on) override { prompt_pass_ = on; }
  bool prompt_pass() const { return prompt_pass_; }
  void prepare_matmul_weight(Weight& w) override;
  void prepare_expert_weights(Weight* const* w, size_t count) override;
  void matmul(const Weight& w, const float* x, int64_t n, float* y) override;
  void matmul_group(const MatmulOut* outs, size_t count, const float* x, int64_t n) override;
  void matmul_heads(const Weight& w, const HeadsLayout& l, const float* x, int64_t n, float* y) override;
  void embed(const Weight& table, const int32_t* ids_host, int64_t n, float* y) override;

  void rmsnorm(const float* x, const float* w, int64_t rows, int64_t dim, float eps, float* y) override;
  void l2norm_qk(float* q, float* k, int64_t rows, int64_t dim, float eps, float q_scale) override;
  // One launch that also prepares y for the decode matmuls (xprep.cuh), kept until drop_x(y).
  void rmsnorm_kept(const float* x, const float* w, int64_t rows, int64_t dim, float eps, float* y) override;
  void gate_kept(const GateAct& act, const float* a, const float* b, int64_t rows, int64_t cols, float* y) override;
  void drop_x(const float* y) override;
  void layernorm(const float* x, const float* w, const float* b, int64_t rows, int64_t dim, float eps,
                 float* y) override;
  void l2norm(const float* x, int64_t rows, int64_t dim, float eps, float* y) override;
  void add(const float* a, const float* b, int64_t n, float* y) override;
  void add_rows(const float* x, const float* b, int64_t rows, int64_t dim, float* y) override;
  void scale(float* x, float s, int64_t n) override;
  void axpy(float a, const float* x, int64_t n, float* y) override;
  void copy2d(const float* src, int64_t src_stride, float* dst, int64_t dst_stride, int64_t rows,
              int64_t cols) override;
  void swiglu(const float* g, const float* u, int64_t n, float* y) override;
  void situ(const float* g, const float* u, int64_t n, float beta, float lbeta, float* y) override;
  void sigmoid(const float* x, int64_t n, float* y) override;
  void sigmoid_mul(const float* x, const float* gate, int64_t n, float* y) override;

  void conv1d_silu_many(const Conv1dCall* calls, size_t count, int64_t T, int64_t C, int64_t W) override;
  void conv1d_silu(const float* x, int64_t T, int64_t C, const float* w, int64_t W, float* state,
                   float* y) override;
  // One launch under fused_ops().
  void kda_gate_beta(float* f, const float* dt_bias, const float* a_log, int64_t T, int64_t H, int64_t K,
                     const KdaGateParams& p, float* g, float* beta) override;
  void kda_gate(const float* f, const float* a_log, int64_t T, int64_t H, int64_t K, const KdaGateParams& p,
                float* g) override;
  void kda_recurrent(const float* q, const float* k, const float* v, const float* g, const float* beta, int64_t T,
                     int64_t H, int64_t K, int64_t V, float* state, float* o) override;
  void kda_decode(const KdaDecode& a) override;
  void kda_conv_l2norm(const Conv1dCall* qkv, int64_t T, int64_t H, int64_t K, int64_t W, float eps,
                       float q_scale) override;
  void kda_chunked(const float* q, const float* k, const float* v, const float* g, const float* beta, int64_t T,
                   int64_t H, int64_t K, int64_t V, int64_t chunk, float* state, float* o) override;

  void rope(float* x, int64_t T, int64_t n_heads, int64_t tok_stride, int64_t head_stride, int64_t offset,
            const int32_t* pos_host, const RopeParams& rope) override;
  void attention(const AttentionArgs& a) override;
  void indexer_topk(const float* q, const float* k, const float* w, int64_t T, int64_t L, int64_t Hi, int64_t Di,
                    int64_t q_pos0, int64_t topk, int32_t* sel, IndexerTies ties) override;

  void attn_res(const float* const* vs_host, int64_t nv, const float* w, int64_t T, int64_t D, float eps,
                float* out) override;
  // p += a in the same launch (rownorm::fused_add()).
  void add_attn_res_norm(float* p, const float* a, const float* const* vs_host, int64_t nv, const float* w, int64_t T,
                         int64_t D, float eps, float* out, const float* norm_w, float norm_eps, float* y) override;
  // attn_res, the rmsnorm of its output and the decode matmuls' preparation of y in one launch.
  void attn_res_norm(const float* const* vs_host, int64_t nv, const float* w, int64_t T, int64_t D, float eps,
                     float* out, const float* norm_w, float norm_eps, float* y) override;

  void expert_ffn(const ExpertFfnArgs& a) override;  // moe.cu
  void moe_combine(const float* y, const float* wts_host, int64_t n, int64_t k, int64_t dim, float* acc) override;

  // Grow-only device scratch buffers, one per use, reused by later calls (stream order makes the reuse
  // safe: a later op's copy into a slot runs after every earlier kernel that read it).
  enum Slot {
    kIds, kPos, kFreq, kKeys, kCounts, kScores, kPtrs, kMoeAct, kMoeWts, kResScores, kMmaX,
    kMoeTabs,                 // a prompt pass's wave of expert tables (moe.cu, WaveLaunch)
    kSplitPart, kSplitCount,  // a split-K matmul's partials and its counters (splitk.cuh)
    kKeptX,                   // the prepared rows of the kept x (rmsnorm_kept)
    kKdaPre,                  // the chunked delta rule's prepass (kda_chunked.cu)
    kRoute,                   // the router's selection on the device: ids, then weights (route.cu)
    kNumSlots
  };
  void* scratch(Slot s, size_t bytes);
  // The same, zero-filled whenever it grows (for buffers whose users leave them zero).
  void* zeroed_scratch(Slot s, size_t bytes);
  // The split of K of a matmul of w on n rows (matmul_ksplit) with its partials and counters (none when
  // it is not split).
  splitk::Bufs split_bufs(const Weight& w, int64_t n);
  // Host -> device copy of small host arrays into a scratch slot (returns the device copy).
  void* stage(Slot s, const void* host, size_t bytes);
  // x [n, cols] prepared for a decode matmul (prep_x with both levels, in `order`, into buf), or the kept
  // rows' preparation when x is the kept x in natural order (made once, by rmsnorm_kept or here).
  mma::XPrep prep_decode(const float* x, int64_t n, int64_t cols, void* buf, XOrder order = XOrder::natural);

 private:
  // attn_res_norm's cluster launch (rownorm::launch), with p += a first when add_to (= vs_host[nv - 1]) is set.
  void res_norm_launch(float* add_to, const float* add_from, const float* const* vs_host, int64_t nv, const float* w,
                       int64_t T, int64_t D, float eps, float* out, const float* norm_w, float norm_eps, float* y);
  void bind() const;  // make device_ current on the calling thread
  cudaStream_t queue(int q) const;  // kComputeQueue or an upload queue
  int device_ = 0;
  bool prompt_pass_ = false;  // set_prompt_pass: matmuls and experts on the tensor cores where supported
  // The x that rmsnorm_kept / attn_res_norm wrote and the caller keeps unchanged until drop_x: its
  // preparation for the decode matmuls (natural order, both levels, slot kKeptX) is made once and read
  // by every matmul of x meanwhile.
  struct Kept {
    const float* x = nullptr;
    int64_t rows = 0, cols = 0;
    bool prepared = false;
    mma::XPrep xp;
  };
  Kept kept_;
  void keep_x(const float* y, int64_t rows, int64_t cols);  // kept_ = y, not prepared yet
  // kept_ = y, prepared by the caller's kernel into the returned place.
  xprep::Out keep_prepared(const float* y, int64_t rows, int64_t cols);
  int sm_count_ = 0;
  cudaStream_t stream_ = nullptr;
  std::vector<cudaStream_t> uploads_;  // upload queues
  // Freed buffers kept for reuse, by rounded size: a decode step allocates the same temporaries every
  // layer, and cudaMallocAsync + cudaFreeAsync are two driver calls each time. Reuse is safe because
  // every op runs on stream_ (a reused buffer's next writer is ordered after its last reader). At most
  // kCacheBytes are kept; beyond that a release frees.
  static constexpr size_t kCacheBytes = size_t{1} << 30;
  std::unordered_map<size_t, std::vector<void*>> free_;
  std::unordered_map<void*, size_t> sizes_;  // live and cached buffers -> rounded size
  size_t cached_bytes_ = 0;
  void* take(size_t bytes);  // from the cache or cudaMallocAsync
  std::array<void*, kNumSlots> scratch_{};
  std::array<size_t, kNumSlots> scratch_bytes_{};
  // Page-locked staging ring for stage(): small host arrays are copied here and uploaded from here, so
  // the upload is truly asynchronous (a pageable source may make cudaMemcpyAsync wait for the stream).
  // When the ring wraps, the host waits for the compute stream once (every earlier copy is then done).
  static constexpr size_t kRingBytes = size_t{8} << 20;
  std::byte* ring_ = nullptr;
  size_t ring_pos_ = 0;
  // download_start's page-locked staging, its event and where download_wait puts the bytes.
  void* dl_stage_ = nullptr;
  size_t dl_bytes_ = 0;
  cudaEvent_t dl_done_ = nullptr;
  void* dl_dst_ = nullptr;
  size_t dl_pending_ = 0;
};

// True when p is device (or managed) memory, false for ordinary host memory.
bool is_device_pointer(const void* p);

// Sets CUDA_MODULE_LOADING=EAGER unless the user set it (every kernel loads when the context starts, not
// inside the first prompt); called at program start (a static initialiser in cuda_backend.cu) and before
// the process's first CUDA call (cuda_available, CudaBackend).
void eager_module_loading();

}  // namespace ferry::cuda
