#pragma once
/// @file rng.hpp
/// @brief The sampler's random numbers: identical on every platform for a given seed.
///
/// The engine is MT19937-64 — the sequence of std::mt19937_64, which the C++ standard fixes (the 10000th value of
/// a default-seeded engine is 9981545732273789042; tests/sample check every value against std::mt19937_64) —
/// written out here so that its state is open: a device sampler (shaders/sample.comp) continues the same stream
/// from the state the host hands it (mt19937_64_state). The std::*_distribution classes are not used: their
/// algorithms are implementation-defined, so the conversions are written here:
///   uniform()     = (x >> 11) · 2^-53 — the top 53 bits as a double in [0, 1), exact, every value equally likely;
///   exponential() = −log(1 − uniform()) — Exp(1) by inversion, in [0, ∞).
/// MT19937-64's constants (Matsumoto & Nishimura; the standard's [rand.predef] mt19937_64): word size 64, n = 312,
/// m = 156, r = 31, a = 0xB5026F5AA96619E9, tempering (u, d) = (29, 0x5555555555555555), (s, b) = (17,
/// 0x71D67FFFEDA60000), (t, c) = (37, 0xFFF7EEE000000000), l = 43; seeding multiplier f = 6364136223846793005.
#include <array>
#include <cmath>
#include <cstdint>

namespace cmfx {

/// The whole state of MT19937-64: the 312 words and the index of the next one to temper (312: twist first).
struct mt19937_64_state {
  static constexpr uint32_t n = 312, m = 156;
  std::array<uint64_t, n> x{};
  uint64_t index = n;
};

class mt19937_64_engine {
 public:
  static constexpr uint64_t default_seed = 5489u;
  explicit mt19937_64_engine(uint64_t seed = default_seed) { this->seed(seed); }
  void seed(uint64_t s) {
    st_.x[0] = s;
    for (uint32_t i = 1; i < mt19937_64_state::n; ++i)
      st_.x[i] = 6364136223846793005ull * (st_.x[i - 1] ^ (st_.x[i - 1] >> 62)) + i;
    st_.index = mt19937_64_state::n;
  }
  uint64_t operator()() {
    if (st_.index >= mt19937_64_state::n) twist();
    uint64_t z = st_.x[st_.index++];
    z ^= (z >> 29) & 0x5555555555555555ull;
    z ^= (z << 17) & 0x71D67FFFEDA60000ull;
    z ^= (z << 37) & 0xFFF7EEE000000000ull;
    z ^= z >> 43;
    return z;
  }
  void discard(uint64_t k) {
    while (k--) (void)(*this)();
  }
  const mt19937_64_state& state() const noexcept { return st_; }
  void set_state(const mt19937_64_state& s) noexcept { st_ = s; }

 private:
  void twist() {
    constexpr uint32_t n = mt19937_64_state::n, m = mt19937_64_state::m;
    constexpr uint64_t upper = ~uint64_t{0} << 31, lower = ~upper, a = 0xB5026F5AA96619E9ull;
    auto mix = [&](uint64_t hi, uint64_t lo, uint64_t far) {
      const uint64_t y = (hi & upper) | (lo & lower);
      return far ^ (y >> 1) ^ ((y & 1) ? a : 0);
    };
    for (uint32_t k = 0; k < n - m; ++k) st_.x[k] = mix(st_.x[k], st_.x[k + 1], st_.x[k + m]);
    for (uint32_t k = n - m; k < n - 1; ++k) st_.x[k] = mix(st_.x[k], st_.x[k + 1], st_.x[k + m - n]);
    st_.x[n - 1] = mix(st_.x[n - 1], st_.x[0], st_.x[m - 1]);
    st_.index = 0;
  }
  mt19937_64_state st_;
};

class sample_rng {
 public:
  explicit sample_rng(uint64_t seed = 0) : eng_(seed) {}
  void seed(uint64_t s) { eng_.seed(s); }
  uint64_t next() { return eng_(); }
  /// Uniform in [0, 1) with 53 random bits.
  double uniform() { return static_cast<double>(eng_() >> 11) * 0x1.0p-53; }
  /// Exp(1), for Gumbel-max style sampling (argmax p_i / E_i).
  double exponential() { return -std::log1p(-uniform()); }
  /// The engine's state (what a device sampler continues from) and back.
  const mt19937_64_state& state() const noexcept { return eng_.state(); }
  void set_state(const mt19937_64_state& s) noexcept { eng_.set_state(s); }

 private:
  mt19937_64_engine eng_;
};

}  // namespace cmfx
