#pragma once
/// @file rope.hpp
/// @brief Rotary position embedding exactly as DeepSeek-V4 / V4.1 apply it (spec §3.3, "RoPE — exact convention").
///
/// - Pairs are ADJACENT channels (x[2i], x[2i+1]), i = 0..dim/2−1, rotated as the complex number a + ib times
///   e^{i·pos·f_i}: a' = a·cos − b·sin, b' = a·sin + b·cos. This is NOT the half-split (x_i, x_{i+dim/2})
///   "rotate_half" convention; both agree at pos 0 only.
/// - Only the LAST `dim` (= Dr = 64) channels of a head vector are rotated (apply_rope_last).
/// - Frequencies f_i = base^(−2i/dim), with YaRN (when `yarn`) blending f_i/factor and f_i by a linear ramp
///   between lo = max(floor(corr(beta_fast)), 0) and hi = min(ceil(corr(beta_slow)), dim−1),
///   corr(r) = dim·ln(original/(2πr)) / (2·ln base). YaRN is on for every compressed layer (no seqlen guard).
/// - Everything (frequencies, angle pos·f_i, cos, sin, the rotation) is computed in double; results are rounded
///   to f32 once. Positions up to ~1M keep the angle exact to ~1e-10 rad.
/// - inverse = conjugate rotation (angle −pos·f_i), used on the attention output.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <numbers>
#include <span>
#include <stdexcept>
#include <vector>

namespace cmfx {

struct rope_config {
  uint32_t dim = 64;          ///< rotated channels Dr (even)
  double base = 10000.0;      ///< 160000 on compressed layers, 10000 on SWA layers
  bool yarn = false;          ///< true on compressed layers (original_seq_len > 0)
  double factor = 16.0;
  double original = 65536.0;  ///< original_seq_len
  double beta_fast = 32.0;
  double beta_slow = 1.0;
};

/// The dim/2 frequencies f_i of one layer kind.
class rope_table {
 public:
  explicit rope_table(const rope_config& c) : cfg_(c) {
    if (c.dim == 0 || c.dim % 2) throw std::invalid_argument("rope_table: dim must be even and > 0");
    const uint32_t npairs = c.dim / 2;
    f_.resize(npairs);
    const double dd = double(c.dim);
    for (uint32_t i = 0; i < npairs; ++i) f_[i] = std::pow(c.base, -2.0 * double(i) / dd);
    if (c.yarn) {
      const double lnb = std::log(c.base);
      auto corr = [&](double r) { return dd * std::log(c.original / (2.0 * std::numbers::pi * r)) / (2.0 * lnb); };
      const double lo = std::max(std::floor(corr(c.beta_fast)), 0.0);
      const double hi = std::min(std::ceil(corr(c.beta_slow)), dd - 1.0);
      const double span = std::max(hi - lo, 1e-3);
      for (uint32_t i = 0; i < npairs; ++i) {
        const double ramp = std::clamp((double(i) - lo) / span, 0.0, 1.0);
        f_[i] = f_[i] / c.factor * ramp + f_[i] * (1.0 - ramp);
      }
    }
  }
  uint32_t dim() const noexcept { return cfg_.dim; }
  uint32_t pairs() const noexcept { return cfg_.dim / 2; }
  double freq(uint32_t i) const { return f_.at(i); }
  std::span<const double> freqs() const noexcept { return f_; }
  const rope_config& config() const noexcept { return cfg_; }

  /// cos/sin of pos·f_i for every pair, interleaved: cs[2i] = cos, cs[2i+1] = sin (cs.size() == dim).
  /// Compute once per position, then rotate many heads with apply_rope_cs.
  void rotation(int64_t pos, std::span<double> cs) const {
    if (cs.size() != cfg_.dim) throw std::invalid_argument("rope_table::rotation: cs size != dim");
    const double p = double(pos);
    for (uint32_t i = 0; i < pairs(); ++i) {
      const double a = p * f_[i];
      cs[2 * i] = std::cos(a);
      cs[2 * i + 1] = std::sin(a);
    }
  }

 private:
  rope_config cfg_;
  std::vector<double> f_;
};

/// Rotate adjacent pairs of `tail` (size == cs.size() == dim) by precomputed cos/sin (see rope_table::rotation).
inline void apply_rope_cs(std::span<float> tail, std::span<const double> cs, bool inverse) {
  if (tail.size() != cs.size() || tail.size() % 2) throw std::invalid_argument("apply_rope_cs: size mismatch");
  const double sgn = inverse ? -1.0 : 1.0;
  float* x = tail.data();
  for (size_t i = 0; i < tail.size(); i += 2) {
    const double c = cs[i], s = sgn * cs[i + 1];
    const double a = x[i], b = x[i + 1];
    x[i] = float(a * c - b * s);
    x[i + 1] = float(a * s + b * c);
  }
}

/// Rotate `tail` (exactly table.dim() channels) to position pos; inverse = conjugate rotation.
inline void apply_rope(std::span<float> tail, int64_t pos, const rope_table& table, bool inverse) {
  if (tail.size() != table.dim()) throw std::invalid_argument("apply_rope: tail size != rope dim");
  const double p = double(pos);
  const double sgn = inverse ? -1.0 : 1.0;
  const std::span<const double> f = table.freqs();
  float* x = tail.data();
  for (size_t i = 0; i < f.size(); ++i) {
    const double ang = p * f[i];
    const double c = std::cos(ang), s = sgn * std::sin(ang);
    const double a = x[2 * i], b = x[2 * i + 1];
    x[2 * i] = float(a * c - b * s);
    x[2 * i + 1] = float(a * s + b * c);
  }
}

/// Rotate the LAST rope_dim channels of a head vector (e.g. q_h[448:512]); rope_dim must equal table.dim().
inline void apply_rope_last(std::span<float> vec, uint32_t rope_dim, int64_t pos, const rope_table& table,
                            bool inverse) {
  if (rope_dim > vec.size()) throw std::invalid_argument("apply_rope_last: rope_dim > vector size");
  apply_rope(vec.subspan(vec.size() - rope_dim), pos, table, inverse);
}

}  // namespace cmfx
