#pragma once
// Every DeepSeek-V4.1 text-model tensor bound by its official name (dsv4-architecture.md §2 "V4.1 deltas"), from a
// CMF file or a release-layout directory (through dsv4_source, shared with V4). Which layer carries a compressor,
// index keys, an indexer or an Engram follows the config's plan (dsv41_config.hpp); a missing or mis-shaped tensor
// is an error naming it, and a tensor the plan does not expect (e.g. a compressor on a reuse layer) is refused.
#include <memory>
#include <string>
#include <vector>

#include "dsv41_config.hpp"
#include "dsv4_weights.hpp"

namespace cmfx::driver {

struct dsv41_layer_w {
  std::vector<float> attn_norm, ffn_norm, q_norm, kv_norm, attn_sink;
  dsv4_matrix wq_a, wq_b, wkv, wo_a, wo_b;
  std::vector<float> hc_attn_fn, hc_attn_base, hc_attn_scale, hc_ffn_fn, hc_ffn_base, hc_ffn_scale;
  // KV sources: the compressor (ratio 2: wkv + wgate, fp32 compute; ratio 1: wkv only) and the index-key projection.
  dsv4_matrix comp_wkv, comp_wgate;
  std::vector<float> comp_norm;
  dsv4_matrix ix_wk;                 // [index_head_dim, head_dim]
  std::vector<float> ix_k_norm;
  // Index sources.
  dsv4_matrix ix_wq_b, ix_weights_proj;
  // Engram layers.
  dsv4_matrix eg_embed;              // [table rows, engram_head_dim] in a weight format (CMF: f32 / bf16 / q4tp …)
  matrix_view eg_table_fp8;          // or the release's FP8 E4M3 table with UE8M0 per 32 of a row (data set)
  dsv4_matrix eg_wkv;                // [(hc+1)·dim, orders·heads·engram_head_dim]
  std::vector<float> eg_q_weight, eg_k_weight;  // [hc, dim]
  // MoE.
  dsv4_matrix gate;
  std::vector<float> gate_bias;
  std::vector<expert_view> experts;
  expert_view shared;
};

struct dsv41_weights {
  dsv41_config cfg;
  std::string source;  // "cmf" or "release"
  dsv4_matrix embed, head;
  std::vector<float> norm;
  std::vector<dsv41_layer_w> layers;
  /// token id → Engram compressed id, built at load from the model's tokenizer (spec §4.4); empty for "mod"
  std::vector<int32_t> engram_map;
  std::shared_ptr<const void> keep_alive;
};

/// Opens a V4.1 model (CMF file or release directory). Throws usage_error for a V4 file.
dsv41_weights dsv41_load(const std::string& path);
/// True when `path` holds a V4.1 model (by its config), without binding tensors.
bool dsv41_is_model(const std::string& path);

}  // namespace cmfx::driver
