#pragma once
/// @file engram.hpp
/// @brief DeepSeek-V4.1 Engram (spec §4.4): hashed n-gram table lookups gated into the 4-copy residual stream on
///        layers 1 and 14, before the block.
///
/// Path of one token t (every step is a function below):
///   1. compressed id   c_t = map[token_t] (129280 → 99092 ids; the map is an input: the GGUF ships it, the official
///                      release derives it from tokenizer.json: cmfx/text/engram_map.hpp).
///                      Image-span tokens are DEAD.
///   2. n-gram state    shifts s = 0..3 read c_{t−s}; once a shift is before the sequence start or DEAD, it and
///                      every larger shift take pad = map[pad_token] ("blocked" rule of engram.py NgramHashState).
///   3. row ids         r = c_0·m_0; for s = 1..3: r ^= c_s·m_s; row[order s+1][h] = r mod prime[L][s−1][h] + off
///                      → 24 int64 row ids per layer, ORDER-major (order 2 heads 0..7 | order 3 | order 4).
///                      Products stay < 2^63 (multiplier bound), XOR of non-negatives stays non-negative: exact.
///   4. table rows      FP8 E4M3 [rows, 256] × UE8M0 per 32 values, read in place (no dequantized copy),
///                      cast to bf16 → E [24·256], order-major.
///   5. wkv             kv = wkv·E (caller's projection) → key [hc·d], value [d].
///   6. gate + add      per copy c: rstd = rsqrt(mean(X_c²)+eps)·rsqrt(mean(key_c²)+eps);
///                      dot = Σ X_c·(q_w[c]·k_w[c])·key_c · rstd · d^-½;
///                      g = σ(copysign(sqrt(max(|dot|, 1e-6)), dot)) (0 for image-span tokens); X_c += g·value.
/// Sources: official `inference/engram.py` + `model.py` Engram.forward as quoted by the spec (§4.4) and by public
/// transcriptions (P-J-GROUP-INC-LTD/Vibe100:ref/ds41/engram.py; xLLM/NeMo ports of engram.py).
///
/// Primes: for each layer, order, head (in that order) the smallest prime > engram_vocab − 1 not handed out before
/// (engram.py find_next_prime, restarting at engram_vocab − 1 for every order and skipping used primes, which is
/// the same sequence). Multipliers: numpy default_rng(10007·layer_id).integers(0, bound, max_ngram)·2 + 1 with
/// bound = (INT64_MAX div compressed_vocab) div 2 — a PCG64 stream, so they are configuration (the GGUF stores
/// them); the defaults are the V4.1-Flash values, checked against numpy 1.24.2 `default_rng`.
#include <algorithm>
#include <array>
#include <cmath>
#include <cstdint>
#include <functional>
#include <limits>
#include <span>
#include <stdexcept>
#include <string>
#include <vector>

#include "cmfx/formats/exmy.hpp"
#include "cmfx/formats/format.hpp"

namespace cmfx {

/// Compressed-id history markers (negative, so they can never be a compressed id).
inline constexpr int32_t engram_dead_id = -1;   ///< an image-span token: blocks the look-back
inline constexpr int32_t engram_unset_id = -2;  ///< before the sequence start: blocks the look-back

/// Engram configuration; defaults are DeepSeek-V4.1-Flash (spec §1, §4.4).
struct engram_config {
  std::vector<uint32_t> layer_ids{1, 14};  ///< model layers that carry an Engram module
  uint32_t max_ngram = 4;                  ///< n-gram orders 2..max_ngram (= shifts 0..max_ngram−1)
  uint32_t n_heads = 8;                    ///< hash heads per order
  uint32_t head_dim = 256;                 ///< values per table row
  uint32_t scale_block = 32;               ///< values per UE8M0 scale in a table row
  uint32_t vocab = 129280;                 ///< token ids
  uint32_t compressed_vocab = 99092;       ///< compressed ids (the multiplier bound derives from it)
  uint32_t pad_token = 2;                  ///< token whose compressed id fills blocked shifts
  uint64_t engram_vocab = 16000000;        ///< primes are searched from engram_vocab − 1 upward
  /// Table rows per layer (config `engram_num_embeddings`); must equal the layer's prime sum. Empty = not checked.
  std::vector<uint64_t> num_embeddings{384006168, 384016682};
  /// [layer][shift] odd hash multipliers (config / GGUF `multipliers`); V4.1-Flash values for layers 1 and 14.
  std::vector<std::vector<int64_t>> multipliers{
      {76632096046245, 4839876093313, 35959672319349, 73987337458391},
      {67716810739261, 51510806800915, 30921347202721, 82619226485591}};
  uint32_t hidden = 5120;     ///< d: width of one residual copy
  uint32_t hc = 4;            ///< residual copies
  float eps = 1e-20f;         ///< rms eps of the gate (norm_eps)
  float gate_clamp = 1e-6f;   ///< |dot| floor before the signed sqrt (clamp_value)

