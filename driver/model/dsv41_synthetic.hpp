#pragma once
// A random DeepSeek-V4.1 model built in host memory, shaped exactly like a loaded one: the tensors dsv41_weights.cpp
// binds, at the shapes, formats and qat flags it binds them, on exactly the layers the config's plan gives them
// (compressor + index keys on KV sources, indexer on index sources, Engram on the Engram layers), with cfg.plan
// filled by dsv41_make_plan, so dsv41_model runs on it as on dsv41_load's result.
//
// Host memory stays small as in dsv4_synthetic.hpp: the big matrices are per-role *seeds* (one encoded random
// matrix per distinct role, format, shape and variant) that every layer's / expert's matrix_view points at; the
// small tensors (norms, sinks, hc_* fn/base/scale, the f32 router gate and its bias, Engram q/k weights) are drawn
// per layer, so routing and Engram gates differ between layers. Every value is a pure function of (seed, tensor
// name, row), whatever the thread count.
//
// Magnitudes follow dsv4_synthetic / the toy (toy_v4_values): matrices N(0, 1/cols); RMSNorm gains (attn, ffn, q,
// kv, compressor, index-key, final) 1 ± 0.1; attn_sink N(0, 0.5²); hc_* scales 0.5 ± 0.05; hc_* bases N(0, 0.1²);
// gate bias N(0, 0.02²); hc_*_fn and the router N(0, 1/cols); Engram q_weight / k_weight gains 1 ± 0.1; the
// Engram table N(0, 1/head_dim) stored as the release stores it (eg_table_fp8: FP8 E4M3 with a UE8M0 scale per 32
// values of a row, toy_v41_engram_table_fp8's encoding).
//
// Engram reduction (the one place the synthetic model is not at release size): the release's hash space
// (engram_vocab_size 16,000,000) gives ≈384M table rows per Engram layer, ~100 GB each with scales, which cannot be
// generated or held. The "v41-flash" preset uses engram_vocab_size 65536 instead (table rows = the sum of the 24
// primes above 65535 of each layer, ≈1.58M rows × 256, ≈0.4 GB; engram_num_embeddings states them). The hash,
// the token map ("mod" rule: compressed id = token id mod 99092, as the toy; no tokenizer exists here) and the
// per-token work are the release's: every token gathers 24 rows of 256 values per Engram layer (8 heads × 3
// orders), and that cost does not depend on the table size (only the rows' cache / TLB locality does). With
// variants = 1 both Engram layers view one shared table (the shorter layer reads a prefix of the longer one; rows
// are a pure function of the row index, so a prefix is exactly the shorter table).
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

#include "cmfx/formats/format.hpp"
#include "dsv41_weights.hpp"

namespace cmfx::driver {

struct dsv41_synth_options {
  /// "v41-flash": the real V4.1-Flash text dimensions (dsv4-architecture.md §1 and §2 "V4.1 deltas": 40 layers,
  /// vocab 129280, dim 5120, 384 experts top-6, Engram on L1 / L14, ...). "tiny": the V4.1 toy's dimensions
  /// (toy_v41_config defaults) with vocab 1024, for tests.
  std::string preset = "v41-flash";
  format experts = format::q2tp;      // routed experts w1/w3 (and w2 unless expert_down is set)
  /// Attention, compressor and indexer projections (wq_a, wq_b, wkv, wo_a, wo_b, compressor wkv / wgate, indexer
  /// wk / wq_b / weights_proj), shared expert, head, Engram wkv. (The release stores most of these FP8 per 32×32,
  /// some BF16; one format for all is a bench simplification.) The router gate is always f32.
  format dense = format::fp8_b128;
  format embed = format::bf16;
  uint64_t seed = 1;
  /// 0: the preset's count (v41-flash 40, tiny 12). Fewer keep the head of the layer pattern (sources, candidate
  /// source and Engram layers past the end are dropped); more continue with ratio-1 reuse layers.
  uint32_t layers = 0;
  std::optional<format> expert_down;  // routed experts' w2 (nullopt: `experts`)
  bool shared_routed = false;         // the shared expert in the routed experts' formats (dsv4_synth_options')
  /// 0: the preset's vocabulary. A smaller one makes quick v41-flash-shaped runs; the Engram compressed vocabulary
  /// is then min(preset's, vocab) (the "mod" map needs every compressed id to be some token's).
  uint32_t vocab = 0;
  /// Distinct random matrices per (role, format, shape): matrix k of a role (k = layer, Engram layer index, or
  /// layer·experts + expert) uses variant k mod `variants`. 0: the preset's default (v41-flash 1, i.e. one seed per
  /// role; tiny: every matrix its own). Host memory grows with it; values and speed of the forward do not.
  uint32_t variants = 0;
  /// Engram hash space (primes are drawn above engram_vocab_size − 1). 0: the preset's (v41-flash 65536 — the
  /// release's is 16,000,000, see the header comment; tiny 40, the toy's).
  uint64_t engram_vocab_size = 0;
  unsigned threads = 0;               // encoding threads (0 = hardware concurrency); results do not depend on it
};

/// The config (plan filled by dsv41_make_plan, engram_num_embeddings = the hash layout's table rows) and the
/// weights. Throws usage_error for an unknown preset, an invalid format value or a format that cannot hold a
/// tensor's shape (naming them).
dsv41_weights dsv41_synthetic(const dsv41_synth_options& o);

/// The config alone (plan filled), without generating anything.
dsv41_config dsv41_synth_config(const dsv41_synth_options& o);

/// "v41-flash" / "tiny" (returned unchanged), else usage_error naming the value and the known presets.
std::string dsv41_synth_preset(std::string_view name);

}  // namespace cmfx::driver
