// RoPE parsing and the range checks shared by the families (MODEL_SPEC.md §5, §6, §8).
#include <fmt/format.h>

#include "io/errors.hpp"
#include "io/formats/model_config_parse.hpp"

namespace ferry::detail {

namespace {
void parse_rope_params(const JsonFields& p, RopeConfig& r) {
  std::string type = p.opt_str("rope_type", p.opt_str("type", "default"));
  if (type == "default") {
    r.type = RopeType::default_;
  } else if (type == "yarn") {
    r.type = RopeType::yarn;
    r.factor = p.req_num("factor");
    r.original_max_position = p.req_int("original_max_position_embeddings");
    r.beta_fast = p.opt_num("beta_fast", 32.0);
    r.beta_slow = p.opt_num("beta_slow", 1.0);
    r.mscale = p.opt_num("mscale", 1.0);
    r.mscale_all_dim = p.opt_num("mscale_all_dim", 0.0);
    if (!(r.factor >= 1.0)) p.fail("factor", fmt::format("must be >= 1, got {}", r.factor));
    if (r.original_max_position <= 0) p.fail("original_max_position_embeddings", "must be positive");
  } else {
    p.fail(p.has("rope_type") ? "rope_type" : "type", fmt::format("'{}' is not supported (default, yarn are)", type));
  }
}
}  // namespace

RopeConfig parse_rope(const JsonFields& t, bool interleaved_default) {
  RopeConfig r;
  r.interleaved = t.opt_bool("rope_interleave", interleaved_default);
  r.type = RopeType::default_;
  r.theta = t.opt_num("rope_theta", 10000.0);
  if (auto rp = t.maybe_obj("rope_parameters")) {
    // transformers >= 5 folds rope_theta into rope_parameters.
    r.theta = rp->opt_num("rope_theta", r.theta);
    parse_rope_params(*rp, r);
  } else if (auto rs = t.maybe_obj("rope_scaling")) {
    parse_rope_params(*rs, r);
  }
  if (!(r.theta > 0)) t.fail("rope_theta", fmt::format("must be positive, got {}", r.theta));
  return r;
}

void check_moe(const JsonFields& t, const MoeConfig& m, const MoeKeys& k) {
  if (m.n_experts <= 0) t.fail(k.n_experts, fmt::format("must be positive, got {}", m.n_experts));
  if (m.top_k <= 0 || m.top_k > m.n_experts)
    t.fail(k.top_k, fmt::format("must be in [1, {}={}], got {}", k.n_experts, m.n_experts, m.top_k));
  if (m.moe_inter <= 0) t.fail("moe_intermediate_size", fmt::format("must be positive, got {}", m.moe_inter));
  if (m.n_group <= 0 || m.n_experts % m.n_group != 0)
    t.fail(k.n_group, fmt::format("must be positive and divide {}={}, got {}", k.n_experts, m.n_experts, m.n_group));
  if (m.topk_group <= 0 || m.topk_group > m.n_group)
    t.fail(k.topk_group, fmt::format("must be in [1, {}={}], got {}", k.n_group, m.n_group, m.topk_group));
  // Grouped routing keeps topk_group groups and picks top_k inside them: there must be enough.
  if (m.top_k > m.topk_group * (m.n_experts / m.n_group))
    t.fail(k.top_k, fmt::format("{} exceeds the {} experts in the {} selected groups", m.top_k,
                                m.topk_group * (m.n_experts / m.n_group), m.topk_group));
}

void check_indexer(const JsonFields& obj, const ModelConfig& c) {
  if (c.index_n_heads <= 0) obj.fail("index_n_heads", fmt::format("must be positive, got {}", c.index_n_heads));
  if (c.index_topk <= 0) obj.fail("index_topk", fmt::format("must be positive, got {}", c.index_topk));
  // The indexer rotates the first qk_rope_head_dim dims of its keys (§5), so they must fit.
  if (c.index_head_dim <= 0 || c.index_head_dim < c.qk_rope_dim)
    obj.fail("index_head_dim", fmt::format("must be positive and at least qk_rope_head_dim={}, got {}", c.qk_rope_dim,
                                           c.index_head_dim));
}

}  // namespace ferry::detail