  uint32_t orders() const noexcept { return max_ngram - 1; }
  uint32_t cols() const noexcept { return orders() * n_heads; }              ///< row ids per layer per token (24)
  uint32_t embed_dim() const noexcept { return cols() * head_dim; }          ///< E width (6144)
  uint32_t kv_dim() const noexcept { return (hc + 1) * hidden; }             ///< wkv output width (key | value)
};

/// Exact primality for 64-bit n (trial division by 6k ± 1; engram primes are ~1.6e7, a few hundred divisions).
inline bool engram_is_prime(uint64_t n) noexcept {
  if (n < 2) return false;
  if (n % 2 == 0) return n == 2;
  if (n % 3 == 0) return n == 3;
  for (uint64_t i = 5; i <= n / i; i += 6)
    if (n % i == 0 || n % (i + 2) == 0) return false;
  return true;
}

/// Largest multiplier m with m·(compressed_vocab − 1) ≤ INT64_MAX (numpy's draw stays below (INT64_MAX div cv)).
inline int64_t engram_multiplier_limit(uint32_t compressed_vocab) noexcept {
  return std::numeric_limits<int64_t>::max() / int64_t(std::max<uint32_t>(compressed_vocab - 1, 1));
}

/// Hash parameters of one Engram layer.
struct engram_layer_hash {
  uint32_t layer_id = 0;
  std::vector<int64_t> mult;    ///< [max_ngram] multipliers of shifts 0..max_ngram−1
  std::vector<int64_t> prime;   ///< [cols] bucket sizes, index (order−2)·n_heads + head
  std::vector<int64_t> offset;  ///< [cols] first row of each bucket (exclusive prefix sum of prime)
  uint64_t rows = 0;            ///< Σ prime = the layer's table rows
};

/// Primes, offsets and multipliers of every Engram layer, validated against the config.
class engram_layout {
 public:
  engram_layout() = default;
  explicit engram_layout(const engram_config& c) : cfg_(c) {
    if (c.max_ngram < 2) throw std::invalid_argument("engram: max_ngram must be >= 2");
    if (c.n_heads == 0 || c.head_dim == 0 || c.scale_block == 0 || c.head_dim % c.scale_block != 0)
      throw std::invalid_argument("engram: n_heads, head_dim > 0 and scale_block dividing head_dim required");
    if (c.compressed_vocab == 0 || c.compressed_vocab > c.vocab)
      throw std::invalid_argument("engram: compressed_vocab must be in [1, vocab]");
    if (c.pad_token >= c.vocab) throw std::invalid_argument("engram: pad_token out of the vocabulary");
    if (c.engram_vocab < 1) throw std::invalid_argument("engram: engram_vocab must be >= 1");
    if (c.multipliers.size() != c.layer_ids.size())
      throw std::invalid_argument("engram: " + std::to_string(c.multipliers.size()) + " multiplier rows for " +
                                  std::to_string(c.layer_ids.size()) + " layers");
    if (!c.num_embeddings.empty() && c.num_embeddings.size() != c.layer_ids.size())
      throw std::invalid_argument("engram: num_embeddings has " + std::to_string(c.num_embeddings.size()) +
                                  " entries for " + std::to_string(c.layer_ids.size()) + " layers");
    const int64_t mlim = engram_multiplier_limit(c.compressed_vocab);
    uint64_t cand = c.engram_vocab - 1;  // the sequence of unused primes above engram_vocab − 1, in order
    layers_.resize(c.layer_ids.size());
    for (size_t l = 0; l < layers_.size(); ++l) {
      engram_layer_hash& L = layers_[l];
      L.layer_id = c.layer_ids[l];
      if (c.multipliers[l].size() != c.max_ngram)
        throw std::invalid_argument("engram: layer " + std::to_string(L.layer_id) + " has " +
                                    std::to_string(c.multipliers[l].size()) + " multipliers, want " +
                                    std::to_string(c.max_ngram));
      for (const int64_t m : c.multipliers[l])
        if (m < 1 || m > mlim)
          throw std::invalid_argument("engram: layer " + std::to_string(L.layer_id) + " multiplier " +
                                      std::to_string(m) + " outside [1, " + std::to_string(mlim) +
                                      "] (int64 products would overflow)");
      L.mult = c.multipliers[l];
      L.prime.resize(c.cols());
      L.offset.resize(c.cols());
      uint64_t off = 0;
      for (uint32_t i = 0; i < c.cols(); ++i) {
        do ++cand;
        while (!engram_is_prime(cand));
        L.prime[i] = int64_t(cand);
        L.offset[i] = int64_t(off);
        off += cand;
      }
      L.rows = off;
      if (!c.num_embeddings.empty() && c.num_embeddings[l] != L.rows)
        throw std::invalid_argument("engram: layer " + std::to_string(L.layer_id) + " primes sum to " +
                                    std::to_string(L.rows) + " rows but num_embeddings says " +
                                    std::to_string(c.num_embeddings[l]));
    }
  }

