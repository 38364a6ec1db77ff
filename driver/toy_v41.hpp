#pragma once
// The deterministic V4.1-Flash toy: the release's tensor names and structure at tiny dimensions. Its 12 layers keep
// every kind the 40-layer release has, in the same order and stated the same way (compress_ratios,
// kv_source_layer_ids, index_source_layer_ids, candidate_source_layer_id, engram_layer_ids):
//   L0–1 sliding window (Engram on L1) · L2–5 ratio 2: sources L2, L4 (Engram on L4), reuse L3, L5 ·
//   L6–11 ratio 1: source + candidate pool L6, re-index L8, L10, reuse L7, L9, L11 · 3 trailing DSpark ratios (0).
// Weights are a pure function of (seed, tensor name), so both layouts hold the same model.
#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "cmfx/formats/format.hpp"
#include "toy_v4.hpp"

namespace cmfx::driver {

/// Toy hyper-parameters (V4.1-Flash values in comments; dsv4-architecture.md §1).
struct toy_v41_config {
  uint32_t vocab = 129280;          // 129280
  uint32_t dim = 64;                // 5120
  std::vector<uint32_t> compress_ratios = {0, 0, 2, 2, 2, 2, 1, 1, 1, 1, 1, 1, 0, 0, 0};  // [0,0]+[2]*18+[1]*20+[0]*3
  uint32_t layers = 12;             // 40
  std::vector<uint32_t> kv_sources = {2, 4, 6};            // 2, 8, 14, 20
  std::vector<uint32_t> index_sources = {2, 4, 6, 8, 10};  // 2, 8, 14, 20, 24, 28, 32, 36
  int candidate_source = 6;         // 20
  uint32_t candidate_topk_blocks = 4, candidate_block_size = 4;  // 2048 × 8
  uint32_t heads = 4;               // 64
  uint32_t head_dim = 64;           // 512
  uint32_t rope_dim = 16;           // 64
  uint32_t q_lora = 32;             // 1280
  uint32_t o_groups = 2;            // 8
  uint32_t o_lora = 32;             // 1024
  uint32_t index_heads = 4;         // 32
  uint32_t index_head_dim = 32;     // 128
  uint32_t index_topk = 8;          // 512
  uint32_t window = 16;             // 128
  uint32_t experts = 8;             // 384
  uint32_t top_k = 2;               // 6
  uint32_t moe_inter = 32;          // 2304
  uint32_t hc = 4;                  // 4
  double rms_eps = 1e-20;           // 1e-20
  double route_scale = 1.5, swiglu_limit = 10.0, gate_temp = 1.0;
  // Engram (release: layers 1, 14; hash space 16,000,000; 8 heads × 256; compressed vocab 99092).
  std::vector<uint32_t> engram_layers = {1, 4};
  uint64_t engram_vocab_size = 40;
  uint32_t engram_heads = 2, engram_head_dim = 32, engram_max_ngram = 4, engram_pad_id = 2;
  uint64_t engram_compressed_vocab = 997;
  /// Odd multipliers below INT64_MAX / 997 / 2, one row per Engram layer (the release's come from numpy's RNG).
  std::vector<std::vector<int64_t>> engram_multipliers = {
      {1234567890123457, 987654321098765, 555555555555557, 3141592653589793},
      {2718281828459045, 1618033988749895, 1414213562373095, 1732050807568877}};
};

std::vector<toy_tensor> toy_v41_inventory(const toy_v41_config& c);
std::vector<float> toy_v41_values(const toy_v41_config& c, const toy_tensor& t, uint64_t seed);
/// The text config (HF text_config keys), shared by both layouts; the toy adds engram_multipliers and
/// engram_token_map "mod" (compressed id = token id mod engram_compressed_vocab_size).
nlohmann::ordered_json toy_v41_text_config(const toy_v41_config& c);
nlohmann::ordered_json toy_v41_cmf_header(const toy_v41_config& c, const std::string& quant);
nlohmann::ordered_json toy_v41_release_config(const toy_v41_config& c);
/// Table rows of each Engram layer (Σ of its hash primes).
std::vector<uint64_t> toy_v41_engram_rows(const toy_v41_config& c);
/// The Engram table's release format: FP8 E4M3 with one UE8M0 scale per this many values of a row
/// (cmfx::engram_config::scale_block).
inline constexpr uint32_t toy_v41_engram_scale_block = 32;
/// Encodes a table [rows, cols] in that format: per block the smallest power-of-two scale with amax/scale ≤ 448,
/// E4M3 round-to-nearest-even (data [rows, cols] bytes, scale [rows, cols/32] UE8M0 codes).
encoded_matrix toy_v41_engram_table_fp8(const float* w, uint64_t rows, uint64_t cols);

}  // namespace cmfx::driver
