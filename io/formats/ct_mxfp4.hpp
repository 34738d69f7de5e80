// compressed-tensors MXFP4 weights in a TensorSource (MODEL_SPEC.md §11): `<base>.weight_packed`
// U8 [out, in/2] and `<base>.weight_scale` U8 [out, in/32], found, checked and repacked into ggml
// MXFP4 blocks.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "io/formats/ggml_blocks.hpp"
#include "io/formats/tensor_source.hpp"

namespace ferry {

struct CtMxfp4View {
  std::string base;      // e.g. "model.layers.1.mlp.experts.3.gate_proj"
  int64_t rows = 0;      // out features
  int64_t cols = 0;      // in features (a multiple of 32)
  TensorView packed;     // U8 [rows, cols/2]
  TensorView scale;      // U8 [rows, cols/32]
};

// True when the source holds `<base>.weight_packed` (the checkpoint stores this matrix as MXFP4).
bool has_ct_mxfp4(const TensorSource& src, const std::string& base);
// Finds and validates both tensors; throws TensorError naming the tensor and the source when one is
// missing or has the wrong dtype or shape. expect_rows/expect_cols (when > 0) pin the logical shape.
CtMxfp4View find_ct_mxfp4(const TensorSource& src, const std::string& base, int64_t expect_rows = 0,
                          int64_t expect_cols = 0);
// The weight as ggml MXFP4 blocks [rows, cols/32] (exact repack, see convert.hpp).
std::vector<BlockMxfp4> ct_mxfp4_to_blocks(const CtMxfp4View& w);
void ct_mxfp4_to_blocks(const CtMxfp4View& w, BlockMxfp4* out);  // out holds rows*cols/32 blocks

}  // namespace ferry
