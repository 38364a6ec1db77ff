#pragma once
/// @file read_bandwidth.hpp
/// @brief Memory-bandwidth roofline measured in the same run as the benchmark it normalises (cmfx-bench-cpu,
///        cmfx-bench-verify, `cmfx bench --backend cpu`): a streaming read (sum) of a buffer much larger than the
///        last-level cache, on a thread pool like the one that runs the kernels (same thread count and pinning). A
///        matvec only reads its weights, so a read — not a copy — is the right ceiling. The kernels prefetch in
///        software (kernels/prefetch.hpp), so the ceiling is the best of a plain read and reads prefetching 1, 2,
///        4 and 8 KiB ahead: on the 2026-12-07 dev host (an Intel Xeon guest, 2 vCPUs) the plain read reached
///        10 GB/s on one thread and 19 on two, 4 KiB ahead 14-15 and 28-31 — against the plain read the int8
///        matvecs measured up to 1.09 of the "roofline" (docs/PERF.md "Fifty-ninth session").
#include <algorithm>
#include <chrono>
#include <cstdint>
#include <vector>

#include "cmfx/core/thread_pool.hpp"

namespace cmfx {

/// The best rate of `reps` timed reads of buf by the pool, each thread summing its chunks 1 KiB at a time and,
/// unless Distance is 0, prefetching the 16 cache lines Distance bytes ahead first (as the kernels prefetch a
/// block's lines at once: one line per 64-byte step read ~5 % less on the dev host of docs/PERF.md "Fifty-ninth
/// session").
template <uint64_t Distance>
double best_read_rate(thread_pool& pool, const std::vector<uint64_t>& buf, std::vector<uint64_t>& sums, int reps) {
  constexpr uint64_t step = 128;  // 64-bit words: 1 KiB
  double best = 0;
  for (int r = 0; r < reps; ++r) {
    const auto t0 = std::chrono::steady_clock::now();
    pool.run(buf.size(), [&](uint64_t lo, uint64_t hi, unsigned w) {
      uint64_t a = 0, b = 0, c = 0, d = 0;
      uint64_t i = lo;
      for (; i + step <= hi; i += step) {
        if constexpr (Distance > 0) {  // integer arithmetic: no pointer past the buffer is formed
          const uintptr_t ahead = reinterpret_cast<uintptr_t>(buf.data() + i) + Distance;
          for (uintptr_t l = 0; l < 8 * step; l += 64)
            __builtin_prefetch(reinterpret_cast<const void*>(ahead + l), 0, 3);
        }
        for (uint64_t j = i; j < i + step; j += 8) {
          a += buf[j] + buf[j + 4];
          b += buf[j + 1] + buf[j + 5];
          c += buf[j + 2] + buf[j + 6];
          d += buf[j + 3] + buf[j + 7];
        }
      }
      for (; i < hi; ++i) a += buf[i];
      sums[8 * w] += a + b + c + d;
    }, 4096);
    const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    best = std::max(best, double(buf.size() * 8) / s);
  }
  return best;
}

/// The read roofline in bytes/s over `bytes`: the best of `reps` reads for each way of reading (plain, and
/// prefetching 1, 2, 4 and 8 KiB ahead), after one untimed pass (first touch of fresh pages is not a read; the
/// pass also warms the TLB and the page tables).
inline double measure_read_bandwidth(thread_pool& pool, uint64_t bytes, int reps = 5) {
  std::vector<uint64_t> buf(bytes / 8);
  pool.run(buf.size(), [&](uint64_t b, uint64_t e, unsigned) {
    for (uint64_t i = b; i < e; ++i) buf[i] = i * 0x9E3779B97F4A7C15ull;
  }, 4096);
  std::vector<uint64_t> sums(pool.size() * 8, 0);  // one cache line per worker
  best_read_rate<0>(pool, buf, sums, 1);
  const double best = std::max({best_read_rate<0>(pool, buf, sums, reps), best_read_rate<1024>(pool, buf, sums, reps),
                                best_read_rate<2048>(pool, buf, sums, reps),
                                best_read_rate<4096>(pool, buf, sums, reps),
                                best_read_rate<8192>(pool, buf, sums, reps)});
  volatile uint64_t sink = 0;
  for (auto x : sums) sink = sink + x;
  return best;
}

}  // namespace cmfx
