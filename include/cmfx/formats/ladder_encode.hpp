#pragma once
/// @file ladder_encode.hpp
/// @brief Reference encoders for q4tp and q2tp that reproduce cortiq's `encode_q4tp` / `encode_q2tp`
///        (infosave2007/cmf:crates/cortiq-cli/src/convert.rs; cmf-format.md §2.1-2.2) bit for bit.
///
/// Bit-exactness rules (see docs/FORMATS.md): every step is f32 with no fused multiply-add (the library is built
/// with -ffp-contract=off), log2f/exp2f come from the system libm, quotients are w * (1/s) as the reference
/// computes them, f16 rounding uses cortiq's f32_to_f16, and rung search is always on (cortiq's default).
#include <cmath>
#include <limits>
#include <vector>

#include "cmfx/formats/ladder.hpp"

namespace cmfx {

namespace detail {

struct ladder_row_stats {
  std::vector<float> lg;      // log2 of each group's f16 scale
  std::vector<uint8_t> live;  // group has a non-zero element
  float lo = 0, hi = 0;
};

/// Per-group f16 scales (absmax / qmax, floored at 2^-14) and their log2 range over live groups.
inline ladder_row_stats ladder_stats(const float* w, uint64_t gpr, float qmax) {
  ladder_row_stats st;
  st.lg.resize(gpr);
  st.live.resize(gpr);
  float lo = std::numeric_limits<float>::infinity(), hi = -std::numeric_limits<float>::infinity();
  for (uint64_t g = 0; g < gpr; ++g) {
    float amax = 0.0f;
    for (uint32_t j = 0; j < ladder::group_elems; ++j) amax = std::fmax(amax, std::fabs(w[g * ladder::group_elems + j]));
    st.live[g] = amax != 0.0f;
    st.lg[g] = ::log2f(f16_scale(amax / qmax));
    if (st.live[g]) {
      lo = std::fmin(lo, st.lg[g]);
      hi = std::fmax(hi, st.lg[g]);
    }
  }
  if (!std::isfinite(lo)) lo = hi = st.lg[0];
  st.lo = lo;
  st.hi = hi;
  return st;
}

/// f16 step covering [lo_r, top] in `steps` rungs: rounded, then bumped one ulp at a time until it reaches top.
inline uint16_t ladder_step(float lo_r, float top, float steps) {
  uint16_t st_h = f32_to_f16_cortiq(std::fmax(top - lo_r, 0.0f) / steps);
  for (uint32_t k = 0; k < ladder::max_ulp_bumps; ++k) {
    const float st = f16_to_f32(st_h);
    if (st > 0.0f && lo_r + steps * st >= top) break;
    ++st_h;
  }
  return st_h;
}

inline float q4_quant(float w, float inv) noexcept { return std::clamp(round_half_even(w * inv), -8.0f, 7.0f); }
inline float q2_quant(float w, float inv) noexcept { return std::clamp(round_half_even(w * inv + 1.5f), 0.0f, 3.0f); }

/// Squared error of one 32-element group quantised at scale s (sequential f32 sum, as the reference).
template <bool Two>
inline float group_sse(const float* w, float s) noexcept {
  const float inv = 1.0f / s;
  float err = 0.0f;
  for (uint32_t j = 0; j < ladder::group_elems; ++j) {
    const float d = Two ? w[j] - (q2_quant(w[j], inv) - 1.5f) * s : w[j] - q4_quant(w[j], inv) * s;
    err += d * d;
  }
  return err;
}

/// Lowest-error code in [first, last] (ascending; strict < so the lowest code wins ties). `t` maps code -> scale.
template <bool Two, class Table>
inline uint32_t best_code(const float* w, const Table& t, int first, int last, float* err_out = nullptr) noexcept {
  float best = std::numeric_limits<float>::infinity();
  uint32_t code = uint32_t(first);
  for (int c = first; c <= last; ++c) {
    const float sc = t[c];
    if (!(sc > 0.0f)) continue;
    const float e = group_sse<Two>(w, sc);
    if (e < best) {
      best = e;
      code = uint32_t(c);
    }
  }
  if (err_out) *err_out = best;
  return code;
}

/// q2tp's code -> scale table: rung 0 is an exact zero, code c >= 1 uses q4tp rung c - 1.
struct q2_table {
  ladder::table t;
  float operator[](int c) const noexcept { return c == 0 ? 0.0f : t[c - 1]; }
};

}  // namespace detail

inline encoded_matrix fmt_q4tp::encode(const float* w, uint64_t rows, uint64_t cols) {
  const ladder::planes p(rows, cols, value_bytes);
  encoded_matrix e;
  e.data.assign(data_bytes(rows, cols), 0);
  constexpr int top = int(ladder::rungs) - 1;
  for (uint64_t r = 0; r < rows; ++r) {
    const float* wr = w + r * cols;
    const auto st = detail::ladder_stats(wr, p.gpr, 7.0f);
    const uint16_t lo_h = f32_to_f16_cortiq(st.lo);
    const float lo_r = f16_to_f32(lo_h);
    const uint16_t st_h = detail::ladder_step(lo_r, st.hi, float(top));
    const float step = f16_to_f32(st_h);
    const ladder::table t = ladder::build(lo_h, st_h);
    uint8_t* codes = e.data.data() + p.codes + r * p.stride;
    for (uint64_t g = 0; g < p.gpr; ++g) {
      const float* wg = wr + g * ladder::group_elems;
      uint32_t code = 0;
      if (st.live[g] && step > 0.0f) {
        const int nominal = int(std::clamp(round_half_even((st.lg[g] - lo_r) / step), 0.0f, float(top)));
        code = detail::best_code<false>(wg, t, std::max(0, nominal - 2), std::min(top, nominal + 1));
      }
      ladder::put_code(codes, g, code);
      const float inv = t[code] > 0.0f ? 1.0f / t[code] : 0.0f;
      uint8_t* q = e.data.data() + (r * p.gpr + g) * value_bytes;
      for (uint32_t k = 0; k < value_bytes; ++k) {
        const int n0 = int(detail::q4_quant(wg[2 * k], inv)) + 8, n1 = int(detail::q4_quant(wg[2 * k + 1], inv)) + 8;
        q[k] = uint8_t((n0 & 15) | (n1 << 4));
      }
    }
    uint8_t* pp = e.data.data() + p.params + ladder::param_bytes * r;
    store_u16(pp, lo_h);
    store_u16(pp + 2, st_h);
  }
  return e;
}

inline encoded_matrix fmt_q2tp::encode(const float* w, uint64_t rows, uint64_t cols) {
  const ladder::planes p(rows, cols, value_bytes);
  encoded_matrix e;
  e.data.assign(data_bytes(rows, cols), 0);
  constexpr int lmax = int(ladder::rungs) - 2;  // 30 steps: live codes 1..31 use q4tp rungs 0..30
  constexpr int top_code = int(ladder::rungs) - 1;
  constexpr float fracs[] = {1.0f, 0.9f, 0.8f, 0.7f};
  for (uint64_t r = 0; r < rows; ++r) {
    const float* wr = w + r * cols;
    const auto st = detail::ladder_stats(wr, p.gpr, 1.5f);
    const uint16_t lo_h = f32_to_f16_cortiq(st.lo);
    const float lo_r = f16_to_f32(lo_h);
    auto nominal_of = [&](uint64_t g, float stc) {
      return stc > 0.0f ? 1 + int(std::clamp(round_half_even((st.lg[g] - lo_r) / stc), 0.0f, float(lmax))) : 1;
    };
    float best_top = st.hi;
    if (st.hi > lo_r) {
      float best_err = std::numeric_limits<float>::infinity();
      for (float frac : fracs) {
        const float top = lo_r + (st.hi - lo_r) * frac;
        const uint16_t sh = detail::ladder_step(lo_r, top, float(lmax));
        const float stc = f16_to_f32(sh);
        const detail::q2_table tab{ladder::build(lo_h, sh)};
        float err = 0.0f;
        for (uint64_t g = 0; g < p.gpr; ++g) {
          if (!st.live[g]) continue;
          const int nom = nominal_of(g, stc);
          float ge;
          detail::best_code<true>(wr + g * ladder::group_elems, tab, std::max(nom - 2, 1), std::min(nom + 2, top_code), &ge);
          err += ge;
        }
        if (err < best_err) {
          best_err = err;
          best_top = top;
        }
      }
    }
    const uint16_t st_h = detail::ladder_step(lo_r, best_top, float(lmax));
    const float step = f16_to_f32(st_h);
    const detail::q2_table tab{ladder::build(lo_h, st_h)};
    uint8_t* codes = e.data.data() + p.codes + r * p.stride;
    for (uint64_t g = 0; g < p.gpr; ++g) {
      const float* wg = wr + g * ladder::group_elems;
      uint32_t code = 0;
      if (st.live[g]) {
        const int nom = nominal_of(g, step);
        code = detail::best_code<true>(wg, tab, std::max(nom - 2, 1), std::min(nom + 1, top_code));
      }
      ladder::put_code(codes, g, code);
      const float inv = tab[int(code)] > 0.0f ? 1.0f / tab[int(code)] : 0.0f;
      uint8_t* q = e.data.data() + (r * p.gpr + g) * value_bytes;
      for (uint32_t k = 0; k < value_bytes; ++k) {
        uint32_t b = 0;
        for (uint32_t j = 0; j < 4; ++j) b |= uint32_t(detail::q2_quant(wg[4 * k + j], inv)) << (2 * j);
        q[k] = uint8_t(b);
      }
    }
    uint8_t* pp = e.data.data() + p.params + ladder::param_bytes * r;
    store_u16(pp, lo_h);
    store_u16(pp + 2, st_h);
  }
  return e;
}

}  // namespace cmfx
