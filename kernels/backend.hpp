// The compute back-end interface. The model layers (kernels/model/) are written once against this
// interface; the CPU back-end (kernels/cpu/, the reference, always built) and the CUDA back-end
// (kernels/cuda/) implement it. Every float* here points into the back-end's own memory (host memory
// for the CPU, device memory for CUDA); pointers named *_host are host memory on every back-end.
//
// Exactness rule (docs/ARCHITECTURE.md, ../shared/docs/DESIGN.md "Exactness"): an op's result for one
// row (token) never depends on how many rows are in the call or where the row sits in it. Every op
// below that takes a row count obeys this; a back-end must not pick a different reduction order,
// tiling or split-K by row count.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>

namespace ferry {

// Weight storage types a matmul reads. BF16/F16 checkpoint tensors are widened to F32 at load
// (exactly); Q8_0 and MXFP4 use ggml's block layouts (io/formats/ggml_blocks.hpp).
enum class WType : uint8_t { f32, q8_0, mxfp4 };

// y = x @ W^T with W[rows=out, cols=in] (PyTorch nn.Linear layout). Each row of W is stored
// contiguously: cols floats (f32), or cols/32 blocks of 34 bytes (q8_0) or 17 bytes (mxfp4).
// How a weight's bytes are laid out in back-end memory: the checkpoint's rows of blocks (every back-end
// reads it), or a back-end's own layout, which only that back-end reads: q8_tiles, made by
// Backend::prepare_matmul_weight (CUDA: q8_0 tiles for the tensor cores, kernels/cuda/matmul_q8t.cuh;
// matmul only), and mx_tiles, made by Backend::prepare_expert_weights (CUDA: mxfp4 tiles of resident
// experts, kernels/cuda/matmul_mxt.cuh; matmul and expert_ffn, with the bits of the row layout).
enum class WLayout : uint8_t { rows, q8_tiles, mx_tiles };

struct Weight {
  WType type = WType::f32;
  int64_t rows = 0;
  int64_t cols = 0;
  const void* data = nullptr;  // back-end memory
  WLayout layout = WLayout::rows;
  bool empty() const { return data == nullptr; }
  size_t row_bytes() const;
  size_t nbytes() const { return row_bytes() * static_cast<size_t>(rows); }
};

// One output of Backend::matmul_group: y[n, w->rows] = x @ W^T.
struct MatmulOut {
  const Weight* w;
  float* y;
};

// KDA decay gate forms (MODEL_SPEC.md §3).
struct KdaGateParams {
  bool safe_gate = false;     // K3: g = lower_bound * sigmoid(exp(A_log[h]) * f)
  float lower_bound = 0.0f;   //     (only with safe_gate)
                              // Kimi-Linear: g = -exp(A_log[h]) * softplus(f)
};

// One decode step of a KDA layer after its convolutions and l2 norms (Backend::kda_decode): the gate inputs, the
// gated delta rule and the gated output norm of T rows (decode rows, verify blocks).
struct KdaDecode {
  const float* q = nullptr;        // [T, H, K] (normalised, q pre-scaled)
  const float* k = nullptr;        // [T, H, K]
  const float* v = nullptr;        // [T, H, V]
  float* f = nullptr;              // [T, H*K] f_b's output: += dt_bias in place
  const float* dt_bias = nullptr;  // [H*K]
  const float* a_log = nullptr;    // [H]
  KdaGateParams gp;
  float* beta = nullptr;           // [T, H] logits: sigmoid in place
  float* g = nullptr;              // [T, H, K] scratch: the log-decay gate (the default writes it)
  int64_t T = 0, H = 0, K = 0, V = 0;
  float* state = nullptr;          // [H, K, V], updated
  const float* o_norm = nullptr;   // [V] the output norm's weight
  float eps = 0.0f;                // its epsilon
  const float* gate = nullptr;     // [T, H*V] the output gate's logits
  float* o = nullptr;              // [T, H*V] out: rmsnorm(o) * o_norm * sigmoid(gate), kept for the output matmul
};

// Rotary embedding tables: inv_freq for dim/2 frequencies and the YaRN attention factor.
struct RopeParams {
  const float* inv_freq_host = nullptr;  // [dim/2]
  int64_t dim = 0;                       // rotated dims
  float attention_factor = 1.0f;         // multiplies cos and sin (YaRN mscale)
  bool interleaved = false;              // pairs (x[2i], x[2i+1]); else (x[i], x[i+dim/2])
};

// Where each head's slice sits for Backend::matmul_heads (strides in floats, weight offset in rows).
struct HeadsLayout {
  int64_t heads = 1;
  int64_t w_head_rows = 0;      // head h's rows start h * w_head_rows rows after w.data
  int64_t x_tok = 0, x_head = 0;  // x of (token t, head h) starts at t * x_tok + h * x_head
  int64_t y_tok = 0, y_head = 0;  // its output at t * y_tok + h * y_head
};

// How the DSA indexer orders keys of equal score. The scores are sums of ReLUs, so exact ties (at 0)
// happen whenever every head's dot product is negative: common with the 2 heads of a test model,
// practically never with 64. by_position (the default) keeps the lower position: deterministic and
// independent of the call's key count. torch_cpu reproduces what transformers' reference gets from
// torch.topk on the CPU (libstdc++ nth_element over the whole [L] row, masked keys included): used only
// to compare with reference logits computed that way.
enum class IndexerTies : uint8_t { by_position, torch_cpu };

// One attention call: queries [T, Hq, Dk] against keys [L, Hk, Dk] and values [L, Hk, Dv];
// query head h reads key/value head h / (Hq / Hk). Strides are in floats, so MQA over a shared
// latent cache (MLA absorbed decode) and slices of wider rows need no copies.
struct AttentionArgs {
  const float* q = nullptr;
  int64_t q_tok_stride = 0, q_head_stride = 0;
  const float* k = nullptr;
  int64_t k_tok_stride = 0, k_head_stride = 0;
  const float* v = nullptr;
  int64_t v_tok_stride = 0, v_head_stride = 0;
  float* out = nullptr;  // [T, Hq, Dv] contiguous
  int64_t T = 0, L = 0, Hq = 0, Hk = 0, Dk = 0, Dv = 0;
  int64_t q_pos0 = 0;    // position of query 0; query i sees keys at positions <= q_pos0 + i
  float scale = 1.0f;
  // Optional DSA selection [T, sel_k] of key positions (int32, -1 = unused slot): when set, query i
  // attends only the selected keys (which are causal by construction).
  const int32_t* sel = nullptr;
  int64_t sel_k = 0;
  // sel is indexer_topk's output for these queries, unchanged: each row's positions ascending, every one
  // visible, then -1. A back-end may then take it as it stands (CUDA, under device_select: on the device,
  // without downloading, checking and compacting it).
  bool sel_ascending = false;
};

// A MoE layer's routing rule (MODEL_SPEC.md §2, HF DeepseekV3TopkRouter / KimiLinearTopkRouter): of a row's e
// sigmoid scores s, choose by choice = s + bias (bias: the layer's e_score_correction_bias, zeros if absent), keep
// only the topk_group groups (of e / n_group experts) whose two best choices sum highest when n_group > 1 and
// topk_group < n_group, take the k best choices (ties to the lower id: a strict order, so a unique result), best
// first; the weights are the chosen s, divided by their sum (in double, rank order, + 1e-20) when renormalize and
// k > 1, times routed_scale. kernels/model/top_k.hpp route_rows is the rule on the host.
struct RouteRule {
  int64_t e = 0, k = 0, n_group = 1, topk_group = 1;
  bool renormalize = true;
  double routed_scale = 1.0;
  bool grouped() const { return n_group > 1 && topk_group < n_group; }
};

// Activation of a routed expert's FFN (MODEL_SPEC.md §2): SiTU (K3) or SwiGLU.
// A gated activation of two inputs (Backend::gate_kept): silu(a) * b, SiTU(a, b) (Backend::situ) or
// a * sigmoid(b).
enum class GateOp { swiglu, situ, sigmoid_mul };
struct GateAct {
  GateOp op = GateOp::swiglu;
  float beta = 1.0f;  // SiTU only (Backend::situ's beta, lbeta)
  float lbeta = 0.0f;
};

struct ExpertAct {
  bool situ = false;   // else SwiGLU
  float beta = 1.0f;   // SiTU only (Backend::situ's beta, lbeta)
  float lbeta = 0.0f;
};

// One routed expert of a batch: rows rows_host[r] of x are its inputs and its outputs go to rows
// dst_host[r] of y, r = 0..m-1. gate/up are [inter, in], down [in, inter].
struct ExpertCall {
  Weight gate, up, down;
  const int32_t* rows_host = nullptr;  // [m], each in [0, x_rows)
  const int32_t* dst_host = nullptr;   // [m], each in [0, y_rows); no two rows of a batch share one
  int64_t m = 0;
};

// A batch of routed experts over one MoE layer's inputs (Backend::expert_ffn). (Pointer and count, not
// std::span: the CUDA sources that include this header are C++17.)
struct ExpertFfnArgs {
  const ExpertCall* calls = nullptr;
  size_t n_calls = 0;
  const float* x = nullptr;  // [x_rows, in]
  int64_t x_rows = 0;
  float* y = nullptr;        // [y_rows, in]; rows no call names are left as they are
  int64_t y_rows = 0;
  int64_t in = 0, inter = 0;
  ExpertAct act;
};

// Throws TensorError / LimitError naming `who`, the call and the field on a shape mismatch, a null
// pointer or a row index out of range (every back-end checks before it launches anything).
void validate_expert_ffn(const ExpertFfnArgs& a, const char* who);

class Backend {
 public:
  virtual ~Backend() = default;
  virtual std::string name() const = 0;

