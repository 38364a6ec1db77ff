#pragma once
// Engram in the V4.1 graph (dsv4-architecture.md §4.4): the graph's side of include/cmfx/model/engram.hpp — the
// library's config, hash layout (primes, offsets, multipliers), validated token map, row ids, FP8 row gather and
// gated add, bound to a V4.1 text config and the per-sequence compressed-id history the state keeps.
#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "cmfx/model/engram.hpp"
#include "dsv41_config.hpp"

namespace cmfx::driver {

/// The library's Engram config from a V4.1 text config (hash space, orders, heads, widths, multipliers,
/// num_embeddings when the config states them). eps = the model's norm_eps; the table scale block is 32.
engram_config dsv41_engram_config(const dsv41_config& c);

/// Whether the config's Engram needs the tokenizer-derived map: Engram layers and `engram_token_map` absent ("", the
/// release) or "tokenizer". "mod" is the toy's rule; any other value is refused with a usage_error.
bool dsv41_engram_needs_tokenizer(const dsv41_config& c);

/// The release's compressed-id map (spec §4.4), built at load from the model's own tokenizer — a CMF file's vocab
/// section or the tokenizer.json beside a release (driver/model_tokenizer.hpp) — by include/cmfx/text/engram_map.hpp.
/// The tokenizer must hold exactly the config's vocab ids. Throws usage_error saying what is missing (no tokenizer,
/// wrong size). Not yet validated against the config's compressed size: dsv41_engram_token_map does that.
std::vector<int32_t> dsv41_engram_tokenizer_map(const std::string& model_path, const dsv41_config& c);

/// The compressed-id map the config names, validated by engram_token_map (vocab entries, every compressed id used,
/// first-appearance order, engram_compressed_vocab_size ids). "mod": id mod engram_compressed_vocab_size (the toy's
/// stand-in); otherwise `built`, the map dsv41_engram_tokenizer_map made at load (empty = refused: no tokenizer).
engram_token_map dsv41_engram_token_map(const dsv41_config& c, const engram_config& ec, std::span<const int32_t> built);

/// Everything the forward pass needs for Engram, built once per model.
struct dsv41_engram {
  engram_config cfg;
  engram_layout layout;
  engram_token_map map;
  std::vector<std::vector<float>> qk;  // [engram layer] q_weight ⊙ k_weight, [hc·dim]
};

/// Row ids (order-major, cfg.cols() of them) of the token at position t for Engram layer e, from the compressed
/// ids of its sequence (cids[0..t]); shifts before the sequence start take the pad token's compressed id
/// (engram_ngram_state's blocked rule).
void dsv41_engram_row_ids(const dsv41_engram& eg, size_t e, std::span<const uint32_t> cids, uint64_t t, int64_t* out);

struct dsv41_layer_w;  // dsv41_weights.hpp

/// The decoded table rows E [cols · head_dim] of the token at position t for Engram layer e (whose weights are L):
/// row ids from the id history, then the release's FP8 rows (engram_gather) or a CMF table's rows through its
/// format's decoder followed by the official bf16 cast. rows: scratch of cfg.cols() ids. Throws std::out_of_range
/// for a row outside a CMF table.
void dsv41_engram_token_rows(const dsv41_engram& eg, size_t e, const dsv41_layer_w& L, std::span<const uint32_t> cids,
                             uint64_t t, std::span<int64_t> rows, float* E);

}  // namespace cmfx::driver
