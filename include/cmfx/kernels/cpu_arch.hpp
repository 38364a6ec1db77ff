#pragma once
/// @file cpu_arch.hpp
/// @brief CPU instruction-set levels cmfx compiles kernels for, and run-time detection of the best one.
#include <string_view>

namespace cmfx {

/// Ordered: a higher level can run everything a lower one can.
enum class cpu_arch { generic = 0, avx2 = 1, avx512 = 2, avx512_gfni = 3 };
inline constexpr int cpu_arch_count = 4;

inline std::string_view cpu_arch_name(cpu_arch a) noexcept {
  switch (a) {
    case cpu_arch::generic: return "generic";
    case cpu_arch::avx2: return "avx2+fma+f16c";
    case cpu_arch::avx512: return "avx512f+bw+vl+vnni";
    case cpu_arch::avx512_gfni: return "avx512f+bw+vl+vnni+gfni";
  }
  return "?";
}

/// Whether this CPU can run kernels compiled for `a`.
inline bool cpu_supports(cpu_arch a) noexcept {
#if defined(__x86_64__)
  switch (a) {
    case cpu_arch::generic: return true;
    case cpu_arch::avx2:
      return __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma") && __builtin_cpu_supports("f16c");
    case cpu_arch::avx512:  // everything avx2 needs, plus the 512-bit integer dot products
      return cpu_supports(cpu_arch::avx2) && __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
             __builtin_cpu_supports("avx512vl") && __builtin_cpu_supports("avx512vnni");
    case cpu_arch::avx512_gfni:  // plus GF(2) affine byte transforms (q2tp's crumbs in one instruction each)
      return cpu_supports(cpu_arch::avx512) && __builtin_cpu_supports("gfni");
  }
  return false;
#else
  return a == cpu_arch::generic;
#endif
}

inline cpu_arch best_cpu_arch() noexcept {
  if (cpu_supports(cpu_arch::avx512_gfni)) return cpu_arch::avx512_gfni;
  if (cpu_supports(cpu_arch::avx512)) return cpu_arch::avx512;
  return cpu_supports(cpu_arch::avx2) ? cpu_arch::avx2 : cpu_arch::generic;
}

}  // namespace cmfx
