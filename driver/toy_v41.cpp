#include "toy_v41.hpp"

#include <algorithm>
#include <cmath>
#include <stdexcept>

#include "cmfx/formats/exmy.hpp"
#include "cmfx/formats/mx.hpp"
#include "model/dsv41_engram.hpp"

namespace cmfx::driver {

namespace {
bool has(const std::vector<uint32_t>& v, uint32_t x) { return std::find(v.begin(), v.end(), x) != v.end(); }
}  // namespace

std::vector<uint64_t> toy_v41_engram_rows(const toy_v41_config& c) {
  dsv41_config e;
  e.vocab = c.vocab;
  e.dim = c.dim;
  e.hc = c.hc;
  e.engram_layers = c.engram_layers;
  e.engram_vocab_size = c.engram_vocab_size;
  e.engram_heads = c.engram_heads;
  e.engram_head_dim = c.engram_head_dim;
  e.engram_max_ngram = c.engram_max_ngram;
  e.engram_pad_id = c.engram_pad_id;
  e.engram_compressed_vocab = c.engram_compressed_vocab;
  e.engram_multipliers = c.engram_multipliers;
  const engram_layout L(dsv41_engram_config(e));
  std::vector<uint64_t> rows;
  for (size_t i = 0; i < L.layer_count(); ++i) rows.push_back(L.layer(i).rows);
  return rows;
}

encoded_matrix toy_v41_engram_table_fp8(const float* w, uint64_t rows, uint64_t cols) {
  const uint32_t B = toy_v41_engram_scale_block;
  if (cols % B) throw std::invalid_argument("toy Engram table: cols must be a multiple of 32");
  encoded_matrix e;
  e.data.resize(rows * cols);
  e.scale.resize(rows * (cols / B));
  for (uint64_t r = 0; r < rows; ++r)
    for (uint64_t b = 0; b < cols / B; ++b) {
      const float* x = w + r * cols + b * B;
      float amax = 0.0f;
      for (uint32_t i = 0; i < B; ++i) amax = std::max(amax, std::fabs(x[i]));
      const uint8_t k = detail::pow2_scale_code(amax, 448.0f);
      e.scale[r * (cols / B) + b] = k;
      const float s = ue8m0::decode(k);
      for (uint32_t i = 0; i < B; ++i) e.data[r * cols + b * B + i] = e4m3::encode(x[i] / s, /*saturate=*/true);
    }
  return e;
}

std::vector<toy_tensor> toy_v41_inventory(const toy_v41_config& c) {
  const uint32_t d = c.dim, hd = c.head_dim, H = c.heads, hcd = (2 + c.hc) * c.hc;
  const std::vector<uint64_t> eg_rows = toy_v41_engram_rows(c);
  std::vector<toy_tensor> v;
  auto add = [&](std::string n, std::vector<uint32_t> s, toy_role r) { v.push_back({std::move(n), std::move(s), r}); };
  add("embed.weight", {c.vocab, d}, toy_role::matrix);
  for (uint32_t i = 0; i < c.layers; ++i) {
    const std::string p = "layers." + std::to_string(i) + ".";
    const uint32_t ratio = c.compress_ratios[i];
    if (auto it = std::find(c.engram_layers.begin(), c.engram_layers.end(), i); it != c.engram_layers.end()) {
      const uint32_t cols = (c.engram_max_ngram - 1) * c.engram_heads * c.engram_head_dim;
      add(p + "engram.embed.weight", {uint32_t(eg_rows[size_t(it - c.engram_layers.begin())]), c.engram_head_dim},
          toy_role::matrix);
      add(p + "engram.wkv.weight", {(c.hc + 1) * d, cols}, toy_role::matrix);
      add(p + "engram.q_weight", {c.hc, d}, toy_role::matrix);
      add(p + "engram.k_weight", {c.hc, d}, toy_role::matrix);
    }
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
    if (has(c.kv_sources, i)) {
      add(p + "attn.compressor.wkv.weight", {hd, d}, toy_role::matrix);
      if (ratio > 1) add(p + "attn.compressor.wgate.weight", {hd, d}, toy_role::matrix);
      add(p + "attn.compressor.norm.weight", {hd}, toy_role::vector);
      add(p + "attn.indexer.wk.weight", {c.index_head_dim, hd}, toy_role::matrix);
      add(p + "attn.indexer.k_norm.weight", {c.index_head_dim}, toy_role::vector);
    }
    if (has(c.index_sources, i)) {
      add(p + "attn.indexer.wq_b.weight", {c.index_heads * c.index_head_dim, c.q_lora}, toy_role::matrix);
      add(p + "attn.indexer.weights_proj.weight", {c.index_heads, d}, toy_role::matrix);
    }
    for (const char* sub : {"attn", "ffn"}) {
      add(p + "hc_" + sub + "_fn", {hcd, c.hc * d}, toy_role::matrix);
      add(p + "hc_" + sub + "_base", {hcd}, toy_role::vector);
      add(p + "hc_" + sub + "_scale", {3}, toy_role::vector);
    }
    add(p + "ffn.gate.weight", {c.experts, d}, toy_role::router);
    add(p + "ffn.gate.bias", {c.experts}, toy_role::vector);
    add_toy_experts(add, p, c.experts, c.moe_inter, d);
  }
  add("norm.weight", {d}, toy_role::vector);
  add("head.weight", {c.vocab, d}, toy_role::matrix);
  return v;
}

std::vector<float> toy_v41_values(const toy_v41_config& c, const toy_tensor& t, uint64_t seed) {
  toy_v4_config v4;
  v4.experts = c.experts;
  v4.top_k = c.top_k;
  std::vector<float> v = toy_v4_values(v4, t, seed);
  const std::string& n = t.name;
  auto ends = [&](const std::string& e) { return n.size() >= e.size() && n.compare(n.size() - e.size(), e.size(), e) == 0; };
  if (ends("engram.q_weight") || ends("engram.k_weight"))  // gains around 1, like a norm weight
    for (auto& x : v) x = 1.0f + 2.0f * x;
  if (ends("engram.embed.weight")) {
    // On the release's FP8 row grid, so every layout (FP8 rows, f32, bf16) holds the same table exactly.
    const uint64_t cols = t.shape.at(1), rows = v.size() / cols;
    const encoded_matrix e = toy_v41_engram_table_fp8(v.data(), rows, cols);
    const uint32_t B = toy_v41_engram_scale_block;
    for (uint64_t i = 0; i < v.size(); ++i)
      v[i] = e4m3::decode(e.data[i]) * ue8m0::decode(e.scale[(i / cols) * (cols / B) + (i % cols) / B]);
  }
  return v;
}

nlohmann::ordered_json toy_v41_text_config(const toy_v41_config& c) {
  nlohmann::ordered_json j;
  j["model_type"] = "deepseek_v41_text";
  put_toy_attention_dims(j, c, c.layers);
  j["kv_source_layer_ids"] = c.kv_sources;
  j["index_source_layer_ids"] = c.index_sources;
  j["candidate_source_layer_id"] = c.candidate_source;
  j["candidate_topk_blocks"] = c.candidate_topk_blocks;
  j["candidate_block_size"] = c.candidate_block_size;
  put_toy_moe(j, c);
  j["gate_temp"] = c.gate_temp;
  j["norm_topk_prob"] = true;
  put_toy_hc_rope(j, c);
  j["engram_layer_ids"] = c.engram_layers;
  j["engram_vocab_size"] = c.engram_vocab_size;
  j["engram_num_embeddings"] = toy_v41_engram_rows(c);
  j["engram_max_ngram_size"] = c.engram_max_ngram;
  j["engram_pad_token_id"] = c.engram_pad_id;
  j["engram_compressed_vocab_size"] = c.engram_compressed_vocab;
  j["engram_n_heads"] = c.engram_heads;
  j["engram_head_dim"] = c.engram_head_dim;
  j["engram_multipliers"] = c.engram_multipliers;
  j["engram_token_map"] = "mod";
  j["num_nextn_predict_layers"] = 0;
  j["bos_token_id"] = 0;
  j["eos_token_id"] = 1;
  return j;
}

nlohmann::ordered_json toy_v41_cmf_header(const toy_v41_config& c, const std::string& quant) {
  nlohmann::ordered_json arch;
  arch["arch_name"] = "deepseek_v41";
  arch["hidden_size"] = c.dim;
  arch["intermediate_size"] = c.moe_inter;
  arch["num_layers"] = c.layers;
  arch["num_attention_heads"] = c.heads;
  arch["num_kv_heads"] = 1;
  arch["head_dim"] = c.head_dim;
  arch["vocab_size"] = c.vocab;
  arch["layer_types"] = std::vector<std::string>(c.layers, "FullAttention");
  arch["rms_norm_eps"] = c.rms_eps;
  arch["max_position_embeddings"] = 65536;
  arch["rope_theta"] = 10000.0;
  arch["partial_rotary_factor"] = double(c.rope_dim) / double(c.head_dim);
  arch["moe"] = {{"num_experts", c.experts}, {"top_k", c.top_k}, {"moe_intermediate_size", c.moe_inter},
                 {"norm_topk_prob", true}, {"routed_scaling_factor", c.route_scale}};
  nlohmann::ordered_json h;
  h["format"] = "cmf";
  h["version"] = 2;
  h["arch"] = arch;
  h["quant_type"] = "Q4_BLOCK";
  h["provenance"] = {{"tool", "cmfx make-toy"}, {"source_model", "toy-v41 (" + quant + ")"}};
  h["dsv41"] = toy_v41_text_config(c);  // the text config, as the release's text_config states it
  h["tokenizer_config"] = {{"eos_token_ids", {1}}, {"bos_token_id", 0}};
  return h;
}

nlohmann::ordered_json toy_v41_release_config(const toy_v41_config& c) {
  nlohmann::ordered_json j;
  j["architectures"] = {"DeepseekV41ForConditionalGeneration"};
  j["model_type"] = "deepseek_v41";
  j["text_config"] = toy_v41_text_config(c);
  // The toy has no vision weights; the block keeps the release's nesting (vision_config beside text_config).
  j["vision_config"] = {{"model_type", "deepseek_v41_vision"}, {"num_hidden_layers", 0}};
  j["image_token_id"] = 129264;
  j["bos_token_id"] = 0;
  j["eos_token_id"] = 1;
  j["quantization_config"] = {{"quant_method", "fp8"}, {"fmt", "e4m3"}, {"scale_fmt", "ue8m0"},
                              {"weight_block_size", {32, 32}}, {"expert_dtype", "fp4"}};
  return j;
}

}  // namespace cmfx::driver
