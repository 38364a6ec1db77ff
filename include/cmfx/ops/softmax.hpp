#pragma once
/// @file softmax.hpp
/// @brief Softmax with an attention sink (spec §3.3 "Index list and sparse attention with sink") and a plain
///        in-place softmax.
///
/// attend_sink: p_k = e^{ℓ_k−m} / (Σ_k e^{ℓ_k−m} + e^{sink−m}), m = max(max_k ℓ_k, sink). The sink is a raw
/// logit with no value: it only enlarges the denominator, so Σ p_k < 1. Masked keys carry ℓ_k = −inf and
/// contribute nothing (p_k = 0, nothing added to the denominator). A row whose keys are all masked gives all
/// p_k = 0 (the sink takes the whole mass). A sink of −inf means "no sink".
///
/// ℓ−m and the exponentials are evaluated in double (an f32 difference of logits ~40 apart already costs ~1e-6
/// relative); e^{ℓ−m} is kept as f32 between the two passes and the denominator is accumulated in double.
#include <cmath>
#include <limits>
#include <span>
#include <stdexcept>

namespace cmfx {

/// Probabilities of the keys of one attention row with a sink; p.size() == logits.size(). p may alias logits.
/// Returns the denominator relative to e^m (Σ_k e^{ℓ_k−m} + e^{sink−m}), 0 when nothing is finite.
inline double attend_sink(std::span<const float> logits, float sink, std::span<float> p) {
  if (p.size() != logits.size()) throw std::invalid_argument("attend_sink: p size != logits size");
  const size_t n = logits.size();
  const float* l = logits.data();
  float m = sink;
  for (size_t k = 0; k < n; ++k) m = l[k] > m ? l[k] : m;  // NaN-free max; −inf keys never win
  float* out = p.data();
  if (!(m > -std::numeric_limits<float>::infinity())) {  // everything masked, no sink
    for (size_t k = 0; k < n; ++k) out[k] = 0.0f;
    return 0.0;
  }
  double den = std::exp(double(sink) - double(m));
  for (size_t k = 0; k < n; ++k) {
    const double e = std::exp(double(l[k]) - double(m));  // exp(−inf) = 0
    out[k] = float(e);
    den += e;
  }
  const double inv = 1.0 / den;
  for (size_t k = 0; k < n; ++k) out[k] = float(double(out[k]) * inv);
  return den;
}

/// In-place softmax over x. Entries of −inf get 0; if every entry is −inf the result is all zeros.
inline void softmax_inplace(std::span<float> x) {
  const size_t n = x.size();
  float* v = x.data();
  float m = -std::numeric_limits<float>::infinity();
  for (size_t k = 0; k < n; ++k) m = v[k] > m ? v[k] : m;
  if (!(m > -std::numeric_limits<float>::infinity())) {
    for (size_t k = 0; k < n; ++k) v[k] = 0.0f;
    return;
  }
  double den = 0.0;
  for (size_t k = 0; k < n; ++k) {
    const double e = std::exp(double(v[k]) - double(m));
    v[k] = float(e);
    den += e;
  }
  const double inv = 1.0 / den;
  for (size_t k = 0; k < n; ++k) v[k] = float(double(v[k]) * inv);
}

}  // namespace cmfx