  const engram_config& config() const noexcept { return cfg_; }
  size_t layer_count() const noexcept { return layers_.size(); }
  const engram_layer_hash& layer(size_t i) const { return layers_.at(i); }
  /// Index of a model layer id among the Engram layers; throws if the layer has no Engram.
  size_t index_of(uint32_t layer_id) const {
    for (size_t i = 0; i < layers_.size(); ++i)
      if (layers_[i].layer_id == layer_id) return i;
    throw std::out_of_range("engram: layer " + std::to_string(layer_id) + " has no Engram module");
  }

 private:
  engram_config cfg_;
  std::vector<engram_layer_hash> layers_;
};

/// Token id → compressed id, validated: vocab entries, every value in [0, compressed_vocab), every compressed id
/// used, ids assigned in first-appearance order (map[i] ≤ max(map[0..i−1]) + 1).
class engram_token_map {
 public:
  engram_token_map() = default;
  engram_token_map(std::vector<int32_t> map, const engram_config& c) : map_(std::move(map)) {
    if (map_.size() != c.vocab)
      throw std::invalid_argument("engram token map: " + std::to_string(map_.size()) + " entries, want vocab " +
                                  std::to_string(c.vocab));
    int64_t next = 0;
    for (size_t i = 0; i < map_.size(); ++i) {
      const int32_t v = map_[i];
      if (v < 0 || v > next)
        throw std::invalid_argument("engram token map: entry " + std::to_string(i) + " = " + std::to_string(v) +
                                    (v < 0 ? " is negative" : " skips compressed ids (first-appearance order)"));
      if (v == next) ++next;
    }
    if (next != int64_t(c.compressed_vocab))
      throw std::invalid_argument("engram token map: " + std::to_string(next) + " compressed ids, config says " +
                                  std::to_string(c.compressed_vocab) + " (the multipliers derive from it)");
    pad_ = map_[c.pad_token];
  }
  /// Compressed id of a token; throws on an id outside the vocabulary.
  int32_t operator()(uint32_t token) const {
    if (token >= map_.size())
      throw std::out_of_range("engram token map: token id " + std::to_string(token) + " >= vocab " +
                              std::to_string(map_.size()));
    return map_[token];
  }
  int32_t pad() const noexcept { return pad_; }
  size_t size() const noexcept { return map_.size(); }

