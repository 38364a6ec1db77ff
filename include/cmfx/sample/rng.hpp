#pragma once
/// @file rng.hpp
/// @brief The sampler's random numbers: identical on every platform for a given seed.
///
/// The engine is std::mt19937_64, whose output sequence the C++ standard fixes (the 10000th value of a
/// default-seeded engine is 9981545732273789042). The std::*_distribution classes are not used: their algorithms
/// are implementation-defined, so the conversions are written here:
///   uniform()     = (x >> 11) · 2^-53 — the top 53 bits as a double in [0, 1), exact, every value equally likely;
///   exponential() = −log(1 − uniform()) — Exp(1) by inversion, in [0, ∞).
#include <cmath>
#include <cstdint>
#include <random>

namespace cmfx {

class sample_rng {
 public:
  explicit sample_rng(uint64_t seed = 0) : eng_(seed) {}
  void seed(uint64_t s) { eng_.seed(s); }
  uint64_t next() { return eng_(); }
  /// Uniform in [0, 1) with 53 random bits.
  double uniform() { return static_cast<double>(eng_() >> 11) * 0x1.0p-53; }
  /// Exp(1), for Gumbel-max style sampling (argmax p_i / E_i).
  double exponential() { return -std::log1p(-uniform()); }

 private:
  std::mt19937_64 eng_;
};

}  // namespace cmfx
