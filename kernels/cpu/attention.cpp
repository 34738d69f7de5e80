// RoPE, attention and the DSA lightning indexer. Attention works on one (query, head) pair at a time
// with a fixed order: scores in increasing key position (dot.hpp order over Dk), the max over the
// visible keys, exp(s - max), the denominator and the weighted value sum both accumulated in increasing
// key position. A query's result depends only on the keys it sees, never on T or L beyond them.
#include <algorithm>
#include <cmath>
#include <string>
#include <vector>

#include "io/errors.hpp"
#include "kernels/cpu/cpu_backend.hpp"
#include "kernels/cpu/dot.hpp"
#include "kernels/cpu/indexer_select.hpp"

namespace ferry::cpu {

void CpuBackend::rope(float* x, int64_t T, int64_t n_heads, int64_t tok_stride, int64_t head_stride, int64_t offset,
                      const int32_t* pos_host, const RopeParams& rope) {
  const int64_t half = rope.dim / 2;
  pool_.parallel_for(T, [&](int64_t t0, int64_t t1) {
    std::vector<float> cs(static_cast<size_t>(half)), sn(static_cast<size_t>(half));
    for (int64_t t = t0; t < t1; ++t) {
      for (int64_t i = 0; i < half; ++i) {
        const double angle = static_cast<double>(pos_host[t]) * static_cast<double>(rope.inv_freq_host[i]);
        cs[i] = static_cast<float>(std::cos(angle)) * rope.attention_factor;
        sn[i] = static_cast<float>(std::sin(angle)) * rope.attention_factor;
      }
      for (int64_t h = 0; h < n_heads; ++h) {
        float* p = x + t * tok_stride + h * head_stride + offset;
        for (int64_t i = 0; i < half; ++i) {
          float& a = rope.interleaved ? p[2 * i] : p[i];
          float& b = rope.interleaved ? p[2 * i + 1] : p[i + half];
          const float a0 = a, b0 = b;
          a = a0 * cs[i] - b0 * sn[i];
          b = b0 * cs[i] + a0 * sn[i];
        }
      }
    }
  });
}

namespace {

// One (query, head): out[Dv] = softmax(scale * q.k_s) v_s over the key positions `keys` (ascending).
void attend_one(const AttentionArgs& a, const float* q, int64_t kh, const int32_t* keys, int64_t nkeys,
                float* scores, float* out) {
  for (int64_t d = 0; d < a.Dv; ++d) out[d] = 0.0f;
  if (nkeys == 0) return;  // nothing visible: zeros (cannot happen for a causal query at position >= 0)
  float mx = -INFINITY;
  for (int64_t i = 0; i < nkeys; ++i) {
    const float* k = a.k + keys[i] * a.k_tok_stride + kh * a.k_head_stride;
    scores[i] = dot(q, k, a.Dk) * a.scale;
    mx = std::max(mx, scores[i]);
  }
  float sum = 0.0f;
  for (int64_t i = 0; i < nkeys; ++i) {
    const float p = std::exp(scores[i] - mx);
    sum = sum + p;
    const float* v = a.v + keys[i] * a.v_tok_stride + kh * a.v_head_stride;
    for (int64_t d = 0; d < a.Dv; ++d) out[d] = out[d] + p * v[d];
  }
  const float inv = 1.0f / sum;
  for (int64_t d = 0; d < a.Dv; ++d) out[d] = out[d] * inv;
}

void check_attention(const AttentionArgs& a) {
  if (a.Hk <= 0 || a.Hq % a.Hk != 0)
    throw LimitError("cpu attention: Hq=" + std::to_string(a.Hq) + " is not a multiple of Hk=" + std::to_string(a.Hk));
  if (a.sel && a.sel_k <= 0) throw LimitError("cpu attention: sel given with sel_k <= 0");
}

}  // namespace

void CpuBackend::attention(const AttentionArgs& a) {
  check_attention(a);
  const int64_t group = a.Hq / a.Hk;
  pool_.parallel_for(a.T * a.Hq, [&](int64_t b, int64_t e) {
    std::vector<float> scores(static_cast<size_t>(a.sel ? a.sel_k : a.L));
    std::vector<int32_t> keys(scores.size());
    for (int64_t th = b; th < e; ++th) {
      const int64_t t = th / a.Hq, h = th % a.Hq;
      const int64_t last = std::min(a.L - 1, a.q_pos0 + t);  // causal: positions <= q_pos0 + t
      int64_t nkeys = 0;
      if (a.sel) {
        for (int64_t i = 0; i < a.sel_k; ++i) {
          const int32_t s = a.sel[t * a.sel_k + i];
          if (s < 0) continue;
          if (s > last)
            throw LimitError("cpu attention: selected key position " + std::to_string(s) + " of query " +
                             std::to_string(t) + " is beyond its last visible position " + std::to_string(last));
          keys[nkeys++] = s;
        }
      } else {
        for (int64_t s = 0; s <= last; ++s) keys[nkeys++] = static_cast<int32_t>(s);
      }
      attend_one(a, a.q + t * a.q_tok_stride + h * a.q_head_stride, h / group, keys.data(), nkeys, scores.data(),
                 a.out + (t * a.Hq + h) * a.Dv);
    }
  });
}

void CpuBackend::indexer_topk(const float* q, const float* k, const float* w, int64_t T, int64_t L, int64_t Hi,
                              int64_t Di, int64_t q_pos0, int64_t topk, int32_t* sel, IndexerTies ties) {
  pool_.parallel_for(T, [&](int64_t t0, int64_t t1) {
    std::vector<float> score(static_cast<size_t>(L));
    std::vector<int32_t> idx(static_cast<size_t>(L));
    for (int64_t t = t0; t < t1; ++t) {
      const int64_t visible = std::max<int64_t>(0, std::min(L, q_pos0 + t + 1));
      for (int64_t s = 0; s < visible; ++s) {
        float acc = 0.0f;  // sum over heads in increasing h
        for (int64_t h = 0; h < Hi; ++h) {
          const float d = dot(q + (t * Hi + h) * Di, k + s * Di, Di);
          acc = acc + w[t * Hi + h] * std::max(d, 0.0f);
        }
        score[s] = acc;
      }
      indexer_select(score.data(), visible, L, topk, ties, idx.data(), sel + t * topk);
    }
  });
}

}  // namespace ferry::cpu
