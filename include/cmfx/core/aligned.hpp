#pragma once
/// @file aligned.hpp
/// @brief cmfx::aligned_vector<T>: a std::vector whose storage starts on a cache line (64 bytes).
///
/// The SIMD kernels load their activation scratch (act_q8's bytes, scales and block sums, and the rearrangements
/// derived from them) 64 bytes at a time at offsets that are multiples of 64. A plain std::vector only promises
/// 16 bytes, so every such 512-bit load could straddle two cache lines: on dev's Zen 5 that made the q2tp int8
/// matvec 1.2-1.3x slower from DRAM and from cache (docs/PERF.md, "Forty-fifth session").
#include <cstddef>
#include <new>
#include <vector>

namespace cmfx {

/// The alignment of cmfx's kernel scratch: one cache line.
inline constexpr std::size_t scratch_alignment = 64;

/// A standard allocator whose blocks start at a multiple of A bytes (operator new with std::align_val_t).
template <class T, std::size_t A = scratch_alignment>
struct aligned_allocator {
  static_assert(A >= alignof(T) && (A & (A - 1)) == 0, "the alignment must be a power of two, at least alignof(T)");
  using value_type = T;
  template <class U>
  struct rebind {
    using other = aligned_allocator<U, A>;
  };
  aligned_allocator() noexcept = default;
  template <class U>
  aligned_allocator(const aligned_allocator<U, A>&) noexcept {}
  T* allocate(std::size_t n) { return static_cast<T*>(::operator new(n * sizeof(T), std::align_val_t(A))); }
  void deallocate(T* p, std::size_t) noexcept { ::operator delete(p, std::align_val_t(A)); }
  template <class U>
  bool operator==(const aligned_allocator<U, A>&) const noexcept {
    return true;
  }
};

/// A vector of T whose data() is a multiple of 64 bytes.
template <class T>
using aligned_vector = std::vector<T, aligned_allocator<T>>;

}  // namespace cmfx
