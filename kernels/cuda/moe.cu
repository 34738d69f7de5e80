// The CUDA back-end's mixture-of-experts ops: expert_ffn (a batch of routed experts in a few launches)
// and moe_combine (the rank-ordered weighted sum of their outputs in one launch).
//
// expert_ffn, fast path (every weight of the batch q8_0 or mxfp4 of one type, cols % 512 == 0, 16-byte
// aligned; the real models' experts): per wave of up to kWaveRows rows, one grouped gate+up launch per
// 256 rows (moe_grouped.cu: x rows gathered in the kernel, outputs to an intermediate [rows, inter] in
// the back-end's grow-only scratch), one activation launch over the wave, one grouped down launch per
// 256 rows scattering into y. A decode step's batch of 16 one-row experts is 3 launches and no
// host-to-device copy (the row lists travel as kernel parameters). Each output element is computed
// by the plain fast matmul's block body, so it is bit-identical to the per-expert sequence.
//
// Generic path (other weights): the same waves, with the gather and scatter as row-copy launches and
// one CudaBackend matmul per piece on the contiguous gathered rows: still bit-identical (the matmul is
// row-invariant), just more launches.
#include <algorithm>
#include <string>
#include <vector>

#include "io/errors.hpp"
#include "kernels/cuda/common.cuh"
#include "kernels/cuda/cuda_backend.cuh"
#include "kernels/cuda/cuda_check.cuh"
#include "kernels/cuda/xprep.cuh"
#include "kernels/cuda/switches.hpp"
#include "kernels/cuda/matmul.cuh"
#include "kernels/cuda/matmul_mma_launch.cuh"
#include "kernels/cuda/moe.cuh"

