// parse_model_config: dispatch on model_type, the fields every family shares, and the checks that
// make a ModelConfig self-consistent before any tensor is read. Family specifics live in
// model_config_families.cpp.
#include <algorithm>
#include <fstream>
#include <sstream>

#include <fmt/format.h>

#include "io/errors.hpp"
#include "io/formats/model_config_parse.hpp"
#include "io/formats/size_limits.hpp"
#include "io/regular_file.hpp"

namespace ferry {

int64_t ModelConfig::count(Mixer m) const { return std::count(mixer.begin(), mixer.end(), m); }
int64_t ModelConfig::count(Ffn f) const { return std::count(ffn.begin(), ffn.end(), f); }

const char* to_string(Arch a) {
  switch (a) {
    case Arch::kimi_k3: return "kimi_k3";
    case Arch::kimi_k31: return "kimi_k31";
    case Arch::kimi_linear: return "kimi_linear";
    case Arch::deepseek_v3: return "deepseek_v3";
    case Arch::deepseek_v32: return "deepseek_v32";
    case Arch::qwen3: return "qwen3";
  }
  return "?";
}

const char* to_string(Mixer m) {
  switch (m) {
    case Mixer::kda: return "kda";
    case Mixer::mla: return "mla";
    case Mixer::dsa: return "dsa";
    case Mixer::gqa: return "gqa";
  }
  return "?";
}

namespace detail {

namespace {
// Token ids are an int, null, or (generation configs) a list whose first entry is the primary id.
int64_t token_id(const JsonFields& t, const std::string& key) {
  const auto* v = t.find(key);
  if (!v) return -1;
  if (v->is_array()) {
    if (v->empty()) return -1;
    if (!(*v)[0].is_number_integer()) t.fail(key, "expected an integer or a list of integers");
    return (*v)[0].get<int64_t>();
  }
  return t.req_int(key);
}
}  // namespace

void parse_common_fields(const JsonFields& t, ModelConfig& c) {
  c.vocab = t.req_int("vocab_size");
  c.hidden = t.req_int("hidden_size");
  c.n_layers = t.req_int("num_hidden_layers");
  c.intermediate = t.req_int("intermediate_size");
  c.rms_eps = t.opt_num("rms_norm_eps", 1e-6);
  c.max_positions = t.opt_int("max_position_embeddings", t.opt_int("model_max_length", 0));
  c.tie_embeddings = t.opt_bool("tie_word_embeddings", false);
  c.bos_id = token_id(t, "bos_token_id");
  c.eos_id = token_id(t, "eos_token_id");
  c.pad_id = token_id(t, "pad_token_id");
  c.n_heads = t.req_int("num_attention_heads");
  c.n_kv_heads = t.opt_int("num_key_value_heads", c.n_heads);
  for (auto [key, v] : {std::pair<const char*, int64_t>{"vocab_size", c.vocab}, {"hidden_size", c.hidden},
                        {"num_hidden_layers", c.n_layers}, {"num_attention_heads", c.n_heads},
                        {"num_key_value_heads", c.n_kv_heads}})
    if (v <= 0) t.fail(key, fmt::format("must be positive, got {}", v));
  if (c.intermediate < 0) t.fail("intermediate_size", "must not be negative");
  for (const char* key : {"max_position_embeddings", "model_max_length"})
    if (t.has(key) && t.req_int(key) <= 0) t.fail(key, fmt::format("must be positive, got {}", t.req_int(key)));
  // Bounded now, not only in validate_model_sizes: the family parsers allocate per layer.
  check_size<ConfigError>(t.where("num_hidden_layers"), c.n_layers, 1, limits::kMaxLayers, "real models have < 200");
  if (!(c.rms_eps > 0)) t.fail("rms_norm_eps", "must be positive");
}

void parse_mla_fields(const JsonFields& t, ModelConfig& c) {
  c.q_lora_rank = t.opt_int("q_lora_rank", 0);  // null: plain q_proj
  c.kv_lora_rank = t.req_int("kv_lora_rank");
  c.qk_nope_dim = t.req_int("qk_nope_head_dim");
  c.qk_rope_dim = t.req_int("qk_rope_head_dim");
  c.v_head_dim = t.req_int("v_head_dim");
  if (c.q_lora_rank < 0) t.fail("q_lora_rank", "must not be negative");
  for (auto [key, v] : {std::pair<const char*, int64_t>{"kv_lora_rank", c.kv_lora_rank},
                        {"qk_nope_head_dim", c.qk_nope_dim}, {"v_head_dim", c.v_head_dim}})
    if (v <= 0) t.fail(key, fmt::format("must be positive, got {}", v));
  for (auto [key, v] : {std::pair<const char*, int64_t>{"qk_nope_head_dim", c.qk_nope_dim},
                        {"qk_rope_head_dim", c.qk_rope_dim}, {"v_head_dim", c.v_head_dim}})
    check_size<ConfigError>(t.where(key), v, 0, limits::kMaxHeadDim, "real heads are <= 512 wide");
  if (c.qk_rope_dim < 0 || c.qk_rope_dim % 2 != 0)
    t.fail("qk_rope_head_dim", fmt::format("must be even and not negative, got {}", c.qk_rope_dim));
  if (t.has("qk_head_dim") && t.req_int("qk_head_dim") != c.qk_head_dim())
    t.fail("qk_head_dim", fmt::format("is {} but qk_nope_head_dim + qk_rope_head_dim = {}", t.req_int("qk_head_dim"),
                                      c.qk_head_dim()));
}

void assign_ffn(const JsonFields& t, ModelConfig& c, bool has_moe) {
  int64_t first_dense = t.opt_int("first_k_dense_replace", 0);
  int64_t freq = t.opt_int("moe_layer_freq", 1);
  if (first_dense < 0 || first_dense > c.n_layers)
    t.fail("first_k_dense_replace", fmt::format("must be in [0, num_hidden_layers={}], got {}", c.n_layers, first_dense));
  if (freq <= 0) t.fail("moe_layer_freq", fmt::format("must be positive, got {}", freq));
  c.ffn.assign(c.n_layers, Ffn::dense);
  if (!has_moe) return;
  for (int64_t i = first_dense; i < c.n_layers; ++i)
    if (i % freq == 0) c.ffn[i] = Ffn::moe;
}

void check_layer_type_lists(const JsonFields& t, const ModelConfig& c) {
  auto check = [&](const char* key, auto expected_name) {
    auto names = t.opt_str_list(key);
    if (names.empty()) return;
    if (static_cast<int64_t>(names.size()) != c.n_layers)
      t.fail(key, fmt::format("has {} entries but num_hidden_layers is {}", names.size(), c.n_layers));
    for (int64_t i = 0; i < c.n_layers; ++i) {
      const char* want = expected_name(i);
      if (names[i] != want)
        t.fail(key, fmt::format("entry {} is '{}' but the layer layout makes layer {} (0-indexed) '{}'", i, names[i],
                                i, want));
    }
  };
  check("layer_types", [&](int64_t i) {
    switch (c.mixer[i]) {
      case Mixer::kda: return "linear_attention";
      case Mixer::dsa: return c.arch == Arch::deepseek_v32 ? "deepseek_sparse_attention" : "full_attention";
      default: return "full_attention";
    }
  });
  check("mlp_layer_types", [&](int64_t i) { return c.ffn[i] == Ffn::moe ? "sparse" : "dense"; });
}

void parse_quantization(const std::optional<JsonFields>& q, ModelConfig& c) {
  if (!q) return;
  std::string method = q->opt_str("quant_method", "");
  std::string format = q->opt_str("format", "");
  if (method == "compressed-tensors" && format == "mxfp4-pack-quantized") {
    c.moe.experts_mxfp4 = true;
    return;
  }
  if (method != "compressed-tensors") q->fail("quant_method", fmt::format("'{}' is not supported (only compressed-tensors "
                                                                         "mxfp4-pack-quantized is)", method));
  q->fail("format", fmt::format("'{}' is not supported (only mxfp4-pack-quantized is)", format));
}

}  // namespace detail

ModelConfig parse_model_config(const std::string& json_text, const std::string& origin) {
  nlohmann::json j;
  try {
    j = nlohmann::json::parse(json_text);
  } catch (const nlohmann::json::exception& e) {
    throw ConfigError(fmt::format("{}: not valid JSON: {}", origin, e.what()));
  }
  JsonFields top(j, origin);
  ModelConfig c;
  c.model_type = top.req_str("model_type");
  static const std::pair<const char*, Arch> kArchs[] = {
      {"kimi_k3", Arch::kimi_k3},         {"kimi_k31", Arch::kimi_k31},         {"kimi_linear", Arch::kimi_linear},
      {"deepseek_v3", Arch::deepseek_v3}, {"deepseek_v32", Arch::deepseek_v32}, {"qwen3", Arch::qwen3}};
  auto it = std::find_if(std::begin(kArchs), std::end(kArchs), [&](auto& p) { return c.model_type == p.first; });
  if (it == std::end(kArchs))
    top.fail("model_type", fmt::format("unknown model_type '{}'; supported: kimi_k3, kimi_k31, kimi_linear, "
                                       "deepseek_v3, deepseek_v32, qwen3", c.model_type));
  c.arch = it->second;
  if (c.is_kimi())
    detail::parse_kimi(top, c);
  else if (c.arch == Arch::qwen3)
    detail::parse_qwen3(top, c);
  else
    detail::parse_deepseek(top, c);
  validate_model_sizes(c, origin);
  return c;
}

ModelConfig load_model_config(const std::filesystem::path& path_or_dir) {
  auto path = std::filesystem::is_directory(path_or_dir) ? path_or_dir / "config.json" : path_or_dir;
  require_regular_file(path, "config file");
  std::ifstream in(path, std::ios::binary);
  if (!in) throw ConfigError(fmt::format("{}: cannot open config file", path.string()));
  std::ostringstream ss;
  ss << in.rdbuf();
  return parse_model_config(ss.str(), path.string());
}

}  // namespace ferry
