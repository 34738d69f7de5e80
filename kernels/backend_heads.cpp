// The portable Backend::matmul_heads: one matmul per head on contiguous copies of its slices. The CPU
// back-end uses it as is (it is exactly the sequence the MLA layer ran before the op existed).
#include <string>

#include "io/errors.hpp"
#include "kernels/backend.hpp"

namespace ferry {

void Backend::matmul_heads(const Weight& w, const HeadsLayout& l, const float* x, int64_t n, float* y) {
  if (n <= 0 || l.heads <= 0) return;
  if (w.empty() || w.rows <= 0 || w.cols <= 0 || l.w_head_rows < 0)
    throw TensorError("matmul_heads: empty weight or negative head offset (rows=" + std::to_string(w.rows) +
                      ", cols=" + std::to_string(w.cols) + ")");
  Buf xin(*this, static_cast<size_t>(n * w.cols)), out(*this, static_cast<size_t>(n * w.rows));
  for (int64_t h = 0; h < l.heads; ++h) {
    Weight wh = w;
    wh.data = static_cast<const char*>(w.data) + h * l.w_head_rows * static_cast<int64_t>(w.row_bytes());
    copy2d(x + h * l.x_head, l.x_tok, xin, w.cols, n, w.cols);
    matmul(wh, xin, n, out);
    copy2d(out, w.rows, y + h * l.y_head, l.y_tok, n, w.rows);
  }
}

}  // namespace ferry