namespace ferry::cuda {

namespace {

// Rows per wave: bounds the intermediate scratch (2 x rows x inter floats: 48 MiB at inter = 3072) for
// prompt-pass batches with thousands of rows.
constexpr int kWaveRows = 8 * kGroupRows;
constexpr int64_t kScratchAlign = 64;  // floats: 256-byte aligned sub-buffers

int64_t round_up(int64_t v) { return (v + kScratchAlign - 1) / kScratchAlign * kScratchAlign; }

// One launch table and, host-side, the call each of its pieces comes from (the generic path's
// per-piece matmuls need the whole Weight).
struct Launch {
  GroupTable t;
  const ExpertCall* call[kGroupCalls];
};

// A wave: launches [first, last) and its row count; table bases count from the wave's first row.
struct Wave {
  size_t first = 0, last = 0;
  int rows = 0;
};

// Cuts the batch into launches (at most kGroupCalls pieces and kGroupRows rows each) and waves. An
// expert with more rows than fit is cut into pieces: rows never interact, so where it is cut changes
// no bit.
void plan(const ExpertFfnArgs& a, std::vector<Launch>& ls, std::vector<Wave>& waves) {
  GroupTable* t = nullptr;
  for (size_t ci = 0; ci < a.n_calls; ++ci) {
    const ExpertCall& c = a.calls[ci];
    for (int64_t r = 0; r < c.m;) {
      const bool wave_full = !waves.empty() && waves.back().rows == kWaveRows;
      if (!t || t->ncalls == kGroupCalls || t->rows == kGroupRows || wave_full) {
        if (waves.empty() || wave_full) waves.push_back({ls.size(), ls.size(), 0});
        ls.emplace_back();  // value-initialised: all zero
        t = &ls.back().t;
        t->base = waves.back().rows;
        waves.back().last = ls.size();
      }
      const int room = std::min(kGroupRows - t->rows, kWaveRows - waves.back().rows);
      const int take = static_cast<int>(std::min<int64_t>(c.m - r, room));
      const int p = t->ncalls++;
      ls.back().call[p] = &c;
      t->loc[p] = t->rows;
      t->m[p] = take;
      t->w[p][0] = static_cast<const uint8_t*>(c.gate.data);
      t->w[p][1] = static_cast<const uint8_t*>(c.up.data);
      t->w[p][2] = static_cast<const uint8_t*>(c.down.data);
      std::copy_n(c.rows_host + r, take, t->src + t->rows);
      std::copy_n(c.dst_host + r, take, t->dst + t->rows);
      t->rows += take;
      waves.back().rows += take;
      r += take;
    }
  }
}

// Whether every weight takes the fast path, as CudaBackend::matmul would: outside a prompt pass that
// also means no weight of the batch is one the decode kernels take (matmul_dec_supported; a batch with
// some goes per expert). The intermediate (down's input) is scratch, 256-byte aligned, and its rows are
// inter floats apart (inter % 512 == 0 when down qualifies): nullptr stands for that aligned input.
bool grouped_fast_ok(const ExpertFfnArgs& a, bool prompt) {
  const WType type = a.calls[0].gate.type;
  // A weight on the tensor cores, or one whose K is split (CudaBackend::matmul splits it, the grouped
  // kernels never do), keeps the batch per expert: the per-expert matmuls' bits.
  const auto dec = [prompt](const Weight& w) {
    return (!prompt && matmul_dec_supported(w)) || matmul_ksplit(w).parts > 1;
  };
  for (size_t i = 0; i < a.n_calls; ++i) {
    const ExpertCall& c = a.calls[i];
    if (c.gate.type != type || c.up.type != type || c.down.type != type || !matmul_fast_supported(c.gate, a.x) ||
        !matmul_fast_supported(c.up, a.x) || !matmul_fast_supported(c.down, nullptr) || dec(c.gate) ||
        dec(c.up) || dec(c.down))
      return false;
  }
  return true;
}

// Generic path's row copies: gather dst[base + i] = src[t.src[i]] or scatter dst[t.dst[i]] = src[base + i].
struct RowCopyArgs {
  GroupTable t;
  const float* src;
  float* dst;
  int64_t cols;
  bool gather;
};

__global__ void row_copy_kernel(const __grid_constant__ RowCopyArgs a) {
  pdl_begin();
  const int i = static_cast<int>(blockIdx.y);
  const int64_t s = a.gather ? a.t.src[i] : a.t.base + i;
  const int64_t d = a.gather ? a.t.base + i : a.t.dst[i];
  for (int64_t c = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; c < a.cols;
       c += static_cast<int64_t>(gridDim.x) * blockDim.x)
    a.dst[d * a.cols + c] = a.src[s * a.cols + c];
}

void launch_row_copy(const GroupTable& t, const float* src, float* dst, int64_t cols, bool gather, cudaStream_t st) {
  if (t.rows == 0) return;
  const RowCopyArgs a{t, src, dst, cols, gather};
  const dim3 grid(blocks_for(std::min<int64_t>(cols, 4096), 256), static_cast<unsigned>(t.rows));
  launch_small(row_copy_kernel, grid, 256, 0, st, a);
}

// acc[t, c] = sum_j w[t*k+j] * y[(t*k+j)*dim + c], j in order, each product and sum rounded (the axpy
// sequence from +0). Weights of small calls travel in the parameter block (no copy); larger ones in
// device memory.
constexpr int kParamWeights = 512;
struct CombineArgs {
  const float* y;
  const float* wts;  // device copy, or nullptr: use wpar
  float wpar[kParamWeights];
  int64_t n, k, dim;
  float* acc;
};

__global__ void combine_kernel(const __grid_constant__ CombineArgs a) {
  pdl_begin();
  const float* w = a.wts ? a.wts : a.wpar;
  const int64_t total = a.n * a.dim;
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < total;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const int64_t t = i / a.dim, c = i - t * a.dim;
    float s = 0.0f;
    for (int64_t j = 0; j < a.k; ++j) s = add(s, mul(w[t * a.k + j], a.y[(t * a.k + j) * a.dim + c]));
    a.acc[i] = s;
  }
}

}  // namespace

