#pragma once
// The deterministic V4-Flash toy: the release's tensor names and proportions at tiny dimensions.
// Weights are a pure function of (seed, tensor name), so both layouts hold the same model.
#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

namespace cmfx::driver {

/// Toy hyper-parameters (V4-Flash-0731 values in comments; dsv4-architecture.md §1).
struct toy_v4_config {
  uint32_t vocab = 129280;          // 129280 (the real tokenizer's vocabulary)
  uint32_t dim = 64;                // 4096
  std::vector<uint32_t> compress_ratios = {0, 0, 4, 128, 4};  // 43 layers: 0,0,4,128,4,...
  uint32_t num_hash_layers = 3;     // 3
  uint32_t heads = 4;               // 64
  uint32_t head_dim = 64;           // 512
  uint32_t rope_dim = 16;           // 64 (the last rope_dim channels of each head)
  uint32_t q_lora = 32;             // 1024
  uint32_t o_groups = 2;            // 8
  uint32_t o_lora = 32;             // 1024
  uint32_t index_heads = 4;         // 64
  uint32_t index_head_dim = 32;     // 128
  uint32_t index_topk = 8;          // 512
  uint32_t window = 16;             // 128
  uint32_t experts = 8;             // 256
  uint32_t top_k = 2;               // 6
  uint32_t moe_inter = 32;          // 2048
  uint32_t hc = 4;                  // 4
  double rms_eps = 1e-6;
  double route_scale = 1.5;
  double swiglu_limit = 10.0;
  uint32_t num_layers() const { return uint32_t(compress_ratios.size()); }
};

/// What a tensor is, which decides its dtype in each layout.
enum class toy_role { vector, matrix, router, tid2eid, expert_gate_up, expert_down, shared_gate_up, shared_down };

struct toy_tensor {
  std::string name;  // official release name (after convert.py)
  std::vector<uint32_t> shape;
  toy_role role;
};

/// The release-config fields the V4 and V4.1 toys share (config.json / text_config key names), in three runs so
/// that each file keeps the release's key order around its own fields. C: toy_v4_config or toy_v41_config.
template <class C>
void put_toy_attention_dims(nlohmann::ordered_json& j, const C& c, uint32_t layers) {
  j["vocab_size"] = c.vocab;
  j["hidden_size"] = c.dim;
  j["num_hidden_layers"] = layers;
  j["num_attention_heads"] = c.heads;
  j["num_key_value_heads"] = 1;
  j["head_dim"] = c.head_dim;
  j["qk_rope_head_dim"] = c.rope_dim;
  j["q_lora_rank"] = c.q_lora;
  j["o_lora_rank"] = c.o_lora;
  j["o_groups"] = c.o_groups;
  j["index_n_heads"] = c.index_heads;
  j["index_head_dim"] = c.index_head_dim;
  j["index_topk"] = c.index_topk;
  j["sliding_window"] = c.window;
  j["compress_ratios"] = c.compress_ratios;
}
template <class C>
void put_toy_moe(nlohmann::ordered_json& j, const C& c) {
  j["n_routed_experts"] = c.experts;
  j["n_shared_experts"] = 1;
  j["num_experts_per_tok"] = c.top_k;
  j["moe_intermediate_size"] = c.moe_inter;
  j["routed_scaling_factor"] = c.route_scale;
  j["scoring_func"] = "sqrtsoftplus";
}
/// SwiGLU clamp, mHC, norm and RoPE / YaRN (the release's values; the toy's dimensions).
template <class C>
void put_toy_hc_rope(nlohmann::ordered_json& j, const C& c) {
  j["swiglu_limit"] = c.swiglu_limit;
  j["hc_mult"] = c.hc;
  j["hc_sinkhorn_iters"] = 20;
  j["hc_eps"] = 1e-6;
  j["rms_norm_eps"] = c.rms_eps;
  j["rope_theta"] = 10000;
  j["compress_rope_theta"] = 160000;
  j["rope_scaling"] = {{"type", "yarn"}, {"factor", 16}, {"original_max_position_embeddings", 65536},
                       {"beta_fast", 32}, {"beta_slow", 1}};
  j["max_position_embeddings"] = 1048576;
}

/// The dimensions V4 and V4.1 share, from a toy config (C: toy_v4_config or toy_v41_config) into a model config
/// (M: dsv4_config or dsv41_config): the synthetic "tiny" presets are the toys' configs.
template <class M, class C>
void copy_toy_dims(M& m, const C& c) {
  m.dim = c.dim;
  m.heads = c.heads;
  m.head_dim = c.head_dim;
  m.rope_dim = c.rope_dim;
  m.q_lora = c.q_lora;
  m.o_groups = c.o_groups;
  m.o_lora = c.o_lora;
  m.index_heads = c.index_heads;
  m.index_head_dim = c.index_head_dim;
  m.index_topk = c.index_topk;
  m.window = c.window;
  m.experts = c.experts;
  m.top_k = c.top_k;
  m.moe_inter = c.moe_inter;
  m.hc = c.hc;
  m.norm_eps = c.rms_eps;
  m.route_scale = c.route_scale;
  m.swiglu_limit = c.swiglu_limit;
}

/// The routed and shared experts of one layer (prefix "layers.N."): the same names and shapes in V4 and V4.1.
/// add(name, shape, role) appends one tensor.
template <class Add>
void add_toy_experts(Add&& add, const std::string& p, uint32_t experts, uint32_t inter, uint32_t d) {
  for (uint32_t e = 0; e < experts; ++e) {
    const std::string q = p + "ffn.experts." + std::to_string(e) + ".";
    add(q + "w1.weight", {inter, d}, toy_role::expert_gate_up);
    add(q + "w3.weight", {inter, d}, toy_role::expert_gate_up);
    add(q + "w2.weight", {d, inter}, toy_role::expert_down);
  }
  add(p + "ffn.shared_experts.w1.weight", {inter, d}, toy_role::shared_gate_up);
  add(p + "ffn.shared_experts.w3.weight", {inter, d}, toy_role::shared_gate_up);
  add(p + "ffn.shared_experts.w2.weight", {d, inter}, toy_role::shared_down);
}

std::vector<toy_tensor> toy_v4_inventory(const toy_v4_config& c);
/// Values of one tensor (row-major f32; tid2eid holds integer expert ids as floats).
std::vector<float> toy_v4_values(const toy_v4_config& c, const toy_tensor& t, uint64_t seed);
/// The CMF header `arch` object plus the toy's pinned values under "dsv4".
nlohmann::ordered_json toy_v4_cmf_header(const toy_v4_config& c, const std::string& quant);
/// config.json of the official release layout.
nlohmann::ordered_json toy_v4_release_config(const toy_v4_config& c);

}  // namespace cmfx::driver
