#pragma once
/// @file stream_copy.hpp
/// @brief memcpy with non-temporal stores: for large copies into memory the CPU will not read again — the upload
///        rings the GPU's copy engine reads (write-combined or host-cached system memory) — where a plain memcpy's
///        stores first read every destination line (host-cached) or are combined less well (write-combined).
///
/// x86-64 (SSE2, part of the base ISA): 16-byte streaming stores of 64-byte blocks after an aligning head, memcpy
/// for the head, the tail and copies under 256 bytes, and an sfence at the end, so that the stores are visible
/// before whatever the calling thread does next (e.g. the join that precedes a queue submission). Elsewhere:
/// memcpy. The result equals memcpy's for non-overlapping ranges.
#include <cstddef>
#include <cstdint>
#include <cstring>

#if defined(__SSE2__)
#include <emmintrin.h>
#endif

namespace cmfx {

inline void stream_copy(void* dst, const void* src, size_t n) {
#if defined(__SSE2__)
  auto* d = static_cast<uint8_t*>(dst);
  const auto* s = static_cast<const uint8_t*>(src);
  const size_t head = (16 - (reinterpret_cast<uintptr_t>(d) & 15)) & 15;
  if (n < head + 256) {
    std::memcpy(d, s, n);
    return;
  }
  std::memcpy(d, s, head);
  d += head, s += head, n -= head;
  size_t i = 0;
  for (; i + 64 <= n; i += 64) {
    const __m128i a = _mm_loadu_si128(reinterpret_cast<const __m128i*>(s + i));
    const __m128i b = _mm_loadu_si128(reinterpret_cast<const __m128i*>(s + i + 16));
    const __m128i c = _mm_loadu_si128(reinterpret_cast<const __m128i*>(s + i + 32));
    const __m128i e = _mm_loadu_si128(reinterpret_cast<const __m128i*>(s + i + 48));
    _mm_stream_si128(reinterpret_cast<__m128i*>(d + i), a);
    _mm_stream_si128(reinterpret_cast<__m128i*>(d + i + 16), b);
    _mm_stream_si128(reinterpret_cast<__m128i*>(d + i + 32), c);
    _mm_stream_si128(reinterpret_cast<__m128i*>(d + i + 48), e);
  }
  std::memcpy(d + i, s + i, n - i);
  _mm_sfence();
#else
  std::memcpy(dst, src, n);
#endif
}

}  // namespace cmfx
