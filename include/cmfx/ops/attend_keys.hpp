#pragma once
/// @file attend_keys.hpp
/// @brief One query head's attention over a gathered list of key rows that are also its value rows (V4 / V4.1's
/// shared K = V latent), as the CPU graphs compute it (dsv4-architecture.md §3.3):
///   ℓ_k = float(dot(q, key_k) · scale)   dot in double, ops/reduce.hpp's 8-lane order
///   p   = attend_sink(ℓ, sink)           ops/softmax.hpp
///   o   = float(Σ_k p_k · key_k)         double accumulators, k ascending
///
/// The body is also compiled for AVX2 and AVX-512F and the widest one the CPU has is picked once at run time. The
/// project builds with -ffp-contract=off, so a wider build does the same IEEE operations on every lane in the same
/// order: the results are the baseline build's bit for bit (tests/ops/attend_keys_test.cpp), while a baseline
/// x86-64 build works two doubles at a time. (On the dev guest the sparse attention was 80 % of the V4 attention
/// sublayer's own time at 2 threads: docs/PERF.md "Thirty-sixth session".)
#include <algorithm>
#include <cstddef>
#include <span>

#include "cmfx/ops/reduce.hpp"
#include "cmfx/ops/softmax.hpp"

namespace cmfx {

namespace attend_detail {

[[gnu::always_inline]] inline void attend_keys_body(const float* q, const float* const* keys, size_t nk, size_t hd,
                                                    double scale, float sink, float* logit, double* acc, float* out) {
  for (size_t k = 0; k < nk; ++k) logit[k] = float(ops_detail::dot(q, keys[k], hd) * scale);
  attend_sink(std::span<const float>(logit, nk), sink, std::span<float>(logit, nk));
  std::fill(acc, acc + hd, 0.0);
  for (size_t k = 0; k < nk; ++k) {
    const double pk = logit[k];
    const float* kr = keys[k];
    for (size_t c = 0; c < hd; ++c) acc[c] += pk * double(kr[c]);
  }
  for (size_t c = 0; c < hd; ++c) out[c] = float(acc[c]);
}

#if defined(__x86_64__) && defined(__GNUC__)
enum class attend_isa { baseline, avx2, avx512 };
inline attend_isa best_attend_isa() noexcept {
  static const attend_isa i = __builtin_cpu_supports("avx512f") ? attend_isa::avx512
                              : __builtin_cpu_supports("avx2") ? attend_isa::avx2
                                                                : attend_isa::baseline;
  return i;
}
[[gnu::target("avx2"), gnu::flatten]] inline void attend_keys_avx2(const float* q, const float* const* keys, size_t nk,
                                                                   size_t hd, double scale, float sink, float* logit,
                                                                   double* acc, float* out) {
  attend_keys_body(q, keys, nk, hd, scale, sink, logit, acc, out);
}
[[gnu::target("avx512f"), gnu::flatten]] inline void attend_keys_avx512(const float* q, const float* const* keys,
                                                                        size_t nk, size_t hd, double scale, float sink,
                                                                        float* logit, double* acc, float* out) {
  attend_keys_body(q, keys, nk, hd, scale, sink, logit, acc, out);
}
#endif

}  // namespace attend_detail

/// The attention of query q [hd] over the nk rows keys[k] [hd] (each both key and value) with the sink logit
/// `sink` (−inf: none): out [hd] as the file comment gives. Scratch: logit [nk], acc [hd]. `isa` (tests): the
/// build to run; by default the widest the CPU has.
inline void attend_keys(const float* q, const float* const* keys, size_t nk, size_t hd, double scale, float sink,
                        float* logit, double* acc, float* out, int isa = -1) {
#if defined(__x86_64__) && defined(__GNUC__)
  using attend_detail::attend_isa;
  const attend_isa best = attend_detail::best_attend_isa();
  const attend_isa use = isa < 0 ? best : std::min(best, attend_isa(isa));
  if (use == attend_isa::avx512) return attend_detail::attend_keys_avx512(q, keys, nk, hd, scale, sink, logit, acc, out);
  if (use == attend_isa::avx2) return attend_detail::attend_keys_avx2(q, keys, nk, hd, scale, sink, logit, acc, out);
#else
  (void)isa;
#endif
  attend_detail::attend_keys_body(q, keys, nk, hd, scale, sink, logit, acc, out);
}

}  // namespace cmfx
