#pragma once
/// @file act_q8.hpp
/// @brief Activations quantised to int8 in blocks of 32 for the integer-dot ("a8") GEMM path:
///        xq = round_half_even(x / sx) with sx = absmax / 127 per block (sx = 1 for an all-zero block), and the
///        block sums of xq. Each block's 32 bytes are stored permuted so that they pair byte-for-byte with the
///        way a weight format unpacks its group (see act_layout), which removes every shuffle from the kernel.
///
/// Error: one rounding of x to 8 bits per 32 values (relative step <= 1/254 of the block's absmax); the
/// resulting GEMM error is measured in tests/kernels/gemm_i8_test.cpp and documented in docs/FORMATS.md.
#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstdint>
#include <vector>

#include "cmfx/core/aligned.hpp"
#include "cmfx/formats/scale.hpp"

namespace cmfx {

/// How the 32 bytes of a block are ordered.
enum class act_layout : uint8_t {
  natural,  // x0..x31
  nibble,   // x0, x2, ..., x30, x1, x3, ..., x31: low nibbles (even elements) then high nibbles (odd elements)
  crumb,    // x0, x4, ..., x28, x1, x5, ..., x29, x2, ..., x3, ...: the four 2-bit planes of q2tp
};

/// Scratch owned by the caller and reused: vectors grow once, never shrink; each starts on a cache line (the kernels
/// load them 64 bytes at a time).
struct act_q8 {
  act_layout layout = act_layout::natural;
  uint64_t n = 0, cols = 0, blocks = 0;  // blocks per token = cols / 32
  aligned_vector<int8_t> q;              // [n, cols] permuted per block
  aligned_vector<float> scale;           // [n, blocks]
  aligned_vector<int32_t> bsum;          // [n, blocks]
  /// Which quantisation filled the buffers: a process-wide unique, non-zero value per quantiser call
  /// (next_act_generation), 0 for unknown contents. The integer kernels derive a per-thread rearrangement of the
  /// activations once per call of the quantiser, not once per range of rows they are handed (a row tail or a
  /// chunked MoE hands one worker many ranges), keyed by this value: code that writes q, scale or bsum by hand must
  /// set it to 0.
  uint64_t generation = 0;
};

/// A fresh non-zero act_q8::generation.
inline uint64_t next_act_generation() noexcept {
  static std::atomic<uint64_t> counter{0};
  return counter.fetch_add(1, std::memory_order_relaxed) + 1;
}

/// Whether a layout derived from activations of generation `seen` must be derived again for `a` (always for
/// generation 0). The kernels keep `seen` per thread beside their derived copy and set it once the copy is made.
inline bool act_stale(const act_q8& a, uint64_t seen) noexcept { return a.generation == 0 || a.generation != seen; }

inline constexpr uint32_t act_block = 32;

inline uint32_t act_position(act_layout l, uint32_t j) noexcept {
  switch (l) {
    case act_layout::natural: return j;
    case act_layout::nibble: return (j & 1) * 16 + j / 2;
    case act_layout::crumb: return (j & 3) * 8 + j / 4;
  }
  return j;
}

/// Quantises X [n, cols] (cols % 32 == 0) into `out`.
inline void quantize_act_q8(const float* X, uint64_t n, uint64_t cols, act_layout layout, act_q8& out) {
  out.generation = next_act_generation();
  out.layout = layout;
  out.n = n;
  out.cols = cols;
  out.blocks = cols / act_block;
  if (out.q.size() < n * cols) out.q.resize(n * cols);
  if (out.scale.size() < n * out.blocks) out.scale.resize(n * out.blocks);
  if (out.bsum.size() < n * out.blocks) out.bsum.resize(n * out.blocks);
  uint32_t pos[act_block];
  for (uint32_t j = 0; j < act_block; ++j) pos[j] = act_position(layout, j);
  for (uint64_t t = 0; t < n; ++t)
    for (uint64_t b = 0; b < out.blocks; ++b) {
      const float* x = X + t * cols + b * act_block;
      float amax = 0.0f;
      for (uint32_t j = 0; j < act_block; ++j) amax = std::max(amax, std::fabs(x[j]));
      const float sx = amax > 0.0f ? amax / 127.0f : 1.0f, inv = 1.0f / sx;
      int8_t* q = out.q.data() + t * cols + b * act_block;
      int32_t s = 0;
      for (uint32_t j = 0; j < act_block; ++j) {
        const int v = int(std::clamp(round_half_even(x[j] * inv), -127.0f, 127.0f));
        q[pos[j]] = int8_t(v);
        s += v;
      }
      out.scale[t * out.blocks + b] = sx;
      out.bsum[t * out.blocks + b] = s;
    }
}

}  // namespace cmfx