  // ---- memory -------------------------------------------------------------------------------
  virtual void* alloc(size_t bytes) = 0;           // zero-filled
  // Contents undefined: for temporaries the next op overwrites entirely (saves the zero fill). The CPU
  // back-end fills them with NaN, so a read of a byte nobody wrote shows up in every CPU test.
  virtual void* alloc_uninit(size_t bytes) { return alloc(bytes); }
  virtual void release(void* p) = 0;
  virtual void upload(void* dst, const void* src_host, size_t bytes) = 0;
  virtual void download(void* dst_host, const void* src, size_t bytes) = 0;
  // A download the host collects later: download_start queues the copy after every op so far and
  // returns at once; ops issued before download_wait run meanwhile (CUDA: into page-locked staging,
  // then an event); download_wait waits for it and fills dst_host, which must stay valid until then.
  // One at a time. Default: a plain download at the start.
  virtual void download_start(void* dst_host, const void* src, size_t bytes) { download(dst_host, src, bytes); }
  virtual void download_wait() {}
  // The router's selection of n rows by `rule` done by the back-end itself: scores [n, rule.e] and bias [rule.e]
  // in its memory. When it takes the call it queues the selection, starts (download_start) the download of the
  // result into picked_host (n * k ids, then the n * k weights' float bits: route_rows's ids and weights to the
  // bit) and returns true; download_wait completes it. false (the default): nothing queued, the caller downloads
  // the scores and selects on the host.
  virtual bool route_select_start(const float* scores, const float* bias, const RouteRule& rule, int64_t n,
                                  uint32_t* picked_host) {
    (void)scores, (void)bias, (void)rule, (void)n, (void)picked_host;
    return false;
  }
  virtual void copy(void* dst, const void* src, size_t bytes) = 0;  // within back-end memory
  virtual void synchronize() = 0;
  // Page-locks host memory that uploads read from (CUDA: cudaHostRegister); a no-op on the CPU.
  virtual void register_host(void* p, size_t bytes) { (void)p; (void)bytes; }
  virtual void unregister_host(void* p) { (void)p; }
  // Bytes free and in all of a device with its own memory (CUDA: cudaMemGetInfo); {0, 0} when the
  // back-end computes in host memory (the memory plan then uses the host's).
  struct MemoryInfo {
    uint64_t free = 0, total = 0;
  };
  virtual MemoryInfo device_memory() { return {}; }