 private:
  std::vector<int32_t> map_;
  int32_t pad_ = 0;
};

/// The n-gram look-back of one sequence: the compressed ids (or engram_dead_id / engram_unset_id) of the last
/// max_ngram − 1 positions, newest first. Copy it to snapshot / roll back. Works across any split of the
/// sequence into chunks (prefill chunks, decode steps), so chunked and contiguous lookups agree exactly.
class engram_ngram_state {
 public:
  static constexpr uint32_t max_shifts = 8;
  explicit engram_ngram_state(uint32_t max_ngram = 4) : n_(max_ngram) {
    if (max_ngram < 2 || max_ngram > max_shifts) throw std::invalid_argument("engram_ngram_state: max_ngram in [2, 8]");
    hist_.fill(engram_unset_id);
  }
  /// The ids of shifts 0..max_ngram−1 for a new token with compressed id `c0` (engram_dead_id for an image-span
  /// token), after the blocked rule: from the first shift that is unset or DEAD onwards, every shift is `pad`.
  std::array<int64_t, max_shifts> shifted(int32_t c0, int32_t pad) const noexcept {
    std::array<int64_t, max_shifts> t{};
    bool blocked = false;
    for (uint32_t s = 0; s < n_; ++s) {
      const int32_t v = s == 0 ? c0 : hist_[s - 1];
      blocked = blocked || v < 0;
      t[s] = blocked ? pad : v;
    }
    return t;
  }
  /// Appends a token (after computing its row ids).
  void push(int32_t c0) noexcept {
    for (uint32_t s = n_ - 1; s > 0; --s) hist_[s] = hist_[s - 1];
    hist_[0] = c0;
  }
  void reset() noexcept { hist_.fill(engram_unset_id); }
  uint32_t max_ngram() const noexcept { return n_; }
  /// hist()[k] = compressed id at shift k+1 (k < max_ngram − 1).
  const std::array<int32_t, max_shifts>& hist() const noexcept { return hist_; }

