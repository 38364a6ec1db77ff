#pragma once
/// @file topk.hpp
/// @brief Exact top-k selection over f32 scores (MoE routing, the indexer's top-512, sampling).
///
/// Order and tie rule (this is the contract every backend must reproduce):
///   - indices come out ordered by value, largest first;
///   - equal values → the LOWER index first (−0.0 and +0.0 compare equal);
///   - NaN is treated as −inf (it ranks with the −inf entries, and among those by index);
///   - −inf entries are ordinary values: they are returned when k exceeds the number of finite scores
///     (callers that must drop them, e.g. V4.1's candidate blocks, filter afterwards);
///   - k > n returns n indices.
/// The result is the first k entries of a stable sort of the scores by value descending.
///
/// No allocation: the caller passes `scratch` with room for n (value, index) entries. Cost O(n + k log k)
/// (nth_element then a sort of the k winners).
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <span>
#include <stdexcept>

namespace cmfx {

struct topk_entry {
  float value;
  uint32_t index;
};

/// The strict weak order of the tie rule: larger value first, then lower index.
struct topk_before {
  bool operator()(const topk_entry& a, const topk_entry& b) const noexcept {
    return a.value > b.value || (a.value == b.value && a.index < b.index);
  }
};

/// NaN → −inf (the value topk ranks).
inline float topk_key(float v) noexcept { return std::isnan(v) ? -std::numeric_limits<float>::infinity() : v; }

/// Rank entries already filled in (values must be NaN-free, see topk_key): afterwards the first
/// min(k, n) entries are the winners in order. Returns min(k, n).
inline size_t topk_entries(std::span<topk_entry> e, size_t k) {
  const size_t kk = std::min(k, e.size());
  if (kk == 0) return 0;
  if (kk < e.size()) std::nth_element(e.begin(), e.begin() + std::ptrdiff_t(kk - 1), e.end(), topk_before{});
  std::sort(e.begin(), e.begin() + std::ptrdiff_t(kk), topk_before{});
  return kk;
}

/// Indices of the k largest scores (tie rule above) into out[0..min(k,n)); returns min(k, n).
/// scratch.size() >= scores.size(); out.size() >= min(k, n).
inline size_t topk(std::span<const float> scores, size_t k, std::span<topk_entry> scratch, std::span<uint32_t> out) {
  const size_t n = scores.size();
  if (n > std::numeric_limits<uint32_t>::max()) throw std::invalid_argument("topk: more than 2^32 scores");
  if (scratch.size() < n) throw std::invalid_argument("topk: scratch smaller than the score count");
  const size_t kk = std::min(k, n);
  if (out.size() < kk) throw std::invalid_argument("topk: out smaller than min(k, n)");
  for (size_t i = 0; i < n; ++i) scratch[i] = topk_entry{topk_key(scores[i]), uint32_t(i)};
  topk_entries(scratch.first(n), kk);
  for (size_t i = 0; i < kk; ++i) out[i] = scratch[i].index;
  return kk;
}

/// How close a top-k selection came to a tie: (k-th largest − (k+1)-th largest) / max |s|, over the finite values
/// of s only (±inf and NaN are masks and pins, never near anything). +inf when k = 0 or at most k values are
/// finite (nothing competed), 0 when they are all zero. A diagnostic for comparing backends: a selection whose
/// margin is within the other backend's rounding may legitimately differ there. scratch.size() >= s.size().
inline float selection_margin(std::span<const float> s, size_t k, std::span<topk_entry> scratch) {
  if (scratch.size() < s.size()) throw std::invalid_argument("selection_margin: scratch smaller than the score count");
  size_t n = 0;
  float amax = 0.0f;
  for (size_t i = 0; i < s.size(); ++i)
    if (std::isfinite(s[i])) scratch[n++] = topk_entry{s[i], uint32_t(i)}, amax = std::max(amax, std::fabs(s[i]));
  if (k == 0 || n <= k) return std::numeric_limits<float>::infinity();
  topk_entries(scratch.first(n), k + 1);
  return amax > 0.0f ? (scratch[k - 1].value - scratch[k].value) / amax : 0.0f;
}

}  // namespace cmfx
