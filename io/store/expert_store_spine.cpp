// spine.gguf: every non-routed tensor, converted chunk by chunk (a 163840 x 7168 embedding is never
// held in F32 whole).
#include <fmt/format.h>

#include <algorithm>
#include <cstring>

#include "io/formats/convert.hpp"
#include "io/errors.hpp"
#include "io/store/expert_store.hpp"
#include "io/store/expert_store_prepare.hpp"
#include "io/formats/gguf.hpp"
#include "io/formats/model_config.hpp"
#include "io/progress.hpp"

namespace ferry {

std::string spine_gguf_name(const std::string& hf, const std::string& prefix) {
  std::string n = hf;
  if (!prefix.empty() && n.rfind(prefix, 0) == 0) n = n.substr(prefix.size());
  if (n.rfind("model.", 0) == 0) n = n.substr(6);
  return n;
}

std::string hf_name_from_spine(const std::string& g, const std::string& prefix) {
  return g.rfind("lm_head", 0) == 0 ? prefix + g : prefix + "model." + g;
}

bool is_routed_expert_tensor(const std::string& n) {
  for (size_t at = n.find(".experts."); at != std::string::npos; at = n.find(".experts.", at + 1)) {
    const size_t d = at + 9;
    if (d < n.size() && n[d] >= '0' && n[d] <= '9') return true;
  }
  return false;
}

namespace {

// The checkpoint tensors that go into the spine, in checkpoint order. Tensors outside the language
// model's prefix (K3's vision tower) are not part of the text model and are left out.
std::vector<std::string> spine_names(const TensorSource& src, const ModelConfig& c) {
  std::vector<std::string> out;
  for (const auto& n : src.names()) {
    if (is_routed_expert_tensor(n)) continue;
    if (!c.tensor_prefix.empty() && n.rfind(c.tensor_prefix, 0) != 0) continue;
    out.push_back(n);
  }
  return out;
}

DType dtype_of(GgmlType t) {
  switch (t) {
    case GgmlType::q8_0: return DType::q8_0;
    case GgmlType::bf16: return DType::bf16;
    case GgmlType::f16: return DType::f16;
    default: return DType::f32;
  }
}

void to_f32(const TensorView& v, int64_t begin, int64_t n, float* out) {
  switch (v.dtype) {
    case DType::f32: std::memcpy(out, v.data + begin * 4, size_t(n) * 4); return;
    case DType::bf16: bf16_to_f32_n(v.data + begin * 2, out, size_t(n)); return;
    case DType::f16: f16_to_f32_n(v.data + begin * 2, out, size_t(n)); return;
    default:
      throw TensorError(fmt::format("{}: tensor '{}' has dtype {}; the spine takes f32, f16 or bf16", v.file, v.name,
                                    to_string(v.dtype)));
  }
}

// Converts and writes one tensor in chunks of whole rows (Q8_0 blocks never straddle a chunk).
void write_tensor(GgufWriter& w, const std::string& gname, const TensorView& v, DType out, Progress* progress) {
  const int64_t n = v.numel();
  const int64_t row = v.shape.empty() ? 1 : v.shape.back();
  const int64_t chunk = std::max<int64_t>(row, (int64_t(1) << 20) / row * row);
  std::vector<float> f(size_t(std::min(chunk, n)));
  std::vector<uint8_t> bytes;
  for (int64_t at = 0; at < n; at += chunk) {
    const int64_t k = std::min(chunk, n - at);
    if (out == DType::bf16 && v.dtype == DType::bf16) {  // stored precision: copy, no round trip
      w.write(gname, v.data + at * 2, size_t(k) * 2);
      if (progress) progress->add(0, k * 2);
      continue;
    }
    to_f32(v, at, k, f.data());
    if (out == DType::f32) {
      bytes.assign(reinterpret_cast<const uint8_t*>(f.data()), reinterpret_cast<const uint8_t*>(f.data() + k));
    } else if (out == DType::bf16) {
      bytes.resize(size_t(k) * 2);
      for (int64_t i = 0; i < k; ++i) {
        const uint16_t h = f32_to_bf16(f[size_t(i)]);
        std::memcpy(bytes.data() + 2 * i, &h, 2);
      }
    } else {
      bytes.resize(size_t(k / kQK) * sizeof(BlockQ8_0));
      quantize_q8_0(f.data(), reinterpret_cast<BlockQ8_0*>(bytes.data()), k);
    }
    w.write(gname, bytes.data(), bytes.size());
    if (progress) progress->add(0, int64_t(bytes.size()));
  }
}

}  // namespace

int64_t spine_data_bytes(const TensorSource& src, const ModelConfig& c, SpineType spine) {
  int64_t total = 0;
  for (const auto& n : spine_names(src, c)) {
    const auto v = src.get(n);
    const auto g = spine_gguf_name(n, c.tensor_prefix);
    total += int64_t(gguf_tensor_bytes(dtype_of(spine_tensor_type(g, v.shape, spine)), v.shape)) + 32;
  }
  return total;
}

int64_t write_spine_gguf(const std::filesystem::path& file, const TensorSource& src, const ModelConfig& c,
                         const std::string& config_text, const std::vector<std::string>& expert_dirs, SpineType spine,
                         Progress* progress) {
  GgufWriter w(file);
  w.set_value("general.architecture", std::string("ferry"));
  w.set_value("general.name", std::string(c.model_type));
  w.set_value("ferry.config_json", config_text);
  w.set_value("ferry.config_hash", hex64(xxh64_bytes(config_text.data(), config_text.size())));
  w.set_array("ferry.expert_dirs", expert_dirs);
  w.set_value("ferry.spine_type", std::string(to_string(spine)));
  w.set_value("ferry.tensor_prefix", c.tensor_prefix);
  const auto names = spine_names(src, c);
  std::vector<std::pair<std::string, DType>> plan;
  for (const auto& n : names) {
    const auto v = src.get(n);
    const auto g = spine_gguf_name(n, c.tensor_prefix);
    if (g.size() > kGgufMaxTensorName)
      throw LimitError(fmt::format("{}: spine tensor name '{}' is {} bytes, over GGUF's {}", src.describe(), g, g.size(),
                                   kGgufMaxTensorName));
    const DType out = dtype_of(spine_tensor_type(g, v.shape, spine));
    w.add_tensor(g, out, v.shape);
    plan.emplace_back(g, out);
  }
  for (size_t i = 0; i < names.size(); ++i) write_tensor(w, plan[i].first, src.get(names[i]), plan[i].second, progress);
  w.finish();
  return int64_t(names.size());
}

}  // namespace ferry