 private:
  uint32_t n_;
  std::array<int32_t, max_shifts> hist_{};
};

/// Row ids of one layer for one token from its shifted ids: out[cols], order-major.
inline void engram_row_ids(const engram_layer_hash& L, uint32_t n_heads,
                           const std::array<int64_t, engram_ngram_state::max_shifts>& t, int64_t* out) noexcept {
  int64_t r = t[0] * L.mult[0];
  for (size_t s = 1; s < L.mult.size(); ++s) {
    r ^= t[s] * L.mult[s];
    const size_t base = (s - 1) * n_heads;
    for (uint32_t h = 0; h < n_heads; ++h) out[base + h] = r % L.prime[base + h] + L.offset[base + h];
  }
}

/// Row ids of a run of tokens for every Engram layer: out[(i·layers + l)·cols + col]. `image` (empty = none)
/// flags image-span tokens (DEAD). The state carries the look-back across calls and is advanced past the run.
inline void engram_hash_tokens(const engram_layout& lay, const engram_token_map& map, engram_ngram_state& st,
                               std::span<const uint32_t> tokens, std::span<const uint8_t> image,
                               std::span<int64_t> out) {
  const engram_config& c = lay.config();
  const size_t per = lay.layer_count() * c.cols();
  if (!image.empty() && image.size() != tokens.size())
    throw std::invalid_argument("engram_hash_tokens: image flags and tokens differ in length");
  if (out.size() != tokens.size() * per)
    throw std::invalid_argument("engram_hash_tokens: output holds " + std::to_string(out.size()) + " ids, want " +
                                std::to_string(tokens.size() * per));
  if (st.max_ngram() != c.max_ngram) throw std::invalid_argument("engram_hash_tokens: state max_ngram != config");
  for (size_t i = 0; i < tokens.size(); ++i) {
    const int32_t c0 = (!image.empty() && image[i]) ? engram_dead_id : map(tokens[i]);
    const auto t = st.shifted(c0, map.pad());
    for (size_t l = 0; l < lay.layer_count(); ++l)
      engram_row_ids(lay.layer(l), c.n_heads, t, out.data() + i * per + l * c.cols());
    st.push(c0);
  }
}

// ------------------------------------------------------------------------------------------ table rows

/// A layer's table as it lies in the file: data = E4M3 bytes [rows, head_dim], scale = UE8M0 bytes
/// [rows, head_dim/scale_block] (matrix_view with scale_enc = e8m0). Checks the sizes against the layout.
inline void engram_check_table(const matrix_view& t, const engram_layer_hash& L, const engram_config& c) {
  const std::string who = "engram table of layer " + std::to_string(L.layer_id);
  if (!t.data || !t.scale) throw std::invalid_argument(who + ": data or scale missing");
  if (t.scale_enc != scale_encoding::e8m0) throw std::invalid_argument(who + ": scales must be UE8M0");
  if (t.rows != L.rows || t.cols != c.head_dim)
    throw std::invalid_argument(who + ": shape [" + std::to_string(t.rows) + ", " + std::to_string(t.cols) +
                                "], want [" + std::to_string(L.rows) + ", " + std::to_string(c.head_dim) + "]");
  if (t.data_bytes < t.rows * t.cols || t.scale_bytes < t.rows * (t.cols / c.scale_block))
    throw std::invalid_argument(who + ": payload or scale tensor too short");
}

namespace engram_detail {
inline const std::array<float, 256>& e4m3_lut() noexcept {
  static const std::array<float, 256> t = [] {
    std::array<float, 256> a{};
    for (uint32_t b = 0; b < 256; ++b) a[b] = e4m3::decode(uint8_t(b));
    return a;
  }();
  return t;
}
/// bf16 cast (RNE) of v = e4m3 · 2^k. Such a v has ≤ 4 significant bits, so it is a bf16 value unless it lies
/// below the smallest normal (2^-126), where bf16 keeps only multiples of 2^-133: only then round.
inline float bf16_cast_of_scaled_e4m3(float v) noexcept {
  if (std::fabs(v) < 0x1p-126f && v != 0.0f) return bfloat16::decode(bfloat16::encode(v));
  return v;
}
}  // namespace engram_detail

/// Decodes table row `row` into out[head_dim]: bf16(e4m3(b) · 2^(k−127)) — exactly the official
/// `(fp8.float() * scale).to(bf16)`. Throws (naming the row) when the row is outside the table.
inline void engram_decode_row(const matrix_view& t, uint32_t scale_block, int64_t row, float* out) {
  if (row < 0 || uint64_t(row) >= t.rows)
    throw std::out_of_range("engram table: row " + std::to_string(row) + " outside [0, " + std::to_string(t.rows) + ")");
  const auto& lut = engram_detail::e4m3_lut();
  const uint64_t spr = t.cols / scale_block;
  const uint8_t* q = t.data + uint64_t(row) * t.cols;
  const uint8_t* s = t.scale + uint64_t(row) * spr;
  for (uint64_t b = 0; b < spr; ++b) {
    const float sc = e8m0_to_f32(s[b]);
    for (uint32_t j = 0; j < scale_block; ++j) {
      const uint64_t c = b * scale_block + j;
      out[c] = engram_detail::bf16_cast_of_scaled_e4m3(lut[q[c]] * sc);
    }
  }
}

/// E[cols·head_dim] of one token and layer: its `cols` rows decoded and concatenated in row-id order
/// (order-major, the order engram_row_ids writes them).
inline void engram_gather(const matrix_view& t, const engram_config& c, std::span<const int64_t> row_ids, float* E) {
  if (row_ids.size() != c.cols())
    throw std::invalid_argument("engram_gather: " + std::to_string(row_ids.size()) + " row ids, want " +
                                std::to_string(c.cols()));
  for (size_t i = 0; i < row_ids.size(); ++i) engram_decode_row(t, c.scale_block, row_ids[i], E + i * c.head_dim);
}

// ------------------------------------------------------------------------------------------ gate and add

/// Gates of one token: X [hc·d] (the 4-copy stream, updated in place), key [hc·d], value [d], qk = q_weight ⊙
/// k_weight [hc·d] (the official code only uses the product, formed in f32). Sums in double. Returns the gates
/// (all 0 and X untouched for an image-span token).
inline std::array<float, 16> engram_gate_add(float* X, const float* key, const float* value, const float* qk,
                                             uint32_t hc, uint32_t d, float eps, float clamp, bool image) {
  if (hc > 16) throw std::invalid_argument("engram_gate_add: hc > 16");
  std::array<float, 16> g{};
  if (image) return g;
  for (uint32_t c = 0; c < hc; ++c) {
    const float* x = X + size_t(c) * d;
    const float* k = key + size_t(c) * d;
    const float* w = qk + size_t(c) * d;
    double sx = 0, sk = 0, dot = 0;
    for (uint32_t i = 0; i < d; ++i) {
      sx += double(x[i]) * double(x[i]);
      sk += double(k[i]) * double(k[i]);
      dot += double(x[i]) * double(w[i]) * double(k[i]);
    }
    const double rstd = 1.0 / std::sqrt(sx / d + double(eps)) / std::sqrt(sk / d + double(eps));
    dot *= rstd / std::sqrt(double(d));
    const double z = std::copysign(std::sqrt(std::max(std::fabs(dot), double(clamp))), dot);
    g[c] = float(1.0 / (1.0 + std::exp(-z)));
  }
  for (uint32_t c = 0; c < hc; ++c) {
    float* x = X + size_t(c) * d;
    for (uint32_t i = 0; i < d; ++i) x[i] += g[c] * value[i];
  }
  return g;
}

/// The wkv projection: kv[n, (hc+1)·d] = E[n, cols·head_dim] · wkvᵀ, row-major (key copies first, then value).
/// engram_wkv.hpp builds one from a matrix_view and the CPU kernels; tests pass plain loops.
using engram_wkv_fn = std::function<void(const float* E, uint64_t n, float* kv)>;

/// Weights of one Engram layer.
struct engram_layer_weights {
  matrix_view table;           ///< FP8 table as in the file (engram_check_table)
  std::vector<float> qk;       ///< [hc·d] q_weight ⊙ k_weight, f32 product
  engram_wkv_fn wkv;           ///< the projection
};

/// Forms qk from q_weight and k_weight ([hc·d] each, f32).
inline std::vector<float> engram_qk(std::span<const float> q_weight, std::span<const float> k_weight) {
  if (q_weight.size() != k_weight.size()) throw std::invalid_argument("engram_qk: q_weight / k_weight sizes differ");
  std::vector<float> qk(q_weight.size());
  for (size_t i = 0; i < qk.size(); ++i) qk[i] = q_weight[i] * k_weight[i];
  return qk;
}

/// Reusable buffers of engram_apply (grow only).
struct engram_scratch {
  std::vector<float> E, kv;
};

/// Applies one Engram layer to n tokens: X [n, hc, d] in place; row_ids [n, cols] of this layer (a slice of
/// engram_hash_tokens' output taken with stride `row_stride` ids per token); image [n] or empty.
inline void engram_apply(const engram_config& c, const engram_layer_weights& w, std::span<float> X,
                         const int64_t* row_ids, size_t row_stride, std::span<const uint8_t> image,
                         engram_scratch& s) {
  const size_t hd = size_t(c.hc) * c.hidden;
  if (X.size() % hd != 0) throw std::invalid_argument("engram_apply: X is not a whole number of [hc, d] tokens");
  const size_t n = X.size() / hd;
  if (!image.empty() && image.size() != n) throw std::invalid_argument("engram_apply: image flags length != tokens");
  if (w.qk.size() != hd) throw std::invalid_argument("engram_apply: qk must hold hc·d values");
  if (!w.wkv) throw std::invalid_argument("engram_apply: no wkv projection");
  s.E.resize(n * c.embed_dim());
  s.kv.resize(n * c.kv_dim());
  for (size_t i = 0; i < n; ++i)
    engram_gather(w.table, c, std::span<const int64_t>(row_ids + i * row_stride, c.cols()),
                  s.E.data() + i * c.embed_dim());
  w.wkv(s.E.data(), n, s.kv.data());
  for (size_t i = 0; i < n; ++i) {
    const float* kv = s.kv.data() + i * c.kv_dim();
    engram_gate_add(X.data() + i * hd, kv, kv + hd, w.qk.data(), c.hc, c.hidden, c.eps, c.gate_clamp,
                    !image.empty() && image[i]);
  }
}

}  // namespace cmfx
