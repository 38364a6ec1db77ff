#pragma once
/// @file hash64.hpp
/// @brief CMF's hash64 (cmf-format.md §1.8; infosave2007/cmf:crates/cortiq-core/src/hash.rs).
///
/// hash64(b) = fmix64(acc ^ len(b)) with acc = XOR over the 8-byte LE words w_i of fmix64(w_i) ^ (i * golden).
/// Because the accumulator is a XOR of independent per-word terms, any split of the input into word-aligned
/// chunks can be hashed in parallel and the partial accumulators XORed together (hash64_partial).
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <span>

namespace cmfx {

inline constexpr uint64_t hash64_golden = 0x9E3779B97F4A7C15ull;

constexpr uint64_t fmix64(uint64_t x) noexcept {
  x ^= x >> 33;
  x *= 0xFF51AFD7ED558CCDull;
  x ^= x >> 33;
  x *= 0xC4CEB9FE1A85EC53ull;
  x ^= x >> 33;
  return x;
}

/// XOR accumulator of the words of `data`, numbered from `first_word`. `data` must start on a word boundary of
/// the whole input; only the last chunk may end in a partial word (zero-padded).
inline uint64_t hash64_partial(const uint8_t* data, size_t len, uint64_t first_word) noexcept {
  const uint8_t* p = data;
  const uint8_t* const end4 = data + len / 32 * 32;
  const uint8_t* const end1 = data + len / 8 * 8;
  // i * golden is carried as a running sum (wrapping), which saves one multiply per word.
  uint64_t gi = first_word * hash64_golden;
  constexpr uint64_t g1 = hash64_golden, g2 = 2 * hash64_golden, g3 = 3 * hash64_golden, g4 = 4 * hash64_golden;
  // Four independent lanes keep both multipliers busy; the XOR makes the order irrelevant.
  uint64_t a0 = 0, a1 = 0, a2 = 0, a3 = 0;
  for (; p != end4; p += 32, gi += g4) {
    uint64_t w[4];
    std::memcpy(w, p, 32);
    a0 ^= fmix64(w[0]) ^ gi;
    a1 ^= fmix64(w[1]) ^ (gi + g1);
    a2 ^= fmix64(w[2]) ^ (gi + g2);
    a3 ^= fmix64(w[3]) ^ (gi + g3);
  }
  uint64_t acc = a0 ^ a1 ^ a2 ^ a3;
  for (; p != end1; p += 8, gi += g1) {
    uint64_t w;
    std::memcpy(&w, p, 8);
    acc ^= fmix64(w) ^ gi;
  }
  if (const size_t tail = len % 8) {
    uint64_t w = 0;
    std::memcpy(&w, p, tail);
    acc ^= fmix64(w) ^ gi;
  }
  return acc;
}

/// Finishes a hash from the XOR of all partial accumulators and the total length in bytes.
constexpr uint64_t hash64_finish(uint64_t acc, uint64_t total_len) noexcept { return fmix64(acc ^ total_len); }

inline uint64_t hash64(const uint8_t* data, size_t len) noexcept {
  return hash64_finish(hash64_partial(data, len, 0), len);
}
inline uint64_t hash64(std::span<const uint8_t> b) noexcept { return hash64(b.data(), b.size()); }

}  // namespace cmfx
