#pragma once
/// @file thread_pool.hpp
/// @brief A persistent pool for data-parallel kernels: `run(n, fn)` calls fn(begin, end, worker) on a static
///        partition of [0, n) into one contiguous range per worker, the calling thread taking range 0.
///
/// No allocation and no std::function on the hot path: the callable is passed by pointer through a
/// type-erased trampoline, workers wait on a generation counter (spin briefly, then block on a condition
/// variable), and the caller spins until every worker has finished its range. `run_chunks` is the dynamic
/// variant: workers take fixed-size chunks from a shared counter until none is left (for machines whose cores
/// do not run at one speed, e.g. the vCPUs of a VM). `run_rows` is what the row kernels call: `run` as it is, or,
/// with `set_row_tail(share)`, static ranges over the first 1 - share of the items and the rest taken dynamically
/// (each worker streams its own contiguous range, then the faster ones take the tail's chunks). `set_trace(true)`
/// times every run (pool_trace).
#if defined(__linux__)
#include <pthread.h>
#include <sched.h>
#endif

#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <mutex>
#include <thread>
#include <type_traits>
#include <vector>

namespace cmfx {

/// One pause of a spin-wait loop (x86 `pause`: yields the core's pipeline to its sibling; nothing elsewhere).
inline void spin_pause() noexcept {
#if defined(__x86_64__) || defined(__i386__)
  __builtin_ia32_pause();
#endif
}

/// Sums over the runs timed since set_trace(true), in microseconds (divide by `runs` for means).
struct pool_trace {
  uint64_t runs = 0;
  double wall_us = 0;      ///< the caller's time in run(): fork, every range, join
  double start_us = 0;     ///< the last worker's start after run() began (the fork's latency)
  double slowest_us = 0;   ///< the longest worker's busy time (in run_chunks: its chunks together)
  double mean_us = 0;      ///< the mean busy time of the workers that had work
  double join_us = 0;      ///< from the last worker's end to the caller's return (the join's latency)
};

class thread_pool {
 public:
  static constexpr double default_row_tail = 0.25;  ///< see set_row_tail

  /// `threads` = total workers including the caller (0 = hardware concurrency). With `pin`, worker i (the
  /// caller is worker 0) is bound to CPU i mod ncpu, which keeps two busy workers off one core on small VMs.
  explicit thread_pool(unsigned threads = 0, bool pin = false) {
    n_ = threads ? threads : std::max(1u, std::thread::hardware_concurrency());
    stamps_ = std::vector<stamp>(n_);
    for (unsigned i = 1; i < n_; ++i) workers_.emplace_back([this, i, pin] {
      if (pin) pin_to(i);
      loop(i);
    });
    if (pin) pin_to(0);
  }
  thread_pool(const thread_pool&) = delete;
  thread_pool& operator=(const thread_pool&) = delete;
  ~thread_pool() {
    {
      std::lock_guard<std::mutex> lk(m_);
      stop_ = true;
      gen_.fetch_add(1, std::memory_order_release);
    }
    cv_.notify_all();
    for (auto& t : workers_) t.join();
  }

  unsigned size() const noexcept { return n_; }

  /// Time every following run (off: one untaken branch per run and range). Turning it on clears the sums.
  void set_trace(bool on) {
    trace_ = on;
    traced_ = pool_trace{};
  }
  const pool_trace& trace() const noexcept { return traced_; }

  /// The share of a row kernel's items (`run_rows`) left out of the static ranges and taken dynamically in chunks,
  /// in [0, 0.9]; 0 makes run_rows exactly run. Not to be changed while a run is in flight. Default 0.25
  /// (`default_row_tail`): on the H200 host's 16 vCPUs, whose slowest worker took 1.2-1.5x the mean of static
  /// ranges, it cut 4096 x 8192 matvecs by 0-17 % (q2tp 155/139 -> 129/131 us, FP8 433/382 -> 343/364) and never
  /// lost beyond the noise (docs/PERF.md "Twenty-ninth session").
  void set_row_tail(double share) noexcept { row_tail_ = std::clamp(share, 0.0, 0.9); }
  double row_tail() const noexcept { return row_tail_; }