  // ---- ordering and asynchronous uploads (expert streaming) -----------------------------------
  // Work runs on queues: the compute queue (every op of this interface; kComputeQueue) and upload
  // queues 0..upload_queues()-1 (CUDA: one stream each). An event marks a point in one queue; a queue
  // told to wait for an event runs its later work after that point, without the host waiting. The
  // CPU back-end does everything at once in call order: uploads are memcpy and every event is
  // complete as soon as it is recorded, so the defaults below are its implementation.
  using Event = struct EventTag*;  // opaque; null on the CPU back-end
  static constexpr int kComputeQueue = -1;
  virtual uint32_t upload_queues() const { return 0; }
  // Creates n upload queues (destroying earlier ones: only while none has work queued).
  virtual void set_upload_queues(uint32_t n) { (void)n; }
  virtual Event create_event() { return nullptr; }
  virtual void destroy_event(Event e) { (void)e; }
  virtual void record_event(Event e, int queue) { (void)e; (void)queue; }
  virtual void wait_event(int queue, Event e) { (void)queue; (void)e; }
  virtual bool event_done(Event e) { (void)e; return true; }  // non-blocking; never recorded = done
  virtual void sync_event(Event e) { (void)e; }               // the host waits for the event
  // Events that can time the work between them (CUDA: created with timing): null where the back-end
  // runs synchronously (time it on the host instead). elapsed_ms waits for `b`.
  virtual Event create_timing_event() { return nullptr; }
  virtual double elapsed_ms(Event a, Event b) { (void)a; (void)b; return 0.0; }
  // Queues an upload on upload queue `queue`; src_host must stay unchanged until an event recorded
  // on that queue after this call is done.
  virtual void upload_async(int queue, void* dst, const void* src_host, size_t bytes) {
    (void)queue;
    upload(dst, src_host, bytes);
  }

