#include "dsv4_config.hpp"
#include "model_common.hpp"

#include <cmath>
#include <stdexcept>

#include "cmfx/core/error.hpp"

namespace cmfx::driver {

namespace {

using json = nlohmann::json;

template <class T>
T get_or(const json& j, const char* key, T fallback) {
  return config_get_or<T>(j, key, fallback, "model config");
}
template <class T>
T need(const json& j, const char* key, const char* where) {
  return config_need<T>(j, key, where);
}

uint32_t rope_dim_from_factor(double factor, uint32_t head_dim) {
  // cmf-format.md §4.4: a factor of 1 (or none) means the release's 64-channel tail.
  if (!(factor > 0.0) || factor >= 1.0) return dsv4_rope_dim;
  return uint32_t(std::lround(factor * double(head_dim)));
}

void read_yarn(const json& y, dsv4_config& c) {
  if (!y.is_object()) return;
  c.yarn_factor = get_or<double>(y, "factor", c.yarn_factor);
  c.yarn_original = get_or<double>(y, "original_max_position_embeddings", c.yarn_original);
  c.yarn_beta_fast = get_or<double>(y, "beta_fast", c.yarn_beta_fast);
  c.yarn_beta_slow = get_or<double>(y, "beta_slow", c.yarn_beta_slow);
}

}  // namespace

dsv4_config dsv4_config_from_cmf(const json& header) {
  const char* where = "CMF header arch";
  const auto ai = header.is_object() ? header.find("arch") : header.end();
  if (ai == header.end() || !ai->is_object()) throw usage_error("CMF header: no 'arch' object");
  const json& a = *ai;
  const std::string name = get_or<std::string>(a, "arch_name", "");
  if (name != "deepseek_v4")
    throw usage_error("CMF header: arch_name is '" + name + "'; the model graph runs deepseek_v4 only");
  dsv4_config c;
  c.dim = need<uint32_t>(a, "hidden_size", where);
  c.layers = need<uint32_t>(a, "num_layers", where);
  c.heads = need<uint32_t>(a, "num_attention_heads", where);
  c.head_dim = need<uint32_t>(a, "head_dim", where);
  c.vocab = need<uint32_t>(a, "vocab_size", where);
  c.norm_eps = get_or<double>(a, "rms_norm_eps", c.norm_eps);
  c.rope_theta = get_or<double>(a, "rope_theta", c.rope_theta);
  c.rope_dim = rope_dim_from_factor(get_or<double>(a, "partial_rotary_factor", 0.0), c.head_dim);
  if (auto it = a.find("yarn"); it != a.end()) read_yarn(*it, c);
  if (auto it = a.find("moe"); it != a.end() && it->is_object()) {
    c.experts = get_or<uint32_t>(*it, "num_experts", 0);
    c.top_k = get_or<uint32_t>(*it, "top_k", 0);
    c.moe_inter = get_or<uint32_t>(*it, "moe_intermediate_size", 0);
    c.route_scale = get_or<double>(*it, "routed_scaling_factor", 1.0);  // omitted by the converter when 1.0
  }
  if (c.moe_inter == 0) c.moe_inter = get_or<uint32_t>(a, "intermediate_size", 0);
  // The toy states the values real files pin in code.
  if (auto it = header.find("dsv4"); it != header.end() && it->is_object()) {
    const json& t = *it;
    c.compress_ratios = get_or<std::vector<uint32_t>>(t, "compress_ratios", {});
    c.num_hash_layers = get_or<uint32_t>(t, "num_hash_layers", 0);
    c.window = get_or<uint32_t>(t, "window", c.window);
    c.index_topk = get_or<uint32_t>(t, "index_topk", c.index_topk);
    c.index_heads = get_or<uint32_t>(t, "index_heads", c.index_heads);
    c.index_head_dim = get_or<uint32_t>(t, "index_head_dim", c.index_head_dim);
    c.rope_dim = get_or<uint32_t>(t, "rope_dim", c.rope_dim);
    c.o_groups = get_or<uint32_t>(t, "o_groups", c.o_groups);
    c.swiglu_limit = get_or<double>(t, "swiglu_limit", c.swiglu_limit);
    c.hc = get_or<uint32_t>(t, "hc_mult", c.hc);
  }
  if (auto it = header.find("tokenizer_config"); it != header.end() && it->is_object()) {
    c.bos = get_or<uint32_t>(*it, "bos_token_id", c.bos);
    const auto eos = get_or<std::vector<uint32_t>>(*it, "eos_token_ids", {});
    if (!eos.empty()) c.eos = eos[0];
  }
  return c;
}

rope_config dsv4_rope_config(const dsv4_config& c, bool compressed) {
  rope_config r;
  r.dim = c.rope_dim;
  r.base = compressed ? c.compress_rope_theta : c.rope_theta;
  r.yarn = compressed;  // YaRN on every ratio > 0 layer, off on sliding-window layers (no seqlen guard)
  r.factor = c.yarn_factor;
  r.original = c.yarn_original;
  r.beta_fast = c.yarn_beta_fast;
  r.beta_slow = c.yarn_beta_slow;
  return r;
}

dsv4_config dsv4_config_from_release(const json& j) {
  const char* where = "config.json";
  const std::string type = get_or<std::string>(j, "model_type", "");
  if (type != "deepseek_v4") throw usage_error("config.json: model_type is '" + type + "'; expected deepseek_v4");
  dsv4_config c;
  c.vocab = need<uint32_t>(j, "vocab_size", where);
  c.dim = need<uint32_t>(j, "hidden_size", where);
  c.layers = need<uint32_t>(j, "num_hidden_layers", where);
  c.heads = need<uint32_t>(j, "num_attention_heads", where);
  c.head_dim = need<uint32_t>(j, "head_dim", where);
  c.rope_dim = get_or<uint32_t>(j, "qk_rope_head_dim", c.rope_dim);
  c.q_lora = get_or<uint32_t>(j, "q_lora_rank", 0);
  c.o_lora = get_or<uint32_t>(j, "o_lora_rank", 0);
  c.o_groups = get_or<uint32_t>(j, "o_groups", c.o_groups);
  c.index_heads = get_or<uint32_t>(j, "index_n_heads", c.index_heads);
  c.index_head_dim = get_or<uint32_t>(j, "index_head_dim", c.index_head_dim);
  c.index_topk = get_or<uint32_t>(j, "index_topk", c.index_topk);
  c.window = get_or<uint32_t>(j, "sliding_window", c.window);
  c.compress_ratios = get_or<std::vector<uint32_t>>(j, "compress_ratios", {});
  c.num_hash_layers = get_or<uint32_t>(j, "num_hash_layers", 0);
  c.experts = get_or<uint32_t>(j, "n_routed_experts", 0);
  c.top_k = get_or<uint32_t>(j, "num_experts_per_tok", 0);
  c.moe_inter = get_or<uint32_t>(j, "moe_intermediate_size", 0);
  c.route_scale = get_or<double>(j, "routed_scaling_factor", c.route_scale);
  c.swiglu_limit = get_or<double>(j, "swiglu_limit", c.swiglu_limit);
  c.hc = get_or<uint32_t>(j, "hc_mult", c.hc);
  c.hc_iters = get_or<uint32_t>(j, "hc_sinkhorn_iters", c.hc_iters);
  c.hc_eps = get_or<double>(j, "hc_eps", c.hc_eps);
  c.norm_eps = get_or<double>(j, "rms_norm_eps", c.norm_eps);
  c.rope_theta = get_or<double>(j, "rope_theta", c.rope_theta);
  c.compress_rope_theta = get_or<double>(j, "compress_rope_theta", c.compress_rope_theta);
  if (auto it = j.find("rope_scaling"); it != j.end()) read_yarn(*it, c);
  c.bos = get_or<uint32_t>(j, "bos_token_id", c.bos);
  if (auto it = j.find("eos_token_id"); it != j.end() && !it->is_null()) {  // one id or a list (the first is used)
    const auto eos = it->is_array() ? get_or<std::vector<uint32_t>>(j, "eos_token_id", {})
                                    : std::vector<uint32_t>{get_or<uint32_t>(j, "eos_token_id", c.eos)};
    if (!eos.empty()) c.eos = eos[0];
  }
  const std::string scoring = get_or<std::string>(j, "scoring_func", "sqrtsoftplus");
  if (scoring != "sqrtsoftplus") throw usage_error("config.json: scoring_func '" + scoring + "' is not sqrtsoftplus");
  return c;
}

}  // namespace cmfx::driver
