#pragma once
/// @file exmy.hpp
/// @brief One parametric small-float template for every scalar element format cmfx reads:
///        E2M1 (OCP MX FP4), E4M3 (fn variant), UE8M0 (MX scale), IEEE f16 and bf16.
///
/// The representation follows the ExMy idea of NVIDIA/cutlass:include/cutlass/exmy_base.h: exponent bits,
/// mantissa bits, how NaN/Inf are encoded and whether a sign bit exists fully define a format.
///
/// Special-value encodings (`nan_inf`):
///   ieee  exponent all ones: mantissa 0 = ±Inf, otherwise NaN (f16, bf16);
///   fn    "finite": no Inf; only exponent and mantissa all ones is NaN (E4M3fn: 0x7F/0xFF; UE8M0: 0xFF);
///   none  every code is a finite number (E2M1).
/// Formats with no mantissa bits (UE8M0) have no subnormals and no zero: code k is 2^(k - bias).
///
/// decode() is exact. encode() rounds to nearest, ties to even, including in the subnormal range. On overflow:
/// ieee -> ±Inf; fn -> NaN (as torch's non-saturating float8_e4m3fn cast) or the largest finite value when
/// `saturate` is set; none -> always the largest finite value. NaN input -> the format's NaN (E2M1, which has no
/// NaN, gives +0). UE8M0 has no sign: negative input or NaN gives its NaN 0xFF; input below 2^-127 gives code 0.
#include <bit>
#include <cmath>
#include <cstdint>
#include <limits>
#include <type_traits>

namespace cmfx {

enum class nan_inf { ieee, fn, none };

template <int E, int M, nan_inf NI, bool Signed>
struct exmy {
  static_assert(E >= 1 && E <= 8 && M >= 0 && M <= 10, "exmy: unsupported geometry");
  static constexpr int exp_bits = E;
  static constexpr int man_bits = M;
  static constexpr bool is_signed = Signed;
  static constexpr nan_inf special = NI;
  static constexpr int total_bits = E + M + (Signed ? 1 : 0);
  static constexpr int bias = (1 << (E - 1)) - 1;
  static constexpr bool has_subnormals = M > 0;
  using storage = std::conditional_t<(total_bits <= 8), uint8_t, uint16_t>;
  static constexpr uint32_t code_count = 1u << total_bits;
  static constexpr uint32_t exp_max_code = (1u << E) - 1;
  static constexpr uint32_t man_mask = (1u << M) - 1;
  static constexpr uint32_t sign_mask = Signed ? (1u << (E + M)) : 0u;

  /// Largest exponent code that encodes finite numbers, and the largest mantissa allowed with it.
  static constexpr uint32_t max_finite_exp_code = NI == nan_inf::ieee ? exp_max_code - 1 : exp_max_code;
  static constexpr uint32_t max_finite_man_code =
      NI == nan_inf::fn ? (M == 0 ? 0u : man_mask - 1) : man_mask;
  /// fn formats with no mantissa (UE8M0) lose the top exponent code to NaN.
  static constexpr uint32_t max_finite_exp = (NI == nan_inf::fn && M == 0) ? exp_max_code - 1 : max_finite_exp_code;
  static constexpr int min_exp = has_subnormals ? 1 - bias : -bias;  // exponent of the smallest normal

  static constexpr bool is_nan(storage c) noexcept {
    const uint32_t e = (uint32_t(c) >> M) & exp_max_code, m = uint32_t(c) & man_mask;
    if constexpr (NI == nan_inf::ieee) return e == exp_max_code && m != 0;
    if constexpr (NI == nan_inf::fn) return e == exp_max_code && m == man_mask;
    return false;
  }
  static constexpr bool is_inf(storage c) noexcept {
    if constexpr (NI == nan_inf::ieee)
      return ((uint32_t(c) >> M) & exp_max_code) == exp_max_code && (uint32_t(c) & man_mask) == 0;
    return false;
  }

  static double max_finite() noexcept {
    return std::ldexp(1.0 + double(max_finite_man_code) / double(1u << M), int(max_finite_exp) - bias);
  }

  /// Exact decode. NaN payloads are widened into the f32 mantissa; a NaN whose widened payload would be
  /// zero (UE8M0's 0xFF) becomes the quiet NaN 0x7FC00000.
  static float decode(storage c) noexcept {
    const uint32_t s = Signed ? (uint32_t(c) >> (E + M)) & 1u : 0u;
    const uint32_t e = (uint32_t(c) >> M) & exp_max_code, m = uint32_t(c) & man_mask;
    const uint32_t fsign = s << 31;
    if (is_nan(c)) {
      uint32_t payload = m << (23 - M);
      if (payload == 0) payload = 0x400000u;
      return std::bit_cast<float>(fsign | 0x7F800000u | payload);
    }
    if (is_inf(c)) return std::bit_cast<float>(fsign | 0x7F800000u);
    double v;
    if (e == 0 && has_subnormals)
      v = std::ldexp(double(m), 1 - bias - M);
    else
      v = std::ldexp(double((1u << M) | m), int(e) - bias - M);
    return float(s ? -v : v);
  }