  /// `run` for the row kernels (matvec, GEMM, experts): with a row tail (set_row_tail), worker w first takes the
  /// w-th static range of [0, head) — head = n · (1 - share) rounded to `grain` — then chunks of the tail
  /// [head, n) from a shared counter (about four per worker, multiples of `grain`), so fn may be called several
  /// times per worker, on disjoint ranges. Every item is visited once either way.
  template <class Fn>
  void run_rows(uint64_t n, Fn&& fn, uint64_t grain = 1) {
    grain = std::max<uint64_t>(1, grain);
    const uint64_t grains = (n + grain - 1) / grain;
    const uint64_t tail = uint64_t(double(grains) * row_tail_);
    if (tail == 0 || n_ <= 1) return run(n, fn, grain);
    const uint64_t head = std::min(n, (grains - tail) * grain);
    const uint64_t chunk = std::max<uint64_t>(1, (tail + 4 * n_ - 1) / (4 * n_)) * grain;
    std::atomic<uint64_t> next{head};
    run(n_, [&](uint64_t, uint64_t, unsigned w) {
      uint64_t b, e;
      partition(head, grain, n_, w, &b, &e);
      if (b < e) fn(b, e, w);
      for (uint64_t c; (c = next.fetch_add(chunk, std::memory_order_relaxed)) < n;) fn(c, std::min(n, c + chunk), w);
    }, 1);
  }

  /// Dynamic partition of [0, n): every worker takes chunks of `chunk` items (the last one shorter) from a shared
  /// counter and calls fn(begin, end, worker) for each, so a slow core takes fewer. Same blocking as run().
  template <class Fn>
  void run_chunks(uint64_t n, Fn&& fn, uint64_t chunk) {
    if (n == 0) return;
    chunk = std::max<uint64_t>(1, chunk);
    const uint64_t chunks = (n + chunk - 1) / chunk;
    std::atomic<uint64_t> next{0};
    run(std::min<uint64_t>(n_, chunks), [&](uint64_t, uint64_t, unsigned w) {
      for (uint64_t c; (c = next.fetch_add(1, std::memory_order_relaxed)) < chunks;)
        fn(c * chunk, std::min(n, (c + 1) * chunk), w);
    }, 1);
  }

  /// Static partition of [0, n) over `size()` workers, ranges aligned to `grain` items.
  /// Blocks until every range is done. Not reentrant: one run at a time per pool.
  template <class Fn>
  void run(uint64_t n, Fn&& fn, uint64_t grain = 1) {
    if (n == 0) return;
    const unsigned used = unsigned(std::min<uint64_t>(n_, (n + grain - 1) / grain));
    if (used <= 1) {
      fn(uint64_t(0), n, 0u);
      return;
    }
    const clock::time_point t0 = trace_ ? clock::now() : clock::time_point{};
    job_ = &fn;
    using F = std::remove_reference_t<Fn>;
    call_ = [](void* f, uint64_t b, uint64_t e, unsigned w) { (*static_cast<F*>(f))(b, e, w); };
    items_ = n;
    grain_ = grain;
    used_ = used;
    // Every worker acknowledges every generation (even with an empty range), so no worker can still be reading
    // this job's fields when the next run() overwrites them.
    pending_.store(n_ - 1, std::memory_order_relaxed);
    {
      std::lock_guard<std::mutex> lk(m_);
      gen_.fetch_add(1, std::memory_order_release);
    }
    cv_.notify_all();
    do_range(0);
    // Spin briefly, then yield: on an oversubscribed machine a worker may be descheduled, and a caller that
    // keeps spinning on its core can starve it (measured: decode 778 -> 20 tok/s with 2 threads on 2 busy cores).
    for (int spins = 0; pending_.load(std::memory_order_acquire) != 0; ++spins) {
      if (spins < 4000)
        spin_pause();
      else
        std::this_thread::yield();
    }
    if (trace_) account(t0, used);
  }

