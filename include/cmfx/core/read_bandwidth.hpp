#pragma once
/// @file read_bandwidth.hpp
/// @brief Memory-bandwidth roofline measured in the same run as the benchmark it normalises (cmfx-bench-cpu,
///        cmfx-bench-verify, `cmfx bench --backend cpu`): a streaming read (sum) of a buffer much larger than the
///        last-level cache, on a thread pool like the one that runs the kernels (same thread count and pinning). A
///        matvec only reads its weights, so a read — not a copy — is the right ceiling.
#include <algorithm>
#include <chrono>
#include <cstdint>
#include <vector>

#include "cmfx/core/thread_pool.hpp"

namespace cmfx {

/// Best-of-`reps` read bandwidth in bytes/s over `bytes`, after one untimed pass (first touch of fresh pages
/// is not a read).
inline double measure_read_bandwidth(thread_pool& pool, uint64_t bytes, int reps = 5) {
  std::vector<uint64_t> buf(bytes / 8);
  pool.run(buf.size(), [&](uint64_t b, uint64_t e, unsigned) {
    for (uint64_t i = b; i < e; ++i) buf[i] = i * 0x9E3779B97F4A7C15ull;
  }, 4096);
  std::vector<uint64_t> sums(pool.size() * 8, 0);  // one cache line per worker
  double best = 0;
  for (int r = 0; r <= reps; ++r) {
    const auto t0 = std::chrono::steady_clock::now();
    pool.run(buf.size(), [&](uint64_t lo, uint64_t hi, unsigned w) {
      uint64_t a = 0, b = 0, c = 0, d = 0;
      uint64_t i = lo;
      for (; i + 4 <= hi; i += 4) {
        a += buf[i];
        b += buf[i + 1];
        c += buf[i + 2];
        d += buf[i + 3];
      }
      for (; i < hi; ++i) a += buf[i];
      sums[8 * w] = a + b + c + d;
    }, 4096);
    const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    if (r > 0) best = std::max(best, double(bytes) / s);  // r == 0 warms the TLB and the page tables
  }
  volatile uint64_t sink = 0;
  for (auto x : sums) sink = sink + x;
  return best;
}

}  // namespace cmfx
