#pragma once
/// @file prefetch.hpp
/// @brief Software prefetch for the CPU kernels that stream a matrix's rows (gemm_avx512_i8.hpp,
///        gemm_avx512_8bit.hpp, the AVX2 q4tp / MXFP4 kernel of gemm_avx2_i8.hpp): the cache lines `Distance`
///        bytes ahead of the bytes being summed (past a row's end, the next row's: every format's value bytes of
///        consecutive rows follow each other). A prefetch never faults, so the lines past a matrix's end are
///        harmless; the address is formed as an integer, so no pointer past the array is.
///        Why: on dev's Zen 4 the hardware prefetchers alone left one thread streaming a 4096 × 8192 matrix at
///        10-14 GB/s where the same int8 kernels sum a cache-resident one at 24-35 GB/s; 1 KiB ahead measured best
///        of 256 B - 2 KiB (docs/PERF.md "Twenty-eighth session"). The AVX2 kernels did not prefetch then: with
///        it they measured within dev's noise there (q2tp 697-1062 against 741-1086 µs, q4tp and MXFP4 no better),
///        and again on the AVX2-only Zen 3 guest dev became (1 KiB ahead, "Twenty-ninth session"). Once the AVX2
///        q4tp / MXFP4 kernel's per-block cost fell (thirty-ninth session, no lane permute) 2 KiB ahead gained
///        8-16 % at 2 threads on that guest, alternated A/B (1-4 KiB tried); q2tp, compute-bound there, did not
///        move and has none: avx2_prefetch_distance (docs/PERF.md "Thirty-ninth session").
#include <immintrin.h>

#include <cstdint>

namespace cmfx::kernels {

inline constexpr uint64_t prefetch_distance = 1024;
inline constexpr uint64_t avx2_prefetch_distance = 2048;
/// The AVX-512 int8 kernels' (q2tp, q4tp, MXFP4, q8_row; one stream per row pass). q2tp first: its 16 groups take
/// 128 value bytes (q4tp's 256), so 1 KiB ahead was half the time ahead. On the Zen 5 dev, 2 threads streaming
/// 16384 × 8192 from DRAM, in one process against the 1 KiB build: 2 KiB 0.85–0.88 of its time, 3 KiB 0.82–0.88,
/// 4 KiB 0.82–0.84, 6 KiB 0.83–0.91, 8 KiB 0.89–0.91 (docs/PERF.md "Forty-second session"). Then the others, on
/// the Intel Xeon dev guest, 2 threads, 4096 × 8192, four alternated rounds against 1 KiB: q4tp 708–795 µs
/// against 790–876, MXFP4 664–681 against 754–771, q8_row 1104–1223 against 1242–1325 ("Fifty-ninth session").
/// The FP8 kernels keep prefetch_distance: they stream four rows at once, 1 KiB ahead in each (4 KiB measured no
/// better).
inline constexpr uint64_t avx512_i8_prefetch_distance = 4096;

/// `lines` consecutive cache lines from p + Distance into L1.
template <uint64_t Distance = prefetch_distance>
inline void prefetch_ahead(const uint8_t* p, int lines = 1) noexcept {
  const uintptr_t a = reinterpret_cast<uintptr_t>(p) + Distance;
  for (int l = 0; l < lines; ++l) _mm_prefetch(reinterpret_cast<const char*>(a + 64 * uintptr_t(l)), _MM_HINT_T0);
}

}  // namespace cmfx::kernels
