#pragma once
/// @file vocab_pass.hpp
/// @brief The sampler's passes over the whole vocabulary, written to vectorise (AVX-512 / AVX2 builds chosen at
///        run time, the baseline build otherwise; all give the same bits): NaN → −inf, temperature and maximum,
///        and the weights exp(z − m) in float64 with an exp written out (no C library call), so that it is the
///        same bits everywhere. For a 129k vocabulary these passes were the sampler's main cost (dev machine:
///        ≈ 0.58 ms CPU per token through scalar loops and libm's exp, now ≈ 0.15 ms; docs/PERF.md).
///
/// exp(x) for x ≤ 0 (x = z − z_max), by the classic reduction (fdlibm e_exp.c describes it): k = round(x / ln 2),
/// r = x − k·ln2_hi − k·ln2_lo (ln 2 split so that k·ln2_hi is exact for |k| < 2^11), |r| ≤ ~0.35; then
/// e^r = Σ_{i=0..13} r^i / i! by Horner (truncation < 5e-18 relative) and the product with 2^k built in the
/// exponent bits. Only IEEE +, −, × and bit operations, one fixed order per element: a vectorised loop gives the
/// bits of the scalar one (the project builds with -ffp-contract=off, so no fused multiply-adds appear).
/// Relative error against the exact value: < 4e-16 (tests/sample/vocab_pass_test.cpp measures it against
/// a long-double reference). x < −708 (below the smallest normal double) gives 0, as does −inf
/// (libm would give a subnormal for x in (−745, −708]: a weight < 1e-307 next to the maximum's weight of 1).
///
/// exp_weights(z, n, m, w): w[i] = exp(z[i] − m) for all i.
/// sanitize(src, dst, n): dst = src with NaN replaced by −inf.
/// divide_max(z, n, t): z[i] /= t (IEEE division, as the scalar loop), returns the largest z (no NaN in z).
/// max_of(z, n): the largest z (no NaN in z).
/// The comparisons work on bit patterns and the selects are bit masks: a floating-point compare-and-select keeps
/// GCC from vectorising under -ftrapping-math. The maximum is exact in any order.
#include <bit>
#include <cstddef>
#include <cstdint>
#include <limits>

