#pragma once
/// @file routing.hpp
/// @brief MoE gate math (spec §3.4, §4.3): sqrt-softplus scores, score and hash routing, clamped SwiGLU.
///
/// Scores: s = sqrt(softplus(z / temp)) with torch's softplus threshold (softplus(z) = z for z > 20, else
/// log1p(exp(z))), evaluated in double and stored as f32 (the f32 router-score tensor of the reference).
/// Score routing: ids = topk(s + bias) in f32 (bias only selects; tie rule of topk.hpp).
/// Hash routing (V4 layers 0–2): ids = tid2eid[min(token, V−1)·top_k + k]; router logits are still used.
/// Both: w_k = s[id_k] / (Σ_j s[id_j] + norm_eps) · route_scale, from the UNBIASED s, in double, then f32.
/// V4 uses norm_eps = 0, V4.1 uses 1e-20.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <span>
#include <stdexcept>
#include <type_traits>

#include "cmfx/ops/topk.hpp"

namespace cmfx {

struct route_config {
  uint32_t top_k = 6;
  float route_scale = 1.5f;
  float norm_eps = 0.0f;  ///< added to the normaliser: 0 (V4) or 1e-20 (V4.1)
  float temp = 1.0f;      ///< V4.1 gate_temp (1.0 in the release config)
};

/// sqrt(softplus(z)), softplus linear past 20 (torch's default threshold).
inline float sqrt_softplus(float z) noexcept {
  const double zd = z;
  const double sp = zd > 20.0 ? zd : std::log1p(std::exp(zd));
  return float(std::sqrt(sp));
}

namespace ops_detail {
inline void route_scores(std::span<const float> logits, float temp, std::span<float> s) {
  if (s.size() != logits.size()) throw std::invalid_argument("routing: s size != expert count");
  for (size_t e = 0; e < logits.size(); ++e) s[e] = sqrt_softplus(temp == 1.0f ? logits[e] : logits[e] / temp);
}
inline void route_weights(std::span<const float> s, std::span<const uint32_t> idx, const route_config& c,
                          std::span<float> w) {
  double sum = 0.0;
  for (uint32_t id : idx) sum += double(s[id]);
  const double k = double(c.route_scale) / (sum + double(c.norm_eps));
  for (size_t j = 0; j < idx.size(); ++j) w[j] = float(double(s[idx[j]]) * k);
}
inline void route_check(size_t n, const route_config& c, std::span<uint32_t> idx, std::span<float> w) {
  if (c.top_k == 0 || c.top_k > n) throw std::invalid_argument("routing: top_k must be in [1, experts]");
  if (idx.size() != c.top_k || w.size() != c.top_k) throw std::invalid_argument("routing: idx/w size != top_k");
}
}  // namespace ops_detail

/// Score routing. logits [n] (router output z), bias [n] or null; outputs: s [n] (unbiased scores),
/// idx [top_k] (ordered by biased score, tie rule of topk.hpp), w [top_k]. scratch holds n topk entries.
inline void route_score(std::span<const float> logits, const float* bias, const route_config& c,
                        std::span<float> s, std::span<topk_entry> scratch, std::span<uint32_t> idx,
                        std::span<float> w) {
  const size_t n = logits.size();
  ops_detail::route_check(n, c, idx, w);
  if (scratch.size() < n) throw std::invalid_argument("route_score: scratch smaller than expert count");
  ops_detail::route_scores(logits, c.temp, s);
  for (size_t e = 0; e < n; ++e) scratch[e] = topk_entry{topk_key(bias ? s[e] + bias[e] : s[e]), uint32_t(e)};
  topk_entries(scratch.first(n), c.top_k);
  for (uint32_t j = 0; j < c.top_k; ++j) idx[j] = scratch[j].index;
  ops_detail::route_weights(s, idx, c, w);
}

/// How close route_score's pick came to a tie: selection_margin (topk.hpp) over the biased scores s + bias, with s
/// as route_score left it. `biased` is caller scratch of s.size() floats, scratch of s.size() entries.
inline float route_score_margin(std::span<const float> s, const float* bias, size_t top_k, std::span<float> biased,
                                std::span<topk_entry> scratch) {
  if (biased.size() < s.size()) throw std::invalid_argument("route_score_margin: biased smaller than expert count");
  for (size_t e = 0; e < s.size(); ++e) biased[e] = bias ? s[e] + bias[e] : s[e];
  return selection_margin(biased.first(s.size()), top_k, scratch);
}

namespace ops_detail {
template <class T>
inline void route_hash_impl(std::span<const float> logits, std::span<const T> tid2eid, uint64_t token,
                            const route_config& c, std::span<float> s, std::span<uint32_t> idx, std::span<float> w) {
  const size_t n = logits.size();
  route_check(n, c, idx, w);
  const size_t rows = tid2eid.size() / c.top_k;
  if (rows == 0 || tid2eid.size() % c.top_k) throw std::invalid_argument("route_hash: tid2eid size not V*top_k");
  const size_t row = std::min<uint64_t>(token, rows - 1);
  for (uint32_t j = 0; j < c.top_k; ++j) {
    const T v = tid2eid[row * c.top_k + j];
    bool ok;
    if constexpr (std::is_same_v<T, float>)
      ok = v >= 0.0f && v < float(n) && v == std::floor(v);
    else
      ok = v >= 0 && size_t(v) < n;
    if (!ok) throw std::out_of_range("route_hash: tid2eid entry is not an expert id");
    idx[j] = uint32_t(v);
  }
  route_scores(logits, c.temp, s);
  route_weights(s, idx, c, w);
}
}  // namespace ops_detail

/// Hash routing. tid2eid is the [V, top_k] table, int32 in the release or f32 in some conversions; every id must
/// be an integer in [0, n), else std::out_of_range. token ≥ V uses row V−1. Outputs as route_score; idx in table
/// order.
inline void route_hash(std::span<const float> logits, std::span<const int32_t> tid2eid, uint64_t token,
                       const route_config& c, std::span<float> s, std::span<uint32_t> idx, std::span<float> w) {
  ops_detail::route_hash_impl<int32_t>(logits, tid2eid, token, c, s, idx, w);
}
inline void route_hash(std::span<const float> logits, std::span<const float> tid2eid, uint64_t token,
                       const route_config& c, std::span<float> s, std::span<uint32_t> idx, std::span<float> w) {
  ops_detail::route_hash_impl<float>(logits, tid2eid, token, c, s, idx, w);
}

/// Clamped SwiGLU of one expert: out = silu(min(g, limit)) · clamp(v, −limit, limit) · weight, in f32 in that
/// order (the routing weight multiplies before W2). The gate is clamped from above only. limit ≤ 0 disables the
/// clamp (as the reference's `if swiglu_limit > 0`). V4/V4.1 use limit 10. out may alias g or v.
inline void swiglu_clamp(std::span<const float> g, std::span<const float> v, float limit, std::span<float> out,
                         float weight = 1.0f) {
  if (g.size() != v.size() || out.size() != g.size()) throw std::invalid_argument("swiglu_clamp: size mismatch");
  const size_t n = g.size();
  const bool clamp = limit > 0.0f;
  for (size_t i = 0; i < n; ++i) {
    const float gi = clamp ? std::min(g[i], limit) : g[i];
    const float vi = clamp ? std::clamp(v[i], -limit, limit) : v[i];
    const float silu = gi / (1.0f + std::exp(-gi));
    out[i] = silu * vi * weight;
  }
}

}  // namespace cmfx
