#pragma once
// DeepSeek-V4-Flash hyper-parameters (dsv4-architecture.md §1, cmf-format.md §4.4) and the run-time options of
// the CPU model graph. Sources: the CMF header `arch` (+ the toy's `dsv4` object) or the release config.json;
// values the real files pin in code are the named constants below. Per-layer structure (compress ratio,
// indexer, hash routing) is decided later by which tensors exist (dsv4_weights.cpp) and written back here.
#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "cmfx/kernels/act_precision.hpp"
#include "cmfx/ops/rope.hpp"

namespace cmfx::driver {

// Values real V4 files do not carry (cortiq's loader.rs / dsv4_ref.py pin them in code).
inline constexpr uint32_t dsv4_window = 128;            // sliding window W, including the current token
inline constexpr uint32_t dsv4_index_topk = 512;        // indexer top-k on ratio-4 layers
inline constexpr uint32_t dsv4_hc_iters = 20;           // Sinkhorn iterations
inline constexpr double dsv4_hc_eps = 1e-6;             // mHC epsilon
inline constexpr double dsv4_swiglu_limit = 10.0;       // expert SwiGLU clamp
inline constexpr uint32_t dsv4_rope_dim = 64;           // rotated tail of each 512-wide head
inline constexpr double dsv4_rope_theta = 10000.0;      // ratio-0 (sliding-window) layers, no YaRN
inline constexpr double dsv4_compress_rope_theta = 160000.0;  // ratio > 0 layers, with YaRN
inline constexpr double dsv4_yarn_factor = 16.0;
inline constexpr double dsv4_yarn_original = 65536.0;
inline constexpr double dsv4_yarn_beta_fast = 32.0;
inline constexpr double dsv4_yarn_beta_slow = 1.0;
inline constexpr uint32_t dsv4_index_heads = 64;
inline constexpr uint32_t dsv4_index_head_dim = 128;
inline constexpr uint32_t dsv4_o_groups = 8;
inline constexpr uint32_t dsv4_hc_mult = 4;
inline constexpr uint32_t dsv4_kv_fp8_block = 64;       // QAT block of the KV nope dims (§3.6)
inline constexpr uint32_t dsv4_act_fp8_block = 128;     // QAT block of Linear inputs (§3.6)
inline constexpr uint32_t dsv4_fp4_block = 32;          // QAT block of the indexer FP4 simulation
/// Tokens a state can be rolled back by (speculative decoding); the rings keep this many extra positions.
inline constexpr uint32_t dsv4_rollback_tokens = 16;

/// What one layer is (decided by the tensors present).
struct dsv4_layer_kind {
  uint32_t ratio = 0;     // 0 sliding window only, 4 CSA (overlap + indexer), 128 HCA
  bool indexer = false;   // ratio-4 layers
  bool hash = false;      // tid2eid routing (the first num_hash_layers layers)
};

struct dsv4_config {
  uint32_t vocab = 0, dim = 0, layers = 0;
  uint32_t heads = 0, head_dim = 0, rope_dim = dsv4_rope_dim;
  uint32_t q_lora = 0, o_groups = dsv4_o_groups, o_lora = 0;
  uint32_t index_heads = dsv4_index_heads, index_head_dim = dsv4_index_head_dim, index_topk = dsv4_index_topk;
  uint32_t window = dsv4_window;
  uint32_t experts = 0, top_k = 0, moe_inter = 0, hc = dsv4_hc_mult, hc_iters = dsv4_hc_iters;
  double norm_eps = 1e-6, hc_eps = dsv4_hc_eps, route_scale = 1.5, swiglu_limit = dsv4_swiglu_limit;
  double rope_theta = dsv4_rope_theta, compress_rope_theta = dsv4_compress_rope_theta;
  double yarn_factor = dsv4_yarn_factor, yarn_original = dsv4_yarn_original;
  double yarn_beta_fast = dsv4_yarn_beta_fast, yarn_beta_slow = dsv4_yarn_beta_slow;
  bool per_head_q_norm = true;                 // V4 (not V4.1)
  std::vector<uint32_t> compress_ratios;       // as stated by the file (may be empty: then from tensors)
  uint32_t num_hash_layers = 0;                // as stated by the file (informational; tensors decide)
  std::vector<dsv4_layer_kind> kinds;          // filled by the weight binder, one per layer
  uint32_t bos = 0, eos = 1;
};

/// Run-time options. The QAT fake-quant steps of spec §3.6 are OFF by default: the parity gates compare against a
/// float64 reference without them, and they change results only at quantization-step level.
struct dsv4_options {
  unsigned threads = 0;          // 0 = all hardware threads
  bool qat_kv_fp8 = false;       // FP8 (E4M3, block 64, pow2 scale) fake-quant of the KV nope dims (window + compressed)
  bool qat_indexer_fp4 = false;  // Hadamard rotation + FP4 (E2M1, block 32) of the indexer q and keys
  bool qat_act_fp8 = false;      // FP8 block-128 fake-quant of the inputs of the FP8/FP4 Linears (not the W2 input)
  /// Activation precision of the weight matmuls whose format has an integer-dot kernel (q4tp / q2tp / MXFP4;
  /// q8_row on the CPU):
  /// f32 (default) = the strict path, the parity reference; i8 = activations rounded to int8 per 32 values
  /// (faster; error per matmul in docs/FORMATS.md "Kernel tolerances", end to end in docs/ARCHITECTURE.md). Covers
  /// the attention projections, the routed and shared experts and the head; the router gate stays f32.
  act_precision matmul_act = act_precision::f32;
};

/// Hyper-parameters from a CMF header (arch + optional toy `dsv4` object).
dsv4_config dsv4_config_from_cmf(const nlohmann::json& header);
/// Hyper-parameters from a release config.json (flat V4 config).
dsv4_config dsv4_config_from_release(const nlohmann::json& config);

/// The rope of a layer: sliding-window layers (compressed = false) rope_theta without YaRN; ratio > 0 layers
/// compress_rope_theta with YaRN (no seqlen guard). Shared by the CPU and GPU graphs.
rope_config dsv4_rope_config(const dsv4_config& c, bool compressed);

}  // namespace cmfx::driver
