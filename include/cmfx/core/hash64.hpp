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

#if defined(__x86_64__)
#include <immintrin.h>
#endif

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
#if defined(__x86_64__)
namespace detail {
/// Low 64 bits of a*b per lane for a constant b, from three 32x32->64 multiplies (AVX2 has no 64-bit mullo).
__attribute__((target("avx2"))) inline __m256i mul64_const(__m256i a, __m256i b_lo, __m256i b_hi) noexcept {
  const __m256i lo = _mm256_mul_epu32(a, b_lo);
  const __m256i cross = _mm256_add_epi64(_mm256_mul_epu32(_mm256_srli_epi64(a, 32), b_lo), _mm256_mul_epu32(a, b_hi));
  return _mm256_add_epi64(lo, _mm256_slli_epi64(cross, 32));
}
__attribute__((target("avx2"))) inline __m256i fmix64x4(__m256i x) noexcept {
  const __m256i c1l = _mm256_set1_epi64x(int64_t(0xED558CCDull)), c1h = _mm256_set1_epi64x(int64_t(0xFF51AFD7ull));
  const __m256i c2l = _mm256_set1_epi64x(int64_t(0x1A85EC53ull)), c2h = _mm256_set1_epi64x(int64_t(0xC4CEB9FEull));
  x = _mm256_xor_si256(x, _mm256_srli_epi64(x, 33));
  x = mul64_const(x, c1l, c1h);
  x = _mm256_xor_si256(x, _mm256_srli_epi64(x, 33));
  x = mul64_const(x, c2l, c2h);
  return _mm256_xor_si256(x, _mm256_srli_epi64(x, 33));
}
/// The 32-byte-block part of hash64_partial, four words per lane step (same terms, XOR order irrelevant).
__attribute__((target("avx2"))) inline uint64_t hash64_blocks_avx2(const uint8_t* p, size_t blocks,
                                                                   uint64_t gi) noexcept {
  const __m256i g4 = _mm256_set1_epi64x(int64_t(4 * hash64_golden));
  __m256i idx = _mm256_setr_epi64x(int64_t(gi), int64_t(gi + hash64_golden), int64_t(gi + 2 * hash64_golden),
                                   int64_t(gi + 3 * hash64_golden));
  __m256i a0 = _mm256_setzero_si256(), a1 = _mm256_setzero_si256();
  size_t b = 0;
  for (; b + 2 <= blocks; b += 2) {
    const __m256i w0 = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p + 32 * b));
    const __m256i w1 = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p + 32 * b + 32));
    a0 = _mm256_xor_si256(a0, _mm256_xor_si256(fmix64x4(w0), idx));
    idx = _mm256_add_epi64(idx, g4);
    a1 = _mm256_xor_si256(a1, _mm256_xor_si256(fmix64x4(w1), idx));
    idx = _mm256_add_epi64(idx, g4);
  }
  if (b < blocks) {
    const __m256i w0 = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p + 32 * b));
    a0 = _mm256_xor_si256(a0, _mm256_xor_si256(fmix64x4(w0), idx));
  }
  alignas(32) uint64_t lanes[4];
  _mm256_store_si256(reinterpret_cast<__m256i*>(lanes), _mm256_xor_si256(a0, a1));
  return lanes[0] ^ lanes[1] ^ lanes[2] ^ lanes[3];
}
inline bool hash64_use_avx2() noexcept {
  static const bool yes = __builtin_cpu_supports("avx2");
  return yes;
}
}  // namespace detail
#endif

inline uint64_t hash64_partial(const uint8_t* data, size_t len, uint64_t first_word) noexcept {
  const uint8_t* p = data;
  const uint8_t* const end4 = data + len / 32 * 32;
  const uint8_t* const end1 = data + len / 8 * 8;
  // i * golden is carried as a running sum (wrapping), which saves one multiply per word.
  uint64_t gi = first_word * hash64_golden;
  constexpr uint64_t g1 = hash64_golden, g2 = 2 * hash64_golden, g3 = 3 * hash64_golden, g4 = 4 * hash64_golden;
  uint64_t a0 = 0, a1 = 0, a2 = 0, a3 = 0;
#if defined(__x86_64__)
  // AVX2: fmix64 on four words per instruction (the scalar loop is bound by the one 64-bit multiplier).
  if (len >= 256 && detail::hash64_use_avx2()) {
    const size_t blocks = size_t(end4 - p) / 32;
    a0 = detail::hash64_blocks_avx2(p, blocks, gi);
    p = end4;
    gi += blocks * g4;
  }
#endif
  // Four independent lanes keep both multipliers busy; the XOR makes the order irrelevant.
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
