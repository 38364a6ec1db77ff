#pragma once
// Memory-bandwidth rooflines measured in the same run as the benchmark they normalise:
// a streaming read (sum of a buffer much larger than the last-level cache) and memcpy.
#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstring>
#include <thread>
#include <vector>

namespace cmfx::bench {

/// Best-of-`reps` read bandwidth in bytes/s over `bytes` (default 1 GiB), summed with `threads` threads.
inline double measure_read_bandwidth(unsigned threads, uint64_t bytes = 1ull << 30, int reps = 3) {
  std::vector<uint64_t> buf(bytes / 8);
  for (size_t i = 0; i < buf.size(); ++i) buf[i] = i * 0x9E3779B97F4A7C15ull;
  double best = 0;
  for (int r = 0; r < reps; ++r) {
    std::vector<uint64_t> sums(threads, 0);
    const auto t0 = std::chrono::steady_clock::now();
    std::vector<std::thread> pool;
    for (unsigned t = 0; t < threads; ++t)
      pool.emplace_back([&, t] {
        const size_t n = buf.size(), lo = n * t / threads, hi = n * (t + 1) / threads;
        uint64_t a = 0, b = 0, c = 0, d = 0;
        size_t i = lo;
        for (; i + 4 <= hi; i += 4) {
          a += buf[i];
          b += buf[i + 1];
          c += buf[i + 2];
          d += buf[i + 3];
        }
        for (; i < hi; ++i) a += buf[i];
        sums[t] = a + b + c + d;
      });
    for (auto& p : pool) p.join();
    const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    volatile uint64_t sink = 0;
    for (auto x : sums) sink = sink + x;
    best = std::max(best, double(bytes) / s);
  }
  return best;
}

}  // namespace cmfx::bench
