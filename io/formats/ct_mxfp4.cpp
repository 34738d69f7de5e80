#include "io/formats/ct_mxfp4.hpp"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "io/formats/convert.hpp"
#include "io/errors.hpp"

namespace ferry {

bool has_ct_mxfp4(const TensorSource& src, const std::string& base) { return src.has(base + ".weight_packed"); }

namespace {
TensorView need_u8_2d(const TensorSource& src, const std::string& name) {
  if (!src.has(name)) throw TensorError(fmt::format("{}: missing tensor '{}' (compressed-tensors MXFP4)", src.describe(), name));
  auto v = src.get(name);
  if (v.dtype != DType::u8 || v.shape.size() != 2)
    throw TensorError(fmt::format("{}: tensor '{}' is {} [{}], expected U8 with 2 dimensions", v.file, name,
                                  to_string(v.dtype), fmt::join(v.shape, ", ")));
  return v;
}
}  // namespace

CtMxfp4View find_ct_mxfp4(const TensorSource& src, const std::string& base, int64_t expect_rows, int64_t expect_cols) {
  CtMxfp4View w;
  w.base = base;
  w.packed = need_u8_2d(src, base + ".weight_packed");
  w.scale = need_u8_2d(src, base + ".weight_scale");
  w.rows = w.packed.shape[0];
  w.cols = w.packed.shape[1] * 2;
  if (w.cols % kQK != 0)
    throw TensorError(fmt::format("{}: tensor '{}' [{}, {}] holds {} columns, not a multiple of {}", w.packed.file,
                                  w.packed.name, w.rows, w.packed.shape[1], w.cols, kQK));
  if (w.scale.shape[0] != w.rows || w.scale.shape[1] != w.cols / kQK)
    throw TensorError(fmt::format("{}: tensor '{}' is [{}, {}], expected [{}, {}] for the {}x{} weight", w.scale.file,
                                  w.scale.name, w.scale.shape[0], w.scale.shape[1], w.rows, w.cols / kQK, w.rows, w.cols));
  if ((expect_rows > 0 && w.rows != expect_rows) || (expect_cols > 0 && w.cols != expect_cols))
    throw TensorError(fmt::format("{}: tensor '{}' is [{}, {}] (a {}x{} weight), expected a {}x{} weight", w.packed.file,
                                  w.packed.name, w.rows, w.packed.shape[1], w.rows, w.cols, expect_rows, expect_cols));
  return w;
}

void ct_mxfp4_to_blocks(const CtMxfp4View& w, BlockMxfp4* out) {
  ct_mxfp4_to_ggml(w.packed.data, w.scale.data, w.rows, w.cols, out);
}

std::vector<BlockMxfp4> ct_mxfp4_to_blocks(const CtMxfp4View& w) {
  std::vector<BlockMxfp4> out(static_cast<size_t>(w.rows * (w.cols / kQK)));
  ct_mxfp4_to_blocks(w, out.data());
  return out;
}

}  // namespace ferry
