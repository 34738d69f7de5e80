// Row norms and AttnRes over a cluster of blocks (see row_norm.cuh for the part order).
#include <cooperative_groups.h>

#include <string>

#include "kernels/cuda/common.cuh"
#include "kernels/cuda/row_norm.cuh"
#include "io/errors.hpp"

namespace ferry::cuda::rownorm {

namespace {

namespace cg = cooperative_groups;

constexpr int kWarps = kThreads / 32;

// block_sum's warp tree of v; lane 0 writes it to sh[warp * kMaxInputs + j].
__device__ __forceinline__ void warp_tree(double v, double* sh, int j) {
#pragma unroll
  for (int s = 16; s >= 1; s >>= 1) v += __shfl_down_sync(kFullMask, v, s);
  if ((threadIdx.x & 31) == 0) sh[(threadIdx.x >> 5) * kMaxInputs + j] = v;
}

// The row totals of values 0..n-1 in every block of the cluster (tot), in the part order: each block's
// warps' trees (sh, written by warp_tree) added in warp order into this block's part sums (mine), then the
// cluster's part sums in rank order. Every thread of every block calls it. mine must be this phase's own
// array: a block may run on into the next phase while another still reads this one's.
__device__ __forceinline__ void cluster_totals(cg::cluster_group& cl, const double* sh, double* mine, double* tot,
                                               int n, int parts) {
  __syncthreads();
  if (threadIdx.x < n) {
    double t = 0.0;
    for (int w = 0; w < kWarps; ++w) t += sh[w * kMaxInputs + threadIdx.x];
    mine[threadIdx.x] = t;
  }
  cl.sync();
  if (threadIdx.x < n) {
    double t = 0.0;
    for (int r = 0; r < parts; ++r) t += cl.map_shared_rank(mine, r)[threadIdx.x];
    tot[threadIdx.x] = t;
  }
  __syncthreads();
}

// Loads this thread's elements of row r of v (0 past the row's end).
__device__ __forceinline__ void load_part(const float* v, const int64_t (&e)[kPer], int64_t D, float (&x)[kPer]) {
#pragma unroll
  for (int k = 0; k < kPer; ++k) x[k] = e[k] < D ? v[e[k]] : 0.0f;
}

// ---- the push exchange (row_push) ----------------------------------------------------------------------
// cluster_totals and cluster_max pull: every block writes its part sums into its own shared memory, the
// cluster synchronises, and each block reads the others' (a cluster barrier and a round of remote reads per
// reduction, 5 barriers a launch). Here each block pushes its values into a slot of every block's shared
// memory with st.async, whose completion counts bytes on the receiver's mbarrier (one per reduction, armed
// once with the bytes it will receive), and a block waits on its own mbarrier only (its own part it keeps in
// a register: st.async into the executing block's own shared memory is undefined, and on the H100 it is an
// illegal instruction, CUDA error 715, 2026-12-07): one remote write and a local wait per reduction, one
// cluster barrier a launch (after the mbarriers' initialisation, before the first push; its arrive is split
// from its wait so the loads run in between). Nothing is read remotely and a
// block receives only what it waits for, so no block needs another to stay resident at the end. The values and
// the order of every sum are cluster_totals': the same bits.
__device__ __forceinline__ uint32_t rank_addr(uint32_t a, uint32_t rank) {
  uint32_t r;
  asm volatile("mapa.shared::cluster.u32 %0, %1, %2;\n" : "=r"(r) : "r"(a), "r"(rank));
  return r;
}
__device__ __forceinline__ void push64(uint32_t dst, double v, uint32_t bar) {
  asm volatile("st.async.shared::cluster.mbarrier::complete_tx::bytes.b64 [%0], %1, [%2];\n" ::"r"(dst), "d"(v), "r"(bar)
               : "memory");
}
__device__ __forceinline__ void push32(uint32_t dst, float v, uint32_t bar) {
  asm volatile("st.async.shared::cluster.mbarrier::complete_tx::bytes.b32 [%0], %1, [%2];\n" ::"r"(dst),
               "r"(__float_as_uint(v)), "r"(bar)
               : "memory");
}
__device__ __forceinline__ void cluster_arrive() { asm volatile("barrier.cluster.arrive.release.aligned;\n" ::: "memory"); }
__device__ __forceinline__ void cluster_wait() { asm volatile("barrier.cluster.wait.acquire.aligned;\n" ::: "memory"); }

// The receive side of the push exchange: one mbarrier and slots per reduction.
struct Push {
  uint64_t bar[4];                      // ss, sc, norm, max
  double ss[kMaxParts * kMaxInputs];    // [part][input]
  double sc[kMaxParts * kMaxInputs];
  double n[kMaxParts];
  float mx[kMaxParts];
};

// cluster_totals by pushes: this block's part sums (the warps' trees in sh, in warp order) go to slot p of
// every block's `slots` (part r's values at r * stride); the totals are the slots added in rank order. Every
// thread calls it.
__device__ __forceinline__ void push_totals(const double* sh, double* slots, int stride, uint64_t* bar, double* tot,
                                            int n, int parts, int p) {
  __syncthreads();
  double own = 0.0;  // this block's part: kept in a register (st.async to the executing block is undefined)
  if (threadIdx.x < n) {
    for (int w = 0; w < kWarps; ++w) own += sh[w * kMaxInputs + threadIdx.x];
    const uint32_t dst = smem_u32(slots + p * stride + threadIdx.x), b = smem_u32(bar);
    for (int r = 0; r < parts; ++r)
      if (r != p) push64(rank_addr(dst, r), own, rank_addr(b, r));
  }
  mbar_wait0<true>(bar);
  if (threadIdx.x < n) {
    double t = 0.0;
    for (int r = 0; r < parts; ++r) t += r == p ? own : slots[r * stride + threadIdx.x];
    tot[threadIdx.x] = t;
  }
  __syncthreads();
}

// cluster_max by pushes (a max: any order).
__device__ __forceinline__ float push_max(float m, Push& ps, int parts, int p) {
  const float b = block_max(m);  // this block's part, kept (not pushed to itself)
  if (threadIdx.x < parts && threadIdx.x != p)
    push32(rank_addr(smem_u32(ps.mx + p), threadIdx.x), b, rank_addr(smem_u32(&ps.bar[3]), threadIdx.x));
  mbar_wait0<true>(&ps.bar[3]);
  float rm = b;
  for (int r = 0; r < parts; ++r)
    if (r != p) rm = fmaxf(rm, ps.mx[r]);
  return rm;
}

// Block (part p of row t) = cluster rank p of row t's cluster. AttnRes: as attn_res_scores_kernel +
// attn_res_mix_kernel did per row (the norm of each input, its score, the softmax by one thread in
// order, the mix in increasing s); the norm: as rmsnorm_kernel did; both sums in the part order.
// R: AttnRes inputs kept in registers (0 or 8: row_reg_inputs). P: the push exchange (row_push).
template <int R, bool P = false>
__global__ void __launch_bounds__(kThreads) row_norm_kernel(const __grid_constant__ Call c) {
  cg::cluster_group cl = cg::this_cluster();
  const int parts = static_cast<int>(cl.num_blocks());
  const int p = static_cast<int>(cl.block_rank());
  const int64_t t = blockIdx.x / parts, D = c.dim;
  __shared__ double sh[kWarps * kMaxInputs];
  __shared__ double mine_ss[kMaxInputs], mine_sc[kMaxInputs], mine_n[1], tot[kMaxInputs];
  __shared__ float scale[kMaxInputs], prob[kMaxInputs];
  __shared__ Push ps;
  if constexpr (P) {
    if (threadIdx.x == 0) {  // armed with what each reduction will receive; nothing arrives before the barrier
      const uint32_t others = static_cast<uint32_t>(parts - 1);  // a block keeps its own part
      const uint32_t in = static_cast<uint32_t>(others * c.nv * sizeof(double));
      mbar_arm(&ps.bar[0], in);
      mbar_arm(&ps.bar[1], in);
      mbar_arm(&ps.bar[2], c.norm ? static_cast<uint32_t>(others * sizeof(double)) : 0u);
      mbar_arm(&ps.bar[3], c.norm && c.prep.hi ? static_cast<uint32_t>(others * sizeof(float)) : 0u);
      fence_mbar_init();
    }
    cluster_arrive();
  }
  bool waited = false;  // the cluster barrier's wait, before this block's first push
  auto totals = [&](double* mine, double* slots, int stride, int phase, int n) {
    if constexpr (P) {
      if (!waited) cluster_wait(), waited = true;
      push_totals(sh, slots, stride, &ps.bar[phase], tot, n, parts, p);
    } else {
      cluster_totals(cl, sh, mine, tot, n, parts);
    }
  };
  int64_t e[kPer];
#pragma unroll
  for (int k = 0; k < kPer; ++k) e[k] = p * kPart + threadIdx.x + static_cast<int64_t>(k) * kThreads;
  // Every weight first, before the wait for the kernel before this one (no kernel writes a weight), and
  // before the stores below (a load after them would wait for them: the outputs might alias).
  float nw[kPer], rw[kPer], x[kPer];
  if (c.norm && c.norm_w) load_part(c.norm_w, e, D, nw);
  if (c.nv > 0) load_part(c.res_w, e, D, rw);
  pdl_begin();
  const int64_t row = t * D;
  if (c.nv > 0) {
    // The first R inputs are loaded together, up front, and kept in registers for all three
    // passes (one round trip to memory instead of one per input and pass); the others are loaded in each
    // pass as they come. Where a value comes from only: the same sums in the same order.
    float vr[R > 0 ? R : 1][kPer];
#pragma unroll
    for (int s = 0; s < R; ++s)
      if (s < c.nv) load_part(c.in.v[s] + row, e, D, vr[s]);
    // f(s, v) for every input s in order, v from the registers or loaded now.
    auto each_input = [&](auto&& f) {
#pragma unroll
      for (int s = 0; s < R; ++s) {
        if (s >= c.nv) break;
        f(s, vr[s]);
      }
      for (int s = R; s < c.nv; ++s) {
        float v[kPer];
        load_part(c.in.v[s] + row, e, D, v);
        f(s, v);
      }
    };
    each_input([&](int s, float (&v)[kPer]) {
      if (c.add_to && s == c.nv - 1) {  // p += a: add's op (y = a + b), stored for the passes below
        float a[kPer];
        load_part(c.add_from + row, e, D, a);
#pragma unroll
        for (int k = 0; k < kPer; ++k) {
          v[k] = add(v[k], a[k]);
          if (e[k] < D) c.add_to[row + e[k]] = v[k];
        }
      }
      double ss = 0.0;
#pragma unroll
      for (int k = 0; k < kPer; ++k)
        if (e[k] < D) ss += static_cast<double>(v[k]) * v[k];
      warp_tree(ss, sh, s);
    });
    totals(mine_ss, ps.ss, kMaxInputs, 0, c.nv);
    if (threadIdx.x < c.nv)
      scale[threadIdx.x] = static_cast<float>(1.0 / sqrt(tot[threadIdx.x] / static_cast<double>(D) + c.res_eps));
    __syncthreads();
    each_input([&](int s, float (&v)[kPer]) {
      const float inv = scale[s];
      double sc = 0.0;
#pragma unroll
      for (int k = 0; k < kPer; ++k)
        if (e[k] < D) sc += static_cast<double>(mul(v[k], inv)) * rw[k];
      warp_tree(sc, sh, s);
    });
    totals(mine_sc, ps.sc, kMaxInputs, 1, c.nv);
    if (threadIdx.x < c.nv) prob[threadIdx.x] = static_cast<float>(tot[threadIdx.x]);
    __syncthreads();
    if (threadIdx.x == 0) res_softmax(prob, c.nv, prob);
    __syncthreads();
#pragma unroll
    for (int k = 0; k < kPer; ++k) x[k] = 0.0f;
    each_input([&](int s, float (&v)[kPer]) {
      const float ps = prob[s];
#pragma unroll
      for (int k = 0; k < kPer; ++k) x[k] = add(x[k], mul(ps, v[k]));
    });
    if (c.res_out) {
#pragma unroll
      for (int k = 0; k < kPer; ++k)
        if (e[k] < D) c.res_out[row + e[k]] = x[k];
    }
  } else {
    load_part(c.in.v[0] + row, e, D, x);
  }
  if (c.norm) {
    double ss = 0.0;
#pragma unroll
    for (int k = 0; k < kPer; ++k)
      if (e[k] < D) ss += static_cast<double>(x[k]) * x[k];
    warp_tree(ss, sh, 0);
    totals(mine_n, ps.n, 1, 2, 1);
    const auto inv = static_cast<float>(1.0 / sqrt(tot[0] / static_cast<double>(D) + c.norm_eps));
    float m = 0.0f;
#pragma unroll
    for (int k = 0; k < kPer; ++k) {
      x[k] = c.norm_w ? mul(mul(x[k], inv), nw[k]) : mul(x[k], inv);
      if (e[k] < D) {
        c.y[row + e[k]] = x[k];
        m = fmaxf(m, fabsf(x[k]));
      }
    }
    if (c.prep.hi) {  // xprep::write_row's rule, with the row's max over the cluster
      float rm;
      if constexpr (P) {
        if (!waited) cluster_wait(), waited = true;
        rm = push_max(m, ps, parts, p);
      } else {
        rm = cluster_max(cl, m);
      }
      const int ex = xprep::scale_exp(rm);
      const float up = __int_as_float((ex + 127) << 23);
#pragma unroll
      for (int k = 0; k < kPer; ++k) {
        if (e[k] >= D) break;
        xprep::put_one(c.prep, t, D, e[k], x[k], up);
      }
      if (p == 0 && threadIdx.x == 0) c.prep.inv[t] = __int_as_float((127 - ex) << 23);
    }
  }
  if constexpr (P) {
    if (!waited) cluster_wait();  // every arrive has its wait
  } else {
    cl.sync();  // distributed shared memory: no block leaves while another may still read its own
  }
}

int g_row_cluster = -1;  // row_cluster_tune
int g_fused_add = -1;    // fused_add_tune
int g_row_reg = -1;      // row_reg_inputs_tune
int g_row_push = -1;     // row_push_tune

}  // namespace

bool row_cluster() {
  static const bool env = env_switch("FERRY_ROW_CLUSTER", true);
  return switch_on(g_row_cluster, env);
}
void row_cluster_tune(int on) { g_row_cluster = on; }
bool fused_add() {
  static const bool env = env_switch("FERRY_FUSE_ADD", true);
  return switch_on(g_fused_add, env);
}
void fused_add_tune(int on) { g_fused_add = on; }
bool row_reg_inputs() {
  static const bool env = env_switch("FERRY_ROW_REG", true);
  return switch_on(g_row_reg, env);
}
void row_reg_inputs_tune(int on) { g_row_reg = on; }
bool row_push() {
  static const bool env = env_switch("FERRY_ROW_PUSH", true);
  return switch_on(g_row_push, env);
}
void row_push_tune(int on) { g_row_push = on; }

void launch(const Call& c, int64_t rows, cudaStream_t st) {
  if (rows <= 0) return;
  if (!fits(c.dim, c.nv))
    throw LimitError("cuda row norm: rows of " + std::to_string(c.dim) + " with " + std::to_string(c.nv) +
                     " inputs (max " + std::to_string(kMaxDim) + " and " + std::to_string(kMaxInputs) + ")");
  const int64_t parts = (c.dim + kPart - 1) / kPart;
  if (rows > 0x7fffffff / parts)
    throw LimitError("cuda row norm: " + std::to_string(rows) + " rows of " + std::to_string(c.dim) + " in one call");
  if (row_reg_inputs() && row_push())
    return launch_small_cluster(static_cast<unsigned>(parts), row_norm_kernel<8, true>,
                                dim3(static_cast<unsigned>(rows * parts)), dim3(kThreads), 0, st, c);
  if (row_reg_inputs())
    return launch_small_cluster(static_cast<unsigned>(parts), row_norm_kernel<8>,
                                dim3(static_cast<unsigned>(rows * parts)), dim3(kThreads), 0, st, c);
  launch_small_cluster(static_cast<unsigned>(parts), row_norm_kernel<0>, dim3(static_cast<unsigned>(rows * parts)),
                       dim3(kThreads), 0, st, c);
}

}  // namespace ferry::cuda::rownorm