  // ---- dense algebra ------------------------------------------------------------------------
  // A prompt pass (ForwardOptions::prefill) runs between set_prompt_pass(true) and (false); Model sets
  // it (PromptPassScope). A back-end may run the pass's matmuls and experts another way (CUDA: on the
  // tensor cores, kernels/cuda/matmul_mma.cuh), as long as a row's bits still depend only on the row
  // and on being in a prompt pass: never on the pass's row count or where the row sits in it. Decode
  // steps and verify blocks (outside a prompt pass) keep the rule that a row alone = the row in a block.
  virtual void set_prompt_pass(bool on) { (void)on; }
  // Lays out a resident weight that only ever goes to matmul() the way this back-end's matmul reads it
  // fastest, in place (its size and data pointer stay; w.layout says what it is now). A no-op where a
  // back-end has no layout of its own (CPU) or the weight's type or shape does not take one. Such a
  // weight must reach no other op (matmul_heads, embed, experts, views of its rows).
  virtual void prepare_matmul_weight(Weight& w) { (void)w; }
  // Lays out resident routed experts' matrices (loaded once, never streamed) the way this back-end's
  // expert_ffn reads them fastest, in place (w[i]->layout says what each is now). Unlike
  // prepare_matmul_weight this keeps every bit: expert_ffn and matmul give a prepared weight's outputs
  // exactly as the row layout's, so resident experts and streamed ones (the device cache holds rows)
  // give the same logits. One call for all of a model's resident experts: a back-end may lay out all or
  // none (a batch is one layout). A no-op on the CPU back-end. Such weights reach only expert_ffn and
  // matmul.
  // (Pointers and a count: the CUDA sources that include this header are C++17.)
  virtual void prepare_expert_weights(Weight* const* w, size_t count) { (void)w, (void)count; }
  // y[n, w.rows] = x[n, w.cols] @ W^T. Row-invariant (see the exactness rule above).
  virtual void matmul(const Weight& w, const float* x, int64_t n, float* y) = 0;
  // Several matmuls of one input x[n, cols] (a mixer's projections, an MLP's gate and up): every output
  // has the bits matmul() gives it alone. A back-end may share work between them (CUDA: x
  // prepared for the tensor cores once for the group's q8_0 tiles); the default runs them one by one.
  // (A pointer and a count, not a span: the CUDA sources that include this header are C++17.)
  virtual void matmul_group(const MatmulOut* outs, size_t count, const float* x, int64_t n) {
    for (size_t i = 0; i < count; ++i) matmul(*outs[i].w, x, n, outs[i].y);
  }
  // Per-head matmuls over one weight holding every head's rows (MLA's absorbed decode): for head h and
  // token t < n, y(t, h)[o] = dot(x(t, h)[0 .. w.cols), row h * w_head_rows + o of w) for o < w.rows,
  // w.data being head 0's first row. Row-invariant like matmul. The default (backend_heads.cpp) runs
  // one matmul per head through contiguous copies; CUDA does every head in one launch.
  virtual void matmul_heads(const Weight& w, const HeadsLayout& l, const float* x, int64_t n, float* y);
  // y[n, w.cols] = rows ids_host[i] of the table (f32 or q8_0, dequantized).
  virtual void embed(const Weight& table, const int32_t* ids_host, int64_t n, float* y) = 0;

