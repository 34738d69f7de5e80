// The end of a Backend::rmsnorm_kept / attn_res_norm promise (nothing writes y until drop_x(y)), also
// when what reads y throws: constructed right after the norm, destroyed when y's readers are done.
#pragma once

#include "kernels/backend.hpp"

namespace ferry {

class KeptX {
 public:
  KeptX(Backend& be, const float* y) : be_(be), y_(y) {}
  ~KeptX() { be_.drop_x(y_); }
  KeptX(const KeptX&) = delete;
  KeptX& operator=(const KeptX&) = delete;

 private:
  Backend& be_;
  const float* y_;
};

}  // namespace ferry