namespace cmfx {

namespace vocab_detail {

inline constexpr double log2e = 0x1.71547652b82fep+0;
inline constexpr double ln2_hi = 0x1.62e42fee00000p-1;  // 6.93147180369123816490e-01, low 32 bits zero
inline constexpr double ln2_lo = 0x1.a39ef35793c76p-33;  // 1.90821492927058770002e-10
inline constexpr double shifter = 0x1.8p52;              // adding it rounds to an integer (ties to even)
inline constexpr double lowest = -708.0;                 // 2^k stays a normal number above this

/// exp(x) for x ≤ 0 (also fine up to +709); see the file comment.
/// The comparison with `lowest` is done on the bit patterns (for x ≤ 0 a larger magnitude is a larger unsigned
/// pattern; positive x are below every negative pattern), and both selects are bit masks: a floating-point
/// compare-and-select would keep GCC from vectorising the loop under -ftrapping-math.
[[gnu::always_inline]] inline double exp_nonpos(double x) noexcept {
  constexpr uint64_t lowest_bits = std::bit_cast<uint64_t>(lowest);
  const uint64_t xb = std::bit_cast<uint64_t>(x);
  const uint64_t keep = uint64_t{0} - uint64_t{xb <= lowest_bits};  // all ones unless x < lowest (or −inf)
  const double xc = std::bit_cast<double>((xb & keep) | (lowest_bits & ~keep));
  const double t = xc * log2e + shifter;      // low mantissa bits of t hold k = round(xc / ln 2)
  const double k = t - shifter;
  const double r = (xc - k * ln2_hi) - k * ln2_lo;
  double p = 0x1.6124613a86d09p-33;  // 1/13!
  p = p * r + 0x1.1eed8eff8d898p-29;  // 1/12!
  p = p * r + 0x1.ae64567f544e4p-26;  // 1/11!
  p = p * r + 0x1.27e4fb7789f5cp-22;  // 1/10!
  p = p * r + 0x1.71de3a556c734p-19;  // 1/9!
  p = p * r + 0x1.a01a01a01a01ap-16;  // 1/8!
  p = p * r + 0x1.a01a01a01a01ap-13;  // 1/7!
  p = p * r + 0x1.6c16c16c16c17p-10;  // 1/6!
  p = p * r + 0x1.1111111111111p-7;   // 1/5!
  p = p * r + 0x1.5555555555555p-5;   // 1/4!
  p = p * r + 0x1.5555555555555p-3;   // 1/3!
  p = p * r + 0.5;
  p = p * r + 1.0;
  p = p * r + 1.0;
  // (k + 1023) into the exponent field: t's low 12 mantissa bits are k mod 2^12 (k ∈ [−1022, 1023]).
  // The scale is +0 below `lowest`, so the result is 0 there.
  const uint64_t e = ((std::bit_cast<uint64_t>(t) + 1023u) << 52) & keep;
  return p * std::bit_cast<double>(e);
}

[[gnu::always_inline]] inline void exp_weights_body(const float* z, size_t n, double m, double* w) noexcept {
  for (size_t i = 0; i < n; ++i) w[i] = exp_nonpos(static_cast<double>(z[i]) - m);
}

[[gnu::always_inline]] inline void sanitize_body(const float* src, float* dst, size_t n) noexcept {
  constexpr int32_t neg_inf = std::bit_cast<int32_t>(-std::numeric_limits<float>::infinity());
  for (size_t i = 0; i < n; ++i) {
    const int32_t b = std::bit_cast<int32_t>(src[i]);
    const int32_t nan = -int32_t{(b & 0x7fffffff) > 0x7f800000};  // all ones for a NaN
    dst[i] = std::bit_cast<float>((b & ~nan) | (neg_inf & nan));
  }
}

// Order-preserving signed key of a non-NaN float (negative floats: magnitude bits flipped); its own inverse.
[[gnu::always_inline]] inline int32_t order_key(int32_t b) noexcept { return b ^ ((b >> 31) & 0x7fffffff); }

[[gnu::always_inline]] inline float max_body(const float* z, size_t n) noexcept {
  int32_t k = order_key(std::bit_cast<int32_t>(-std::numeric_limits<float>::infinity()));
  for (size_t i = 0; i < n; ++i) {
    const int32_t v = order_key(std::bit_cast<int32_t>(z[i]));
    k = v > k ? v : k;
  }
  return std::bit_cast<float>(order_key(k));
}

[[gnu::always_inline]] inline float divide_max_body(float* z, size_t n, float t) noexcept {
  int32_t k = order_key(std::bit_cast<int32_t>(-std::numeric_limits<float>::infinity()));
  for (size_t i = 0; i < n; ++i) {
    const float q = z[i] / t;
    z[i] = q;
    const int32_t v = order_key(std::bit_cast<int32_t>(q));
    k = v > k ? v : k;
  }
  return std::bit_cast<float>(order_key(k));
}

#if defined(__x86_64__) && defined(__GNUC__)
inline bool have_avx2() noexcept {
  static const bool b = __builtin_cpu_supports("avx2");
  return b;
}
inline bool have_avx512() noexcept {
  static const bool b = __builtin_cpu_supports("avx512f");
  return b;
}
[[gnu::target("avx2")]] inline void exp_weights_avx2(const float* z, size_t n, double m, double* w) noexcept {
  exp_weights_body(z, n, m, w);
}
// 8 doubles per vector: half the time of the AVX2 build on the dev machine (AMD EPYC, Zen 4).
[[gnu::target("avx512f")]] inline void exp_weights_avx512(const float* z, size_t n, double m, double* w) noexcept {
  exp_weights_body(z, n, m, w);
}
[[gnu::target("avx2")]] inline void sanitize_avx2(const float* src, float* dst, size_t n) noexcept {
  sanitize_body(src, dst, n);
}
[[gnu::target("avx2")]] inline float max_avx2(const float* z, size_t n) noexcept { return max_body(z, n); }
[[gnu::target("avx2")]] inline float divide_max_avx2(float* z, size_t n, float t) noexcept {
  return divide_max_body(z, n, t);
}
#define CMFX_VOCAB_PASS_AVX2(call) \
  if (vocab_detail::have_avx2()) return vocab_detail::call
#define CMFX_VOCAB_PASS_AVX512(call) \
  if (vocab_detail::have_avx512()) return vocab_detail::call
#else
#define CMFX_VOCAB_PASS_AVX2(call)
#define CMFX_VOCAB_PASS_AVX512(call)
#endif

}  // namespace vocab_detail

/// exp(x) for x ≤ 0, identical to what exp_weights computes for one element.
inline double sample_exp(double x) noexcept { return vocab_detail::exp_nonpos(x); }

/// w[i] = exp(z[i] − m) for i < n (z[i] ≤ m, or −inf); see the file comment.
inline void exp_weights(const float* z, size_t n, double m, double* w) noexcept {
  CMFX_VOCAB_PASS_AVX512(exp_weights_avx512(z, n, m, w));
  CMFX_VOCAB_PASS_AVX2(exp_weights_avx2(z, n, m, w));
  vocab_detail::exp_weights_body(z, n, m, w);
}
/// dst[i] = src[i], NaN → −inf.
inline void sanitize(const float* src, float* dst, size_t n) noexcept {
  CMFX_VOCAB_PASS_AVX2(sanitize_avx2(src, dst, n));
  vocab_detail::sanitize_body(src, dst, n);
}
/// The largest of z[0..n) (−inf when n = 0); z holds no NaN.
inline float max_of(const float* z, size_t n) noexcept {
  CMFX_VOCAB_PASS_AVX2(max_avx2(z, n));
  return vocab_detail::max_body(z, n);
}
/// z[i] /= t, then the largest of z; z holds no NaN.
inline float divide_max(float* z, size_t n, float t) noexcept {
  CMFX_VOCAB_PASS_AVX2(divide_max_avx2(z, n, t));
  return vocab_detail::divide_max_body(z, n, t);
}

#undef CMFX_VOCAB_PASS_AVX2
#undef CMFX_VOCAB_PASS_AVX512

}  // namespace cmfx