  // ---- element-wise and normalisation -------------------------------------------------------
  // y = x * rsqrt(mean(x^2) + eps) * w  over rows of `dim` (w may be null: no weight).
  virtual void rmsnorm(const float* x, const float* w, int64_t rows, int64_t dim, float eps, float* y) = 0;
  // y = (x - mean) * rsqrt(var + eps) * w + b
  virtual void layernorm(const float* x, const float* w, const float* b, int64_t rows, int64_t dim, float eps,
                         float* y) = 0;
  // y = x / sqrt(sum(x^2) + eps) over rows of `dim`
  virtual void l2norm(const float* x, int64_t rows, int64_t dim, float eps, float* y) = 0;
  // KDA's q and k in place: q = l2norm(q) then scale(q, q_scale), k = l2norm(k), rows x dim each: the
  // bits of those three calls, which the default makes (CUDA: one launch).
  virtual void l2norm_qk(float* q, float* k, int64_t rows, int64_t dim, float eps, float q_scale) {
    l2norm(q, rows, dim, eps, q);
    scale(q, q_scale, rows * dim);
    l2norm(k, rows, dim, eps, k);
  }
  virtual void add(const float* a, const float* b, int64_t n, float* y) = 0;   // y = a + b
  // y[r, i] = x[r, i] + b[i] for rows r < rows: add of each row and b (one launch on CUDA, where a
  // prompt pass of 1,024 rows made 1,024 launches). The default calls add per row.
  virtual void add_rows(const float* x, const float* b, int64_t rows, int64_t dim, float* y) {
    for (int64_t r = 0; r < rows; ++r) add(x + r * dim, b, dim, y + r * dim);
  }
  virtual void scale(float* x, float s, int64_t n) = 0;                        // x *= s
  virtual void axpy(float a, const float* x, int64_t n, float* y) = 0;         // y += a * x
  // 2-D strided copy of `rows` rows of `cols` floats.
  virtual void copy2d(const float* src, int64_t src_stride, float* dst, int64_t dst_stride, int64_t rows,
                      int64_t cols) = 0;
  virtual void swiglu(const float* g, const float* u, int64_t n, float* y) = 0;  // silu(g) * u
  // SiTU (K3): beta*tanh(g/beta)*sigmoid(g) * (lbeta > 0 ? lbeta*tanh(u/lbeta) : u)
  virtual void situ(const float* g, const float* u, int64_t n, float beta, float lbeta, float* y) = 0;
  virtual void sigmoid(const float* x, int64_t n, float* y) = 0;
  virtual void sigmoid_mul(const float* x, const float* gate, int64_t n, float* y) = 0;  // x * sigmoid(gate)