  /// The [begin, end) range of worker w out of `used` workers for n items (the partition `run` uses).
  static void partition(uint64_t n, uint64_t grain, unsigned used, unsigned w, uint64_t* b, uint64_t* e) noexcept {
    const uint64_t chunks = (n + grain - 1) / grain;
    *b = std::min(n, chunks * w / used * grain);
    *e = std::min(n, chunks * (w + 1) / used * grain);
  }

 private:
  static void pin_to(unsigned i) noexcept {
#if defined(__linux__)
    const unsigned ncpu = std::max(1u, std::thread::hardware_concurrency());
    cpu_set_t set;
    CPU_ZERO(&set);
    CPU_SET(i % ncpu, &set);
    (void)pthread_setaffinity_np(pthread_self(), sizeof set, &set);
#else
    (void)i;
#endif
  }
  using clock = std::chrono::steady_clock;
  struct alignas(64) stamp {
    clock::time_point begin, end;
  };
  void do_range(unsigned w) {
    uint64_t b, e;
    partition(items_, grain_, used_, w, &b, &e);
    if (b >= e) return;
    if (!trace_) return call_(job_, b, e, w);
    stamps_[w].begin = clock::now();
    call_(job_, b, e, w);
    stamps_[w].end = clock::now();
  }
  void account(clock::time_point t0, unsigned used) {
    const clock::time_point t1 = clock::now();
    auto us = [](clock::duration d) { return std::chrono::duration<double, std::micro>(d).count(); };
    clock::time_point last_begin = t0, last_end = t0;
    double slowest = 0, sum = 0;
    for (unsigned w = 0; w < used; ++w) {
      last_begin = std::max(last_begin, stamps_[w].begin);
      last_end = std::max(last_end, stamps_[w].end);
      const double b = us(stamps_[w].end - stamps_[w].begin);
      slowest = std::max(slowest, b);
      sum += b;
    }
    ++traced_.runs;
    traced_.wall_us += us(t1 - t0);
    traced_.start_us += us(last_begin - t0);
    traced_.slowest_us += slowest;
    traced_.mean_us += sum / used;
    traced_.join_us += us(t1 - last_end);
  }
  void loop(unsigned w) {
    uint64_t seen = 0;
    for (;;) {
      uint64_t g;
      int spins = 0;
      while ((g = gen_.load(std::memory_order_acquire)) == seen && ++spins < 20000) {
        if (spins < 2000)
          spin_pause();
        else
          std::this_thread::yield();
      }
      if (g == seen) {
        std::unique_lock<std::mutex> lk(m_);
        cv_.wait(lk, [&] { return gen_.load(std::memory_order_acquire) != seen; });
        g = gen_.load(std::memory_order_acquire);
      }
      seen = g;
      if (stop_) return;
      if (w < used_) do_range(w);
      pending_.fetch_sub(1, std::memory_order_acq_rel);
    }
  }

  unsigned n_ = 1;
  std::vector<std::thread> workers_;
  std::mutex m_;
  std::condition_variable cv_;
  std::atomic<uint64_t> gen_{0};
  std::atomic<unsigned> pending_{0};
  bool stop_ = false;
  void* job_ = nullptr;
  void (*call_)(void*, uint64_t, uint64_t, unsigned) = nullptr;
  uint64_t items_ = 0, grain_ = 1;
  unsigned used_ = 1;
  bool trace_ = false;
  double row_tail_ = default_row_tail;
  std::vector<stamp> stamps_;  // per worker: its range's start and end in the current run (trace_ only)
  pool_trace traced_;
};

}  // namespace cmfx