  /// Round-to-nearest-even encode; see the file comment for overflow and NaN rules.
  static storage encode(float x, bool saturate = false) noexcept {
    if (std::isnan(x)) return nan_code(std::signbit(x));
    const bool neg = std::signbit(x);
    if (!Signed && (neg && x != 0.0f)) return nan_code(false);
    const uint32_t s = (Signed && neg) ? sign_mask : 0u;
    double a = std::fabs(double(x));
    if (std::isinf(a)) return overflow_code(s, saturate);
    if (a == 0.0) {
      if constexpr (!has_subnormals) return storage(0);  // no zero: smallest value
      return storage(s);
    }
    int e2;
    (void)std::frexp(a, &e2);  // a = f * 2^e2, f in [0.5, 1)
    int e = e2 - 1;           // a in [2^e, 2^(e+1))
    if (!has_subnormals && e < min_exp) return storage(s);  // clamp to the smallest code
    const int e_eff = e < min_exp ? min_exp : e;
    const double quantum = std::ldexp(1.0, e_eff - M);
    double n = std::nearbyint(a / quantum);  // exact division by a power of two; RNE
    if (!has_subnormals) {
      // No mantissa: halfway (1.5 * 2^e) rounds to the even exponent code.
      const double q = a / quantum;
      if (q == 1.5) n = (((e_eff + bias) & 1) == 0) ? 1.0 : 2.0;
    }
    const double v = n * quantum;
    if (v > max_finite()) return overflow_code(s, saturate);
    if (v == 0.0) return storage(s);
    // Re-decompose the rounded value.
    int ev2;
    (void)std::frexp(v, &ev2);
    int ev = ev2 - 1;
    if (has_subnormals && ev < min_exp) {
      const uint32_t m = uint32_t(std::ldexp(v, -(min_exp - M)));
      return storage(s | m);
    }
    const uint32_t ecode = uint32_t(ev + bias);
    const uint32_t m = uint32_t(std::ldexp(v, -(ev - M))) & man_mask;
    return storage(s | (ecode << M) | m);
  }

 private:
  static storage nan_code(bool neg) noexcept {
    if constexpr (NI == nan_inf::ieee)
      return storage((Signed && neg ? sign_mask : 0u) | (exp_max_code << M) | (M > 0 ? 1u << (M - 1) : 0u));
    if constexpr (NI == nan_inf::fn) return storage((Signed && neg ? sign_mask : 0u) | (exp_max_code << M) | man_mask);
    return storage(0);
  }
  static storage overflow_code(uint32_t s, bool saturate) noexcept {
    const storage maxc = storage(s | (max_finite_exp << M) | max_finite_man_code);
    if constexpr (NI == nan_inf::ieee) return saturate ? maxc : storage(s | (exp_max_code << M));
    if constexpr (NI == nan_inf::fn) return saturate ? maxc : nan_code(s != 0);
    return maxc;
  }
};

/// OCP MX FP4: values ±{0, 0.5, 1, 1.5, 2, 3, 4, 6}.
using e2m1 = exmy<2, 1, nan_inf::none, true>;
/// FP8 E4M3 "fn": max 448, 0x7F/0xFF NaN, no Inf (torch.float8_e4m3fn).
using e4m3 = exmy<4, 3, nan_inf::fn, true>;
/// MX scale: 2^(k-127), 0xFF NaN, no zero, no sign.
using ue8m0 = exmy<8, 0, nan_inf::fn, false>;
/// IEEE binary16.
using half = exmy<5, 10, nan_inf::ieee, true>;
/// bfloat16 (the top half of an f32).
using bfloat16 = exmy<8, 7, nan_inf::ieee, true>;

/// Fast exact bf16 decode (identical to bfloat16::decode, NaN payloads included).
inline float bf16_to_f32(uint16_t b) noexcept { return std::bit_cast<float>(uint32_t(b) << 16); }

/// Fast exact f16 decode by bit manipulation (identical to half::decode).
inline float f16_to_f32(uint16_t h) noexcept {
  const uint32_t s = uint32_t(h & 0x8000u) << 16;
  const uint32_t e = (h >> 10) & 0x1Fu, m = h & 0x3FFu;
  if (e == 0x1F) return std::bit_cast<float>(s | 0x7F800000u | (m << 13));
  if (e == 0) {
    const float v = float(m) * 5.9604644775390625e-8f;  // m * 2^-24, exact
    return s ? -v : v;
  }
  return std::bit_cast<float>(s | ((e + 112u) << 23) | (m << 13));
}

/// Fast exact UE8M0 decode (identical to ue8m0::decode): 2^(k-127); k = 0 is the f32 subnormal 2^-127.
inline float e8m0_to_f32(uint8_t k) noexcept {
  if (k == 0) return std::bit_cast<float>(0x00400000u);
  if (k == 0xFF) return std::bit_cast<float>(0x7FC00000u);
  return std::bit_cast<float>(uint32_t(k) << 23);
}

inline uint16_t f32_to_f16(float x) noexcept { return half::encode(x); }
inline uint16_t f32_to_bf16(float x) noexcept { return bfloat16::encode(x); }

}  // namespace cmfx
