#include "cmfx/core/thread_pool.hpp"

#include <gtest/gtest.h>

#include <atomic>
#include <vector>

namespace {

using cmfx::thread_pool;

/// Every index of [0, n) visited exactly once, by a worker id below the pool's size.
template <class Run>
void expect_cover(thread_pool& pool, uint64_t n, Run&& run) {
  std::vector<std::atomic<int>> hits(n);
  std::atomic<bool> bad_worker{false};
  run([&](uint64_t b, uint64_t e, unsigned w) {
    if (w >= pool.size()) bad_worker = true;
    for (uint64_t i = b; i < e; ++i) hits[i].fetch_add(1);
  });
  for (uint64_t i = 0; i < n; ++i) ASSERT_EQ(hits[i].load(), 1) << "index " << i << " of " << n;
  EXPECT_FALSE(bad_worker.load());
}

TEST(ThreadPool, StaticRangesCoverEveryIndexOnce) {
  thread_pool pool(3);
  for (uint64_t n : {1u, 2u, 7u, 64u, 1001u})
    for (uint64_t grain : {1u, 8u, 13u})
      expect_cover(pool, n, [&](auto fn) { pool.run(n, fn, grain); });
}

TEST(ThreadPool, ChunksCoverEveryIndexOnceWithRaggedEnds) {
  thread_pool pool(4);
  for (uint64_t n : {1u, 5u, 63u, 64u, 65u, 4608u})
    for (uint64_t chunk : {0u, 1u, 7u, 64u, 10000u})  // 0 is taken as 1
      expect_cover(pool, n, [&](auto fn) { pool.run_chunks(n, fn, chunk); });
}

TEST(ThreadPool, ChunksAreBalancedAcrossWorkersThatAreFree) {
  // Worker 0 (the caller) is held up in its first chunk until every other chunk is done: the others must take them.
  thread_pool pool(3);
  const uint64_t n = 60;
  std::atomic<uint64_t> done{0};
  std::vector<std::atomic<int>> by(3);
  bool held = false;  // worker 0's only
  pool.run_chunks(n, [&](uint64_t b, uint64_t e, unsigned w) {
    if (w == 0 && !held) {
      held = true;
      while (done.load() < n - (e - b)) cmfx::spin_pause();
    }
    by[w].fetch_add(int(e - b));
    done.fetch_add(e - b);
  }, 1);
  EXPECT_EQ(done.load(), n);
  EXPECT_LE(by[0].load(), 1) << "the held worker took only its first chunk";
  EXPECT_GE(by[1].load() + by[2].load(), int(n) - 1);
}

TEST(ThreadPool, RowTailCoversEveryIndexOnce) {
  for (unsigned threads : {1u, 2u, 3u, 5u}) {
    thread_pool pool(threads);
    for (double share : {0.0, 0.1, 0.25, 0.5, 0.9, 2.0}) {  // 2.0 is clamped to 0.9
      pool.set_row_tail(share);
      for (uint64_t n : {1u, 7u, 8u, 9u, 64u, 1001u, 4096u})
        for (uint64_t grain : {1u, 8u, 13u}) {
          std::vector<std::atomic<int>> hits(n);
          std::atomic<bool> bad{false};
          pool.run_rows(n, [&](uint64_t b, uint64_t e, unsigned w) {
            if (w >= pool.size() || b >= e || e > n || (b % grain != 0)) bad = true;
            for (uint64_t i = b; i < e; ++i) hits[i].fetch_add(1);
          }, grain);
          for (uint64_t i = 0; i < n; ++i)
            ASSERT_EQ(hits[i].load(), 1) << "index " << i << " of " << n << ", grain " << grain << ", share " << share
                                         << ", " << threads << " threads";
          EXPECT_FALSE(bad.load()) << "a range not aligned to its grain, empty, or past n; or a bad worker id";
        }
    }
    EXPECT_DOUBLE_EQ(pool.row_tail(), 0.9);
  }
}

TEST(ThreadPool, RowTailGoesToTheWorkersThatAreFree) {
  // Worker 0 (the caller) is held up in its static range until every other item is done: the whole tail must go
  // to the others, and worker 0 keeps exactly its static range.
  thread_pool pool(3);
  const uint64_t n = 300;
  pool.set_row_tail(0.5);
  std::atomic<uint64_t> done{0};
  std::vector<std::atomic<int>> by(3);
  bool held = false;  // worker 0's only
  uint64_t first = 0;
  pool.run_rows(n, [&](uint64_t b, uint64_t e, unsigned w) {
    if (w == 0 && !held) {
      held = true;
      first = e - b;
      while (done.load() < n - (e - b)) cmfx::spin_pause();
    }
    by[w].fetch_add(int(e - b));
    done.fetch_add(e - b);
  }, 1);
  EXPECT_EQ(done.load(), n);
  EXPECT_EQ(first, 50u) << "worker 0's static range: a third of the head of 150";
  EXPECT_EQ(by[0].load(), 50) << "the held worker took none of the tail";
  EXPECT_EQ(by[1].load() + by[2].load(), 250);
}

TEST(ThreadPool, TraceTimesEveryRun) {
  thread_pool pool(2);
  pool.set_trace(true);
  std::atomic<uint64_t> sum{0};
  for (int r = 0; r < 5; ++r) pool.run(1000, [&](uint64_t b, uint64_t e, unsigned) {
    uint64_t s = 0;
    for (uint64_t i = b; i < e; ++i) s += i * i;
    sum.fetch_add(s);
  });
  pool.run_chunks(100, [&](uint64_t, uint64_t, unsigned) { sum.fetch_add(1); }, 10);
  const cmfx::pool_trace& t = pool.trace();
  EXPECT_EQ(t.runs, 6u);
  EXPECT_GT(t.wall_us, 0.0);
  EXPECT_GE(t.wall_us, t.slowest_us);
  EXPECT_GE(t.slowest_us, t.mean_us);
  EXPECT_GE(t.start_us, 0.0);
  EXPECT_GE(t.join_us, 0.0);
  pool.set_trace(false);
  pool.run(1000, [&](uint64_t, uint64_t, unsigned) {});
  EXPECT_EQ(pool.trace().runs, 0u) << "set_trace clears the sums";
}

}  // namespace
