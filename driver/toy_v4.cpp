#include "toy_v4.hpp"

#include <cmath>
#include <random>

#include "cmfx/core/hash64.hpp"

namespace cmfx::driver {

std::vector<toy_tensor> toy_v4_inventory(const toy_v4_config& c) {
  const uint32_t d = c.dim, hd = c.head_dim, H = c.heads, hcd = (2 + c.hc) * c.hc;
  std::vector<toy_tensor> v;
  auto add = [&](std::string n, std::vector<uint32_t> s, toy_role r) { v.push_back({std::move(n), std::move(s), r}); };
  add("embed.weight", {c.vocab, d}, toy_role::matrix);
  for (uint32_t i = 0; i < c.num_layers(); ++i) {
    const std::string p = "layers." + std::to_string(i) + ".";
    const uint32_t ratio = c.compress_ratios[i];
    add(p + "attn_norm.weight", {d}, toy_role::vector);
    add(p + "ffn_norm.weight", {d}, toy_role::vector);
    add(p + "attn.wq_a.weight", {c.q_lora, d}, toy_role::matrix);
    add(p + "attn.q_norm.weight", {c.q_lora}, toy_role::vector);
    add(p + "attn.wq_b.weight", {H * hd, c.q_lora}, toy_role::matrix);
    add(p + "attn.wkv.weight", {hd, d}, toy_role::matrix);
    add(p + "attn.kv_norm.weight", {hd}, toy_role::vector);
    add(p + "attn.wo_a.weight", {c.o_groups * c.o_lora, H * hd / c.o_groups}, toy_role::matrix);
    add(p + "attn.wo_b.weight", {d, c.o_groups * c.o_lora}, toy_role::matrix);
    add(p + "attn.attn_sink", {H}, toy_role::vector);
    if (ratio > 0) {
      const uint32_t coff = ratio == 4 ? 2 : 1;
      add(p + "attn.compressor.wkv.weight", {coff * hd, d}, toy_role::matrix);
      add(p + "attn.compressor.wgate.weight", {coff * hd, d}, toy_role::matrix);
      add(p + "attn.compressor.ape", {ratio, coff * hd}, toy_role::matrix);
      add(p + "attn.compressor.norm.weight", {hd}, toy_role::vector);
    }
    if (ratio == 4) {
      const uint32_t ihd = c.index_head_dim;
      add(p + "attn.indexer.wq_b.weight", {c.index_heads * ihd, c.q_lora}, toy_role::matrix);
      add(p + "attn.indexer.weights_proj.weight", {c.index_heads, d}, toy_role::matrix);
      add(p + "attn.indexer.compressor.wkv.weight", {2 * ihd, d}, toy_role::matrix);
      add(p + "attn.indexer.compressor.wgate.weight", {2 * ihd, d}, toy_role::matrix);
      add(p + "attn.indexer.compressor.ape", {4, 2 * ihd}, toy_role::matrix);
      add(p + "attn.indexer.compressor.norm.weight", {ihd}, toy_role::vector);
    }
    for (const char* sub : {"attn", "ffn"}) {
      add(p + "hc_" + sub + "_fn", {hcd, c.hc * d}, toy_role::matrix);
      add(p + "hc_" + sub + "_base", {hcd}, toy_role::vector);
      add(p + "hc_" + sub + "_scale", {3}, toy_role::vector);
    }
    add(p + "ffn.gate.weight", {c.experts, d}, toy_role::router);
    if (i < c.num_hash_layers)
      add(p + "ffn.gate.tid2eid", {c.vocab, c.top_k}, toy_role::tid2eid);
    else
      add(p + "ffn.gate.bias", {c.experts}, toy_role::vector);
    add_toy_experts(add, p, c.experts, c.moe_inter, d);
  }
  add("norm.weight", {d}, toy_role::vector);
  add("hc_head_fn", {c.hc, c.hc * d}, toy_role::matrix);
  add("hc_head_base", {c.hc}, toy_role::vector);
  add("hc_head_scale", {1}, toy_role::vector);
  add("head.weight", {c.vocab, d}, toy_role::matrix);
  return v;
}

std::vector<float> toy_v4_values(const toy_v4_config& c, const toy_tensor& t, uint64_t seed) {
  uint64_t n = 1;
  for (auto s : t.shape) n *= s;
  std::vector<float> v(n);
  std::mt19937_64 rng(seed ^ hash64(reinterpret_cast<const uint8_t*>(t.name.data()), t.name.size()));
  std::normal_distribution<float> nd(0.0f, 1.0f);
  const std::string& nm = t.name;
  auto ends = [&](const char* s) {
    const std::string e(s);
    return nm.size() >= e.size() && nm.compare(nm.size() - e.size(), e.size(), e) == 0;
  };
  if (t.role == toy_role::tid2eid) {
    // Each token gets top_k distinct experts.
    for (uint64_t r = 0; r < t.shape[0]; ++r) {
      const uint32_t first = uint32_t(rng() % c.experts), stride = 1 + uint32_t(rng() % (c.experts - 1));
      for (uint32_t k = 0; k < c.top_k; ++k) v[r * c.top_k + k] = float((first + k * stride) % c.experts);
    }
    return v;
  }
  if (t.role == toy_role::vector) {
    float base = 0.0f, spread = 0.1f;
    if (ends("norm.weight")) base = 1.0f;                           // RMSNorm gains around 1
    else if (ends("attn_sink")) spread = 0.5f;                      // per-head sink logits
    else if (ends("_scale")) { base = 0.5f; spread = 0.05f; }       // hc scales
    else if (ends("gate.bias")) spread = 0.02f;                     // selection bias
    for (auto& x : v) x = base + spread * nd(rng);
    return v;
  }
  // Matrices: N(0, 1/in) so activations keep their scale through the toy.
  const float sd = 1.0f / std::sqrt(float(t.shape.size() > 1 ? t.shape[1] : 1));
  for (auto& x : v) x = sd * nd(rng);
  return v;
}

nlohmann::ordered_json toy_v4_cmf_header(const toy_v4_config& c, const std::string& quant) {
  nlohmann::ordered_json arch;
  arch["arch_name"] = "deepseek_v4";
  arch["hidden_size"] = c.dim;
  arch["intermediate_size"] = c.moe_inter;
  arch["num_layers"] = c.num_layers();
  arch["num_attention_heads"] = c.heads;
  arch["num_kv_heads"] = 1;
  arch["head_dim"] = c.head_dim;
  arch["vocab_size"] = c.vocab;
  arch["layer_types"] = std::vector<std::string>(c.num_layers(), "FullAttention");
  arch["rms_norm_eps"] = c.rms_eps;
  arch["max_position_embeddings"] = 65536;
  arch["rope_theta"] = 10000.0;
  arch["norm_style"] = "qwen";
  arch["partial_rotary_factor"] = double(c.rope_dim) / double(c.head_dim);
  arch["yarn"] = {{"factor", 16.0}, {"original_max_position_embeddings", 65536}, {"beta_fast", 32.0}, {"beta_slow", 1.0}};
  arch["moe"] = {{"num_experts", c.experts},  {"top_k", c.top_k},         {"moe_intermediate_size", c.moe_inter},
                 {"norm_topk_prob", true},    {"shared_expert_intermediate_size", c.moe_inter},
                 {"routed_scaling_factor", c.route_scale}};
  nlohmann::ordered_json h;
  h["format"] = "cmf";
  h["version"] = 2;
  h["arch"] = arch;
  h["quant_type"] = "Q4_BLOCK";
  h["provenance"] = {{"tool", "cmfx make-toy"}, {"source_model", "toy-v4 (" + quant + ")"}};
  // Values real files pin in code (cmf-format.md §4.4); the toy shrinks them, so it states them.
  h["dsv4"] = {{"compress_ratios", c.compress_ratios}, {"num_hash_layers", c.num_hash_layers},
               {"window", c.window},                  {"index_topk", c.index_topk},
               {"index_heads", c.index_heads},         {"index_head_dim", c.index_head_dim},
               {"rope_dim", c.rope_dim},               {"o_groups", c.o_groups},
               {"swiglu_limit", c.swiglu_limit},       {"hc_mult", c.hc}};
  h["tokenizer_config"] = {{"eos_token_ids", {1}}, {"bos_token_id", 0}};
  return h;
}

nlohmann::ordered_json toy_v4_release_config(const toy_v4_config& c) {
  nlohmann::ordered_json j;
  j["architectures"] = {"DeepseekV4ForCausalLM"};
  j["model_type"] = "deepseek_v4";
  put_toy_attention_dims(j, c, c.num_layers());
  j["num_hash_layers"] = c.num_hash_layers;
  put_toy_moe(j, c);
  put_toy_hc_rope(j, c);
  j["bos_token_id"] = 0;
  j["eos_token_id"] = 1;
  j["expert_dtype"] = "fp4";
  j["quantization_config"] = {{"quant_method", "fp8"}, {"fmt", "e4m3"}, {"scale_fmt", "ue8m0"},
                              {"weight_block_size", {128, 128}}};
  return j;
}

}  // namespace cmfx::driver
