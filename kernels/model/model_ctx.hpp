// Internal: the values one Model::forward call shares between its layers.
#pragma once

#include <cmath>
#include <vector>

#include "kernels/model/model.hpp"

namespace ferry {

struct Model::Ctx {
  SeqState* s = nullptr;
  int64_t n = 0;               // rows in this call
  int64_t pos0 = 0;            // position of row 0
  bool prefill = false;
  SeqSnapshot* snap = nullptr; // ForwardOptions::snapshot, when its row falls in this pass
  int64_t snap_row = 0;        // rows of this pass before the snapshot point
  std::vector<int32_t> pos;    // host positions [n]
};

// Small numeric helpers shared by the model files.
inline float yarn_mscale(double factor, double m) {
  return factor <= 1.0 ? 1.0f : static_cast<float>(0.1 * m * std::log(factor) + 1.0);
}

}  // namespace ferry
