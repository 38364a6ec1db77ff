#pragma once
// Engram in the V4.1 graph (dsv4-architecture.md §4.4): the graph's side of include/cmfx/model/engram.hpp — the
// library's config, hash layout (primes, offsets, multipliers), validated token map, row ids, FP8 row gather and
// gated add, bound to a V4.1 text config and the per-sequence compressed-id history the state keeps.
#include <cstdint>
#include <span>
#include <vector>

#include "cmfx/model/engram.hpp"
#include "dsv41_config.hpp"

namespace cmfx::driver {

/// The library's Engram config from a V4.1 text config (hash space, orders, heads, widths, multipliers,
/// num_embeddings when the config states them). eps = the model's norm_eps; the table scale block is 32.
engram_config dsv41_engram_config(const dsv41_config& c);

/// The compressed-id map the config names, validated by engram_token_map (vocab entries, every compressed id used,
/// first-appearance order). "mod": id mod engram_compressed_vocab_size — the toy's stand-in for the release's
/// tokenizer-derived map; any other value (the release: none stated) is refused with a usage_error.
engram_token_map dsv41_engram_token_map(const dsv41_config& c, const engram_config& ec);

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

}  // namespace cmfx::driver