namespace {

// Range-for over a pointer and a count (C++17: no std::span).
struct Span {
  const Launch* p;
  size_t n;
  const Launch* begin() const { return p; }
  const Launch* end() const { return p + n; }
};

// Intermediate buffers of one wave (scratch): g, u [wave rows, inter]; the generic path's gathered x
// and down outputs xg, yg [wave rows, in].
struct MoeScratch {
  float *g, *u, *xg, *yg;
};

// One launch over the whole wave, in place into g (element-wise: same bits as per-expert calls).
void expert_act(Backend& be, const ExpertAct& act, float* g, const float* u, int64_t n) {
  if (act.situ)
    be.situ(g, u, n, act.beta, act.lbeta, g);
  else
    be.swiglu(g, u, n, g);
}

// Launches ls[0, nls) of one wave of `rows` rows.
void ffn_wave_fast(CudaBackend& be, const ExpertFfnArgs& a, const Launch* ls, size_t nls, int rows,
                   const MoeScratch& s) {
  const cudaStream_t st = be.stream();
  const int in = static_cast<int>(a.in), inter = static_cast<int>(a.inter);
  const WType type = a.calls[0].gate.type;
  for (const Launch& l : Span{ls, nls}) launch_grouped_gate_up(l.t, type, a.x, in, inter, s.g, s.u, st);
  expert_act(be, a.act, s.g, s.u, rows * a.inter);
  for (const Launch& l : Span{ls, nls}) launch_grouped_down(l.t, type, s.g, in, inter, a.y, st);
}

// A wave on the tensor cores: x was prepared once for the call (xp); the intermediate is prepared after
// the activation, into `act_buf`. A prompt pass's kernels (prompt: matmul_mma.cuh) or the decode
// steps' and verify blocks' (matmul_dec.cuh).
void ffn_wave_tc(CudaBackend& be, const ExpertFfnArgs& a, const Launch* ls, size_t nls, int rows,
                 const MoeScratch& s, const mma::XPrep& xp, void* act_buf, bool prompt) {
  const cudaStream_t st = be.stream();
  const int in = static_cast<int>(a.in), inter = static_cast<int>(a.inter);
  const WType type = a.calls[0].gate.type;
  const WLayout layout = a.calls[0].gate.layout;  // one for the batch: grouped_tc_ok
  // A prompt pass's wave: its tables in device memory, one launch for gate / up and one for down
  // (moe_wave(); the same items, so the same bits).
  WaveLaunch wl;
  const bool wave = prompt && moe_wave();
  if (wave) {
    std::vector<GroupTable> tabs(nls);
    for (size_t i = 0; i < nls; ++i) tabs[i] = ls[i].t;
    tabulate_wave(tabs.data(), static_cast<int>(nls), wl);
    wl.dev = static_cast<const GroupTable*>(be.stage(CudaBackend::kMoeTabs, tabs.data(), nls * sizeof(GroupTable)));
    launch_wave_gate_up_mma(wl, type, layout, xp, in, inter, s.g, s.u, st);
  } else {
    for (const Launch& l : Span{ls, nls}) {
      if (prompt)
        launch_grouped_gate_up_mma(l.t, type, layout, xp, in, inter, s.g, s.u, st);
      else
        launch_grouped_gate_up_dec(l.t, type, layout, xp, in, inter, s.g, s.u, st);
    }
  }
  // The activation and its preparation for the down projections in one launch (prep_gate), or one each.
  const XOrder order = x_order(type, prompt, layout);
  const bool lo8 = prompt && prompt_lo8(type);
  mma::XPrep ap;
  if (fused_gate() && prep_gate_ok(s.g, s.u, nullptr, a.inter)) {
    const GateAct act{a.act.situ ? GateOp::situ : GateOp::swiglu, a.act.beta, a.act.lbeta};
    ap = prep_gate(act, s.g, s.u, rows, inter, nullptr, act_buf, st, !prompt, order, lo8);
  } else {
    expert_act(be, a.act, s.g, s.u, rows * a.inter);
    ap = prep_x(s.g, rows, inter, act_buf, st, !prompt, order, lo8);
  }
  if (wave) return launch_wave_down_mma(wl, type, layout, ap, in, inter, a.y, st);
  for (const Launch& l : Span{ls, nls}) {
    if (prompt)
      launch_grouped_down_mma(l.t, type, layout, ap, in, inter, a.y, st);
    else
      launch_grouped_down_dec(l.t, type, layout, ap, in, inter, a.y, st);
  }
}

// Whether every weight of the batch runs on the tensor cores: a prompt pass's kernels (prompt) or the
// decode kernels. The same test as CudaBackend::matmul's for each weight, so the batch has the bits of
// the per-expert matmuls. mxfp4 tiles (resident experts, prepare_expert_weights) always do, and only
// in a batch of tiles: a batch that mixes them with rows is refused by name (FileExperts and
// ResidentExperts prepare all their experts; the streamed ones are never prepared).
bool grouped_tc_ok(const ExpertFfnArgs& a, bool prompt) {
  const WType type = a.calls[0].gate.type;
  const WLayout layout = a.calls[0].gate.layout;
  const auto ok = [prompt, layout](const Weight& w) {
    if (w.layout != layout)
      throw TensorError("cuda expert_ffn: a batch mixes experts in mxfp4 tiles (resident) with experts in rows");
    if (layout == WLayout::mx_tiles) return true;
    return prompt ? matmul_mma_supported(w) : matmul_dec_supported(w) && matmul_ksplit(w).parts == 1;
  };
  bool all = true;
  for (size_t i = 0; i < a.n_calls; ++i) {
    const ExpertCall& c = a.calls[i];
    const bool same = c.gate.type == type && c.up.type == type && c.down.type == type;
    const bool on = ok(c.gate) & ok(c.up) & ok(c.down);  // & : every weight's layout is checked
    if (!same || !on) all = false;
  }
  if (!all && layout == WLayout::mx_tiles)
    throw TensorError("cuda expert_ffn: a batch of mxfp4 tiles with other weight types");
  return all;
}

void ffn_wave_generic(CudaBackend& be, const ExpertFfnArgs& a, const Launch* ls, size_t nls, int rows,
                      const MoeScratch& s) {
  const cudaStream_t st = be.stream();
  for (const Launch& l : Span{ls, nls}) {
    launch_row_copy(l.t, a.x, s.xg, a.in, true, st);
    for (int p = 0; p < l.t.ncalls; ++p) {
      const int64_t off = l.t.base + l.t.loc[p];
      be.matmul(l.call[p]->gate, s.xg + off * a.in, l.t.m[p], s.g + off * a.inter);
      be.matmul(l.call[p]->up, s.xg + off * a.in, l.t.m[p], s.u + off * a.inter);
    }
  }
  expert_act(be, a.act, s.g, s.u, rows * a.inter);
  for (const Launch& l : Span{ls, nls}) {
    for (int p = 0; p < l.t.ncalls; ++p) {
      const int64_t off = l.t.base + l.t.loc[p];
      be.matmul(l.call[p]->down, s.g + off * a.inter, l.t.m[p], s.yg + off * a.in);
    }
    launch_row_copy(l.t, s.yg, a.y, a.in, false, st);
  }
}

}  // namespace