  // ---- KDA ------------------------------------------------------------------------------------
  // Causal depthwise convolution + SiLU over T tokens of C channels, weight w[C, W]. state[W-1, C]
  // holds the previous W-1 inputs (oldest first) and is updated to the last W-1 inputs.
  virtual void conv1d_silu(const float* x, int64_t T, int64_t C, const float* w, int64_t W, float* state,
                           float* y) = 0;
  // conv1d_silu for each of `count` independent inputs of the same shape (KDA's q, k and v in a decode
  // step): the bits of the calls one by one, which the default makes (CUDA: one launch).
  struct Conv1dCall {
    const float* x;
    const float* w;
    float* state;
    float* y;
  };
  virtual void conv1d_silu_many(const Conv1dCall* calls, size_t count, int64_t T, int64_t C, int64_t W) {
    for (size_t i = 0; i < count; ++i) conv1d_silu(calls[i].x, T, C, calls[i].w, W, calls[i].state, calls[i].y);
  }
  // KDA's q, k and v convolutions (calls[0], [1], [2]: conv1d_silu_many of C = H * K channels), then
  // l2norm_qk(calls[0].y, calls[1].y, T * H, K, eps, q_scale): the bits of the two, which the default calls
  // (CUDA: one launch under FERRY_KDA_FUSE=2 or 3).
  virtual void kda_conv_l2norm(const Conv1dCall* qkv, int64_t T, int64_t H, int64_t K, int64_t W, float eps,
                               float q_scale) {
    conv1d_silu_many(qkv, 3, T, H * K, W);
    l2norm_qk(qkv[0].y, qkv[1].y, T * H, K, eps, q_scale);
  }
  // g[T, H, K] from f[T, H*K] (already including dt_bias), a_log[H].
  virtual void kda_gate(const float* f, const float* a_log, int64_t T, int64_t H, int64_t K,
                        const KdaGateParams& p, float* g) = 0;
  // KDA's gate inputs of one pass: f += dt_bias (each of T rows of H*K), g = kda_gate(f), and beta[T*H] =
  // sigmoid(beta) in place: the bits of add_rows, kda_gate and sigmoid, which the default calls (CUDA: one
  // launch).
  virtual void kda_gate_beta(float* f, const float* dt_bias, const float* a_log, int64_t T, int64_t H, int64_t K,
                             const KdaGateParams& p, float* g, float* beta) {
    add_rows(f, dt_bias, T, H * K, f);
    kda_gate(f, a_log, T, H, K, p, g);
    sigmoid(beta, T * H, beta);
  }
  // Gated delta rule, one token at a time. q,k: [T,H,K] (normalised, q pre-scaled), v: [T,H,V],
  // g: [T,H,K] log-decay, beta: [T,H]. state: [H,K,V] fp32, updated. o: [T,H,V].
  virtual void kda_recurrent(const float* q, const float* k, const float* v, const float* g, const float* beta,
                             int64_t T, int64_t H, int64_t K, int64_t V, float* state, float* o) = 0;
  // kda_gate_beta(f, dt_bias, a_log -> g, beta), kda_recurrent(q, k, v, g, beta -> o), rmsnorm(o) of each of
  // the T x H rows of V with o_norm, and gate_kept(sigmoid_mul, o, gate -> o): the bits of those four ops,
  // which the default calls (CUDA: one launch under FERRY_KDA_FUSE=1 or 3; o is then kept as gate_kept keeps it,
  // until drop_x(o)). f and beta are left as kda_gate_beta leaves them; g only the default writes.
  virtual void kda_decode(const KdaDecode& a) {
    kda_gate_beta(a.f, a.dt_bias, a.a_log, a.T, a.H, a.K, a.gp, a.g, a.beta);
    kda_recurrent(a.q, a.k, a.v, a.g, a.beta, a.T, a.H, a.K, a.V, a.state, a.o);
    rmsnorm(a.o, a.o_norm, a.T * a.H, a.V, a.eps, a.o);
    gate_kept(GateAct{GateOp::sigmoid_mul}, a.o, a.gate, a.T, a.H * a.V, a.o);
  }
  // The same function computed in chunks (prefill); equal to kda_recurrent up to float rounding.
  virtual void kda_chunked(const float* q, const float* k, const float* v, const float* g, const float* beta,
                           int64_t T, int64_t H, int64_t K, int64_t V, int64_t chunk, float* state, float* o) = 0;

  // ---- attention ------------------------------------------------------------------------------
  // Rotates `rope.dim` dims starting at `offset` of each of n_heads heads of T tokens.
  virtual void rope(float* x, int64_t T, int64_t n_heads, int64_t tok_stride, int64_t head_stride, int64_t offset,
                    const int32_t* pos_host, const RopeParams& rope) = 0;
  virtual void attention(const AttentionArgs& a) = 0;
  // DSA lightning indexer: score[t, s] = sum_h w[t,h] * relu(q[t,h,:] . k[s,:]) for s <= q_pos0 + t,
  // then the top min(topk, q_pos0+t+1) positions per query into sel[T, topk] (-1 padded).
  virtual void indexer_topk(const float* q, const float* k, const float* w, int64_t T, int64_t L, int64_t Hi,
                            int64_t Di, int64_t q_pos0, int64_t topk, int32_t* sel,
                            IndexerTies ties = IndexerTies::by_position) = 0;

  // ---- attention residuals (K3) -----------------------------------------------------------------
  // out[T,D] = sum_s softmax_s(score_s) * vs[s] with score_s = sum_d rmsnorm(vs[s])[d] * w[d],
  // per row; vs are nv buffers of [T,D].
  virtual void attn_res(const float* const* vs_host, int64_t nv, const float* w, int64_t T, int64_t D, float eps,
                        float* out) = 0;

