#pragma once
// Test helpers: hex strings <-> bytes, fresh random data.
#include <cstdint>
#include <random>
#include <string>
#include <vector>

namespace cmfx::test {

inline std::vector<uint8_t> from_hex(const std::string& s) {
  std::vector<uint8_t> out;
  int hi = -1;
  for (char ch : s) {
    int v;
    if (ch >= '0' && ch <= '9') v = ch - '0';
    else if (ch >= 'a' && ch <= 'f') v = ch - 'a' + 10;
    else if (ch >= 'A' && ch <= 'F') v = ch - 'A' + 10;
    else continue;  // spaces and separators
    if (hi < 0) hi = v;
    else {
      out.push_back(uint8_t(hi * 16 + v));
      hi = -1;
    }
  }
  return out;
}

inline std::string to_hex(const uint8_t* p, size_t n) {
  static const char* d = "0123456789abcdef";
  std::string s;
  for (size_t i = 0; i < n; ++i) {
    s += d[p[i] >> 4];
    s += d[p[i] & 15];
  }
  return s;
}
inline std::string to_hex(const std::vector<uint8_t>& v) { return to_hex(v.data(), v.size()); }

inline std::string hex64(uint64_t v) {
  char buf[17];
  std::snprintf(buf, sizeof buf, "%016llx", static_cast<unsigned long long>(v));
  return buf;
}

/// A fresh seed per run (printed by the caller on failure), so tests never settle on one lucky input.
inline uint64_t fresh_seed() { return std::random_device{}() ^ (uint64_t(std::random_device{}()) << 32); }

/// Gaussian weights with a few outliers (each value ×8 with probability outlier_rate), like real checkpoints.
inline std::vector<float> random_weights(size_t n, uint64_t seed, float sigma = 0.02f, float outlier_rate = 0.002f) {
  std::mt19937_64 rng(seed);
  std::normal_distribution<float> nd(0.0f, sigma);
  std::uniform_real_distribution<float> u(0.0f, 1.0f);
  std::vector<float> w(n);
  for (auto& x : w) {
    x = nd(rng);
    if (u(rng) < outlier_rate) x *= 8.0f;
  }
  return w;
}

}  // namespace cmfx::test