void CudaBackend::expert_ffn(const ExpertFfnArgs& a) {
  validate_expert_ffn(a, "cuda expert_ffn");
  int64_t total = 0;
  for (size_t i = 0; i < a.n_calls; ++i) total += a.calls[i].m;
  if (total == 0) return;
  if (a.in > (int64_t{1} << 30) || a.inter > (int64_t{1} << 30))
    throw LimitError("cuda expert_ffn: in=" + std::to_string(a.in) + ", inter=" + std::to_string(a.inter) +
                     " (max 2^30)");
  bind();
  std::vector<Launch> ls;
  std::vector<Wave> waves;
  plan(a, ls, waves);
  // Tensor cores (a prompt pass's kernels, or the decode kernels) where every weight allows them, else
  // the CUDA-core grouped kernels, else per-expert matmuls.
  const bool mma = grouped_tc_ok(a, prompt_pass_);
  const bool fast = mma || grouped_fast_ok(a, prompt_pass_);
  const int64_t wave = std::min<int64_t>(total, kWaveRows);
  const int64_t gi = round_up(wave * a.inter), xi = fast ? 0 : round_up(wave * a.in);
  MoeScratch s{};
  s.g = static_cast<float*>(scratch(kMoeAct, static_cast<size_t>(2 * gi + 2 * xi) * sizeof(float)));
  s.u = s.g + gi;
  s.xg = s.u + gi;
  s.yg = s.xg + xi;
  // The tensor-core path: one scratch for the prepared x (the whole call) and the prepared
  // intermediate (one wave).
  mma::XPrep xp;
  uint8_t* act_buf = nullptr;
  if (mma) {
    const size_t xb = (mma_prep_bytes(a.x_rows, a.in) + 255) & ~size_t{255};
    auto* buf = static_cast<uint8_t*>(scratch(kMmaX, xb + mma_prep_bytes(wave, a.inter)));
    const XOrder order = x_order(a.calls[0].gate.type, prompt_pass_, a.calls[0].gate.layout);
    xp = prompt_pass_ ? prep_x(a.x, a.x_rows, a.in, buf, stream_, false, order, prompt_lo8(a.calls[0].gate.type))
                      : prep_decode(a.x, a.x_rows, a.in, buf, order);
    act_buf = buf + xb;
  }
  for (const Wave& w : waves) {
    if (mma)
      ffn_wave_tc(*this, a, ls.data() + w.first, w.last - w.first, w.rows, s, xp, act_buf, prompt_pass_);
    else if (fast)
      ffn_wave_fast(*this, a, ls.data() + w.first, w.last - w.first, w.rows, s);
    else
      ffn_wave_generic(*this, a, ls.data() + w.first, w.last - w.first, w.rows, s);
  }
}

void CudaBackend::moe_combine(const float* y, const float* wts_host, int64_t n, int64_t k, int64_t dim, float* acc) {
  if (n <= 0 || dim <= 0) return;
  if (k <= 0) throw LimitError("cuda moe_combine: k=" + std::to_string(k) + " must be positive");
  bind();
  CombineArgs a{y, nullptr, {}, n, k, dim, acc};
  const int64_t nw = n * k;
  if (nw <= kParamWeights)
    std::copy_n(wts_host, nw, a.wpar);
  else
    a.wts = static_cast<const float*>(stage(kMoeWts, wts_host, static_cast<size_t>(nw) * sizeof(float)));
  const unsigned blocks = blocks_for(n * dim, 256);
  launch_small(combine_kernel, std::min(blocks, 65535u * 16), 256, 0, stream_, a);
}

}  // namespace ferry::cuda
