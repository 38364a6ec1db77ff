#pragma once
// DeepSeek-V4.1-Flash hyper-parameters (dsv4-architecture.md §1, §4) and the run-time options of the CPU graph.
// Sources: a release config.json (nested: `model_type` deepseek_v41, the text model under `text_config`) or a CMF
// header (`arch.arch_name` deepseek_v41 plus a `dsv41` object holding the text_config keys). The per-layer CSA2 plan
// (sliding window / KV source / re-index / reuse) is derived from the config's lists, never from fixed layer numbers:
// compress_ratios, kv_source_layer_ids, index_source_layer_ids, candidate_source_layer_id.
#include <array>
#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "cmfx/kernels/act_precision.hpp"

namespace cmfx::driver {

// Values of the V4.1-Flash release (dsv4-architecture.md §1); used where a config omits them.
inline constexpr uint32_t dsv41_window = 128;
inline constexpr uint32_t dsv41_index_topk = 512;
inline constexpr uint32_t dsv41_candidate_topk_blocks = 2048;
inline constexpr uint32_t dsv41_candidate_block_size = 8;
inline constexpr double dsv41_norm_eps = 1e-20;       // RMSNorm, mHC mixes and Engram (V4.1)
inline constexpr double dsv41_route_norm_eps = 1e-20; // added to the routing normaliser (V4.1 Gate)
inline constexpr uint32_t dsv41_act_block = 32;       // FP8 fake-quant block of Linear inputs and of the window KV
inline constexpr uint32_t dsv41_kv_fp4_block = 16;    // compressed KV: FP4 E2M1 with an E4M3 scale per 16
inline constexpr uint32_t dsv41_index_fp4_block = 32; // index q / keys: FP4 E2M1 with a UE8M0 scale per 32
/// Tokens a state can be rolled back by (speculative decoding).
inline constexpr uint32_t dsv41_rollback_tokens = 16;
/// Engram hash multipliers of the release (layers 1 and 14, shifts 0..3): numpy default_rng(10007·layer)
/// .integers(0, (INT64_MAX div 99092) div 2, 4)·2+1, recomputed in dsv4-architecture.md §4.4 [DER].
inline constexpr std::array<int64_t, 4> dsv41_engram_mult_l1 = {76632096046245, 4839876093313, 35959672319349,
                                                                 73987337458391};
inline constexpr std::array<int64_t, 4> dsv41_engram_mult_l14 = {67716810739261, 51510806800915, 30921347202721,
                                                                  82619226485591};

/// What one layer's attention does (dsv4-architecture.md §4.2 "Sharing").
enum class dsv41_mode : uint8_t {
  swa,      // ratio 0: sliding window only
  full,     // KV source: own compressor, index keys and indexer (publishes compressed KV, index keys, top-k)
  reindex,  // index source only: own indexer q / head weights over the latest published index keys
  reuse,    // reads the latest compressed KV and the latest top-k
};
const char* dsv41_mode_name(dsv41_mode m) noexcept;

struct dsv41_layer_plan {
  dsv41_mode mode = dsv41_mode::swa;
  uint32_t ratio = 0;
  int kv_from = -1;              // the KV source whose compressed entries this layer reads (ratio > 0)
  int topk_from = -1;            // the index source whose top-k this layer uses (ratio > 0)
  int keys_from = -1;            // index sources: the KV source whose index keys it scores (static rule)
  bool candidate_source = false; // builds the candidate pool
  bool uses_candidates = false;  // index source after the candidate source: scores outside the pool are −inf
  int engram = -1;               // index into the Engram layer list, or −1
};

struct dsv41_config {
  uint32_t vocab = 0, dim = 0, layers = 0;
  uint32_t heads = 0, head_dim = 0, rope_dim = 64;
  uint32_t q_lora = 0, o_groups = 8, o_lora = 0;
  uint32_t index_heads = 0, index_head_dim = 0, index_topk = dsv41_index_topk;
  uint32_t window = dsv41_window;
  uint32_t experts = 0, top_k = 0, moe_inter = 0, hc = 4, hc_iters = 20;
  double norm_eps = dsv41_norm_eps, hc_eps = 1e-6, route_scale = 1.5, swiglu_limit = 10.0, gate_temp = 1.0;
  double rope_theta = 10000.0, compress_rope_theta = 160000.0;
  double yarn_factor = 16.0, yarn_original = 65536.0, yarn_beta_fast = 32.0, yarn_beta_slow = 1.0;
  std::vector<uint32_t> compress_ratios;   // at least `layers` entries (the release lists the DSpark stages too)
  std::vector<uint32_t> kv_sources, index_sources;
  int candidate_source = -1;
  uint32_t candidate_topk_blocks = dsv41_candidate_topk_blocks, candidate_block_size = dsv41_candidate_block_size;
  // Engram (dsv4-architecture.md §4.4).
  std::vector<uint32_t> engram_layers;
  uint64_t engram_vocab_size = 0;          // hash space: primes are drawn above engram_vocab_size − 1
  uint32_t engram_max_ngram = 4, engram_heads = 8, engram_head_dim = 256, engram_pad_id = 2;
  uint64_t engram_compressed_vocab = 0;
  std::vector<uint64_t> engram_num_embeddings;           // table rows per Engram layer (checked against the primes)
  std::vector<std::vector<int64_t>> engram_multipliers;  // [engram layer][max_ngram]
  std::string engram_token_map;            // "" / "tokenizer" = built from the tokenizer at load; "mod" = toy rule
  std::vector<dsv41_layer_plan> plan;      // one per layer (dsv41_make_plan)
  uint32_t bos = 0, eos = 1;
};

/// Run-time options. Defaults follow the official V4.1 forward where it is defined by the cache formats.
struct dsv41_options {
  unsigned threads = 0;        // 0 = all hardware threads
  /// Quantisation that IS the V4.1 cache format and indexer (§4.2, §8): window KV FP8 E4M3 per 32 (whole vector),
  /// compressed KV FP4 E2M1 with an E4M3 scale per 16, index keys and index q FP4 E2M1 with a UE8M0 scale per 32.
  bool qat_kv = true;
  /// With qat_kv: keep the compressed KV and index keys as packed FP4 rows (the cache format, a few bits per value;
  /// default). Off: f32 rows after the same quantisation (bit-identical results; kept as a test option). Without
  /// qat_kv the rows are unquantised f32 and this option has no effect.
  bool packed_kv = true;
  /// FP8 E4M3 block-32 fake-quant of the inputs of the FP8 / FP4 Linears (§3.6 with B = 32). Off by default as in V4.
  bool qat_act = false;
  /// The official code's shared-runtime behaviour (§4.2 "Known reference quirk"): on a decode step where a ratio > 1
  /// KV source closes no group it does not republish its index keys, and it (and every later index layer until a
  /// source republishes) scores against the last publisher's keys — in the release, layer 20's. On = official.
  bool stale_index_k = true;
  /// Activation precision of the weight matmuls whose format has an integer-dot kernel (q4tp / q2tp / MXFP4;
  /// q8_row on the CPU):
  /// f32 (default) = the strict path, the parity reference; i8 = activations rounded to int8 per 32 values
  /// (faster; error per matmul in docs/FORMATS.md "Kernel tolerances", end to end in docs/ARCHITECTURE.md). Covers
  /// the attention projections, the routed and shared experts and the head; the router gate stays f32.
  act_precision matmul_act = act_precision::f32;
};

/// Derives the per-layer plan from the lists and checks them; throws usage_error naming the problem.
void dsv41_make_plan(dsv41_config& c);
/// From a release config.json (nested text_config, or a flat text config with model_type deepseek_v41[_text]).
dsv41_config dsv41_config_from_release(const nlohmann::json& config);
/// From a CMF header whose arch_name is deepseek_v41 (the text config under "dsv41").
dsv41_config dsv41_config_from_cmf(const nlohmann::json& header);
/// True when a release config.json / CMF header describes V4.1.
bool dsv41_is_release_config(const nlohmann::json& config);
bool dsv41_is_cmf_header(const nlohmann::json& header);

}  // namespace cmfx::driver
