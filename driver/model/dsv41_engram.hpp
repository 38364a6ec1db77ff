#pragma once
// Engram (dsv4-architecture.md §4.4; V41-VEND engram.py, V41-MODEL Engram.forward): the n-gram hash of the
// compressed token ids, the table-row gather and the gated residual add over the hc copies of the stream.
//
// This is the graph's call point for Engram. It is written against the spec so the toy model runs end to end; the
// library component include/cmfx/model/engram.hpp (hashing, FP8 E4M3 + E8M0 row lookup, gating) replaces the
// bodies of these functions once it lands — the interface here is what the graph needs from it.
#include <cstdint>
#include <span>
#include <vector>

#include "dsv41_config.hpp"

namespace cmfx::driver {

/// Hash layout of every Engram layer: primes and row offsets per (order, head), multipliers per shift.
struct dsv41_engram_layout {
  uint32_t orders = 0, heads = 0;                   // orders = max_ngram − 1 (n-gram sizes 2..max_ngram)
  std::vector<std::vector<uint64_t>> primes, offs;  // [engram layer][order·heads + head]
  std::vector<std::vector<int64_t>> mult;           // [engram layer][shift]
  std::vector<uint64_t> rows;                       // table rows each layer needs (Σ primes)
};

/// Primes: per layer, per order, per head the smallest prime above engram_vocab_size − 1 not used before (drawn in
/// (layer, order, head) order); offsets are their running sum within the layer, order-major.
dsv41_engram_layout dsv41_engram_make_layout(const dsv41_config& c);

/// Compressed id of a token (the toy's "mod" rule; the release needs the tokenizer-derived map).
uint32_t dsv41_engram_compress(const dsv41_config& c, uint32_t token);

/// Row ids of one token for Engram layer `e`: hist[s] = compressed id at position t − s (s < max_ngram; the pad id
/// where t < s). rows gets orders·heads entries, order-major.
void dsv41_engram_rows(const dsv41_engram_layout& L, uint32_t e, std::span<const uint64_t> hist,
                       std::span<uint64_t> rows);

/// Gated add: kv = wkv·E ([hc·d] key then [d] value); for each copy c the gate
/// g = σ(copysign(√max(|dot|, 1e−6), dot)), dot = Σ X_c·(q_w[c]·k_w[c])·key_c · rstd(X_c)·rstd(key_c) · d^−½, and
/// X_c += g·value. X [hc·d] in place.
void dsv41_engram_gate(std::span<float> X, std::span<const float> kv, std::span<const float> q_w,
                       std::span<const float> k_w, uint32_t hc, double eps);

}  // namespace cmfx::driver
