// The token-tile switch of the CPU kernels: a run-time token count mapped to a compile-time one, so that the
// accumulators of a tile of NT tokens stay in registers (a run-time-indexed array spilled them: 3x slower, measured
// on the AVX2 f32 kernel). Neutral header (no intrinsics): included by files compiled with and without -mavx2.
#pragma once

#include <cstdint>
#include <type_traits>

namespace cmfx::kernels {

/// Calls fn(std::integral_constant<int, NT>) with NT = nt in [1, 4] (nt > 4: 4; the callers' tiles hold ≤ 4 tokens).
template <class Fn>
inline void with_tile(uint64_t nt, Fn&& fn) {
  switch (nt) {
    case 1: fn(std::integral_constant<int, 1>{}); break;
    case 2: fn(std::integral_constant<int, 2>{}); break;
    case 3: fn(std::integral_constant<int, 3>{}); break;
    default: fn(std::integral_constant<int, 4>{}); break;
  }
}

}  // namespace cmfx::kernels