  // ---- fused pairs: a norm and what reads its output (the defaults run the ops one by one) ------------
  // rmsnorm, with a promise: nothing writes y until drop_x(y). A back-end may then prepare y for its
  // matmuls in the norm's own pass and reuse that for every matmul of y until drop_x (CUDA: the
  // tensor-core x preparation of the decode matmuls, xprep.cuh). Every op's bits are those of the
  // unfused ops.
  virtual void rmsnorm_kept(const float* x, const float* w, int64_t rows, int64_t dim, float eps, float* y) {
    rmsnorm(x, w, rows, dim, eps, y);
  }
  // attn_res(vs_host, nv, w, T, D, eps, out), then rmsnorm_kept(out, norm_w, T, D, norm_eps, y).
  virtual void attn_res_norm(const float* const* vs_host, int64_t nv, const float* w, int64_t T, int64_t D, float eps,
                             float* out, const float* norm_w, float norm_eps, float* y) {
    attn_res(vs_host, nv, w, T, D, eps, out);
    rmsnorm_kept(out, norm_w, T, D, norm_eps, y);
  }
  // p += a (T x D), then attn_res_norm whose last input vs_host[nv - 1] is p: the bits of add then
  // attn_res_norm, which the default calls (CUDA: one launch under FERRY_FUSE_ADD=1).
  virtual void add_attn_res_norm(float* p, const float* a, const float* const* vs_host, int64_t nv, const float* w,
                                 int64_t T, int64_t D, float eps, float* out, const float* norm_w, float norm_eps,
                                 float* y) {
    add(p, a, T * D, p);
    attn_res_norm(vs_host, nv, w, T, D, eps, out, norm_w, norm_eps, y);
  }
  // y = act(a, b) over rows x cols (Backend::swiglu, situ or sigmoid_mul), kept as by rmsnorm_kept until
  // drop_x(y) (CUDA: one launch that also prepares y for the decode matmuls).
  virtual void gate_kept(const GateAct& act, const float* a, const float* b, int64_t rows, int64_t cols, float* y) {
    const int64_t n = rows * cols;
    switch (act.op) {
      case GateOp::situ: situ(a, b, n, act.beta, act.lbeta, y); break;
      case GateOp::sigmoid_mul: sigmoid_mul(a, b, n, y); break;
      default: swiglu(a, b, n, y); break;
    }
  }
  // The end of rmsnorm_kept's / attn_res_norm's / gate_kept's promise for y (y may be written again).
  virtual void drop_x(const float* y) { (void)y; }

  // ---- mixture of experts ---------------------------------------------------------------------------
  // y[dst] = down(act(gate(x[rows]), up(x[rows]))) for every call of the batch. Each row's result is
  // bit-identical to running its expert alone through matmul / situ|swiglu / matmul on this back-end
  // (the exactness rule: it never depends on the other rows or experts of the batch). The default
  // composes those ops (backend_moe.cpp); the CUDA back-end runs the whole batch in a few launches.
  virtual void expert_ffn(const ExpertFfnArgs& a);
  // acc[t, :] = sum over j = 0..k-1, in order, of wts_host[t*k+j] * y[(t*k+j)*dim ...] for t < n,
  // overwriting acc: bit-identical to zero-filling acc and calling axpy(wts[t*k+j], ...) per (t, j).
  virtual void moe_combine(const float* y, const float* wts_host, int64_t n, int64_t k, int64_t dim, float* acc);
};

// The CPU back-end (always available). `threads` = 0 picks the hardware concurrency.
std::unique_ptr<Backend> make_cpu_backend(int threads = 0);

// RAII buffer of floats in a back-end's memory.
class Buf {
 public:
  Buf() = default;
  Buf(Backend& be, size_t n) : be_(&be), n_(n), p_(n ? static_cast<float*>(be.alloc(n * sizeof(float))) : nullptr) {}
  // Uninitialised (Backend::alloc_uninit): only for a buffer the next op writes in full.
  struct Uninit {};
  Buf(Backend& be, size_t n, Uninit)
      : be_(&be), n_(n), p_(n ? static_cast<float*>(be.alloc_uninit(n * sizeof(float))) : nullptr) {}
  Buf(const Buf&) = delete;
  Buf& operator=(const Buf&) = delete;
  Buf(Buf&& o) noexcept : be_(o.be_), n_(o.n_), p_(o.p_) { o.p_ = nullptr; o.n_ = 0; }
  Buf& operator=(Buf&& o) noexcept {
    if (this != &o) { reset(); be_ = o.be_; n_ = o.n_; p_ = o.p_; o.p_ = nullptr; o.n_ = 0; }
    return *this;
  }
  ~Buf() { reset(); }
  void reset() { if (p_) be_->release(p_); p_ = nullptr; n_ = 0; }
  float* get() const { return p_; }
  operator float*() const { return p_; }
  size_t size() const { return n_; }

 private:
  Backend* be_ = nullptr;
  size_t n_ = 0;
  float* p_ = nullptr;
};

}  // namespace ferry
