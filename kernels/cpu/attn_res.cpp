// Attention residuals (K3, MODEL_SPEC.md §7): per row, a softmax over the nv inputs of
// score_s = sum_d (v_s[d] * rsqrt(mean(v_s^2) + eps)) * w[d], then the weighted sum of the raw inputs.
// The sum of squares and the score are accumulated in double in increasing d; the output sum runs in
// increasing s in float.
#include <algorithm>
#include <cmath>
#include <vector>

#include "kernels/cpu/cpu_backend.hpp"

namespace ferry::cpu {

void CpuBackend::attn_res(const float* const* vs_host, int64_t nv, const float* w, int64_t T, int64_t D, float eps,
                          float* out) {
  pool_.parallel_for(T, [&](int64_t t0, int64_t t1) {
    std::vector<float> p(static_cast<size_t>(nv));
    for (int64_t t = t0; t < t1; ++t) {
      float mx = -INFINITY;
      for (int64_t s = 0; s < nv; ++s) {
        const float* v = vs_host[s] + t * D;
        double ss = 0.0;
        for (int64_t d = 0; d < D; ++d) ss += static_cast<double>(v[d]) * v[d];
        const auto inv = static_cast<float>(1.0 / std::sqrt(ss / static_cast<double>(D) + eps));
        double sc = 0.0;
        for (int64_t d = 0; d < D; ++d) sc += static_cast<double>(v[d] * inv) * w[d];
        p[s] = static_cast<float>(sc);
        mx = std::max(mx, p[s]);
      }
      float sum = 0.0f;
      for (int64_t s = 0; s < nv; ++s) {
        p[s] = std::exp(p[s] - mx);
        sum = sum + p[s];
      }
      float* o = out + t * D;
      for (int64_t d = 0; d < D; ++d) o[d] = 0.0f;
      for (int64_t s = 0; s < nv; ++s) {
        const float ps = p[s] / sum;
        const float* v = vs_host[s] + t * D;
        for (int64_t d = 0; d < D; ++d) o[d] = o[d] + ps * v[d];
      }
    }
  });
}

}  // namespace ferry::cpu
