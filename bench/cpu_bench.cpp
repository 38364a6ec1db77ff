// cmfx-bench-cpu: CPU matvec / small-batch GEMM of every format at the models' real shapes, and the MoE of one token.
// Names: matvec/<format>/<rows>x<cols>, gemm<n>/<format>/<rows>x<cols> and moe1/<format>/d<d>_i<inter>_k<k> (one
// token through k experts: kernels::moe_forward with int8 activations — the expert cache's CPU experts). Counters:
// GBps (weight bytes read per second) and roofline (GBps / the streaming-read bandwidth this binary measured with
// the same threads). Weights rotate among copies (distinct experts) whose total is >= 4x the last-level cache, so
// every call streams from DRAM. moe1/ also reports the pool's timing per dispatch (thread_pool::set_trace): fork_us
// (the last worker's start), slowest_us and mean_us (busy time per worker), join_us (last end to return), and
// pool_us (the caller's time inside the pool's run; the rest of an iteration is the serial part before the fork,
// e.g. quantising the activations). With --pool-trace, matvec/ and gemm<n>/ report the same counters.
// usage: cmfx-bench-cpu [--threads N] [--arch generic|avx2|avx512|avx512gfni] [--big] [--moe-chunk ROWS]
//                       [--row-tail S] [--pool-trace] [google-benchmark flags]
//   --moe-chunk ROWS  moe1/: rows taken dynamically in chunks of ROWS (moe_forward's chunk_rows; 0 = static)
//   --row-tail S      matvec/, gemm, moe1/ (static): the share S of the rows taken dynamically after each worker's
//                     static range (thread_pool::set_row_tail; 0 = all static; default 0.25)
//   --pool-trace      matvec/, gemm<n>/: time the pool too (two clock reads per worker and run; off by default)
#include <benchmark/benchmark.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <map>
#include <memory>
#include <string>

#include "cmfx/kernels/cpu_kernels.hpp"
#include "cmfx/kernels/moe.hpp"
#include "cmfx/core/read_bandwidth.hpp"

namespace {

using namespace cmfx;

unsigned g_threads = 0;
uint64_t g_moe_chunk = 0;
double g_row_tail = -1;  // < 0: the pool's default
bool g_pool_trace = false;  // --pool-trace
int g_arch = -1;  // --arch: a cpu_arch to force (default: the best this CPU runs)
const cpu_kernel_table& bench_kernels() {
  return g_arch < 0 ? best_cpu_kernels() : cpu_kernels_for(cpu_arch(g_arch));
}
double g_roofline = 0;  // bytes/s
std::unique_ptr<thread_pool> g_pool;

uint64_t llc_bytes() {
  long l3 = ::sysconf(_SC_LEVEL3_CACHE_SIZE);
  return l3 > 0 ? uint64_t(l3) : (32ull << 20);
}

/// The pool's timing per run since set_trace(true), as counters (see the file comment); turns tracing off.
void report_pool_trace(benchmark::State& st) {
  const pool_trace& tr = g_pool->trace();
  const double runs = double(std::max<uint64_t>(1, tr.runs));
  st.counters["pool_us"] = tr.wall_us / runs;
  st.counters["fork_us"] = tr.start_us / runs;
  st.counters["slowest_us"] = tr.slowest_us / runs;
  st.counters["mean_us"] = tr.mean_us / runs;
  st.counters["join_us"] = tr.join_us / runs;
  g_pool->set_trace(false);
}

struct weights {
  std::vector<std::vector<uint8_t>> data;  // copies
  std::vector<uint8_t> scale;
  uint64_t rows = 0, cols = 0, bytes = 0;
};

/// Working set of the rotating weight copies: >= 4x the last-level cache the OS reports and >= 1 GiB (VMs may
/// report a smaller L3 than the host really has, and a cache-resident working set overstates bandwidth).
uint64_t working_set_bytes() { return std::max<uint64_t>(4 * llc_bytes(), 1ull << 30); }

template <class F>
const weights& get_weights(uint64_t rows, uint64_t cols) {
  static weights w;  // one (format, shape) at a time: the previous one is freed when the shape changes
  static std::pair<uint64_t, uint64_t> key{0, 0};
  if (key == std::make_pair(rows, cols) && !w.data.empty()) return w;
  w = weights{};
  key = {rows, cols};
  std::vector<float> v(rows * cols);
  uint64_t s = 0x12345678;
  for (auto& x : v) {  // cheap deterministic pseudo-Gaussian (sum of uniforms)
    float a = 0;
    for (int k = 0; k < 4; ++k) {
      s = s * 6364136223846793005ull + 1442695040888963407ull;
      a += float(s >> 40) / float(1 << 24) - 0.5f;
    }
    x = 0.02f * a;
  }
  encoded_matrix e = F::encode(v.data(), rows, cols);
  w.rows = rows;
  w.cols = cols;
  w.bytes = e.data.size() + e.scale.size();
  const uint64_t copies = std::max<uint64_t>(2, (working_set_bytes() + w.bytes - 1) / w.bytes);
  for (uint64_t c = 0; c < copies; ++c) w.data.push_back(e.data);
  w.scale = std::move(e.scale);
  return w;
}

template <class F>
void bm_gemm(benchmark::State& st, uint64_t rows, uint64_t cols, uint64_t n, act_precision prec) {
  const weights& w = get_weights<F>(rows, cols);
  const cpu_kernel_table& k = bench_kernels();
  std::vector<float> X(n * cols), Y(n * rows);
  for (uint64_t i = 0; i < X.size(); ++i) X[i] = float(int(i % 17) - 8) * 0.125f;
  act_q8 scratch;
  size_t copy = 0;
  uint64_t bytes = 0;
  if (g_pool_trace) g_pool->set_trace(true);
  for (auto _ : st) {
    const matrix_view v{w.data[copy].data(), w.data[copy].size(), w.scale.empty() ? nullptr : w.scale.data(),
                        w.scale.size(), w.scale.empty() ? scale_encoding::none : scale_encoding::e8m0, rows, cols};
    gemm(*g_pool, k, F::id, v, X.data(), n, Y.data(), prec, scratch);
    benchmark::DoNotOptimize(Y.data());
    copy = (copy + 1) % w.data.size();
    bytes += w.bytes;
  }
  st.counters["GBps"] = benchmark::Counter(double(bytes) / 1e9, benchmark::Counter::kIsRate);
  st.counters["roofline"] = benchmark::Counter(double(bytes) / g_roofline, benchmark::Counter::kIsRate);
  if (g_pool_trace) report_pool_trace(st);
  const bool i8 = prec == act_precision::i8 && k.gemm_i8[size_t(F::id)] != nullptr;
  st.SetLabel(std::string(cpu_arch_name(k.arch)) + (i8 ? " a8" : " f32") + ", " + std::to_string(g_pool->size()) +
              " threads");
}

/// k of many distinct experts (gate, up [inter, d], down [d, inter] in F; copies of one encoded matrix each) for
/// one token per iteration, the experts rotating so that every call streams its weights from DRAM.
template <class F>
void bm_moe(benchmark::State& st, uint64_t d, uint64_t inter, uint32_t k) {
  auto make = [](uint64_t rows, uint64_t cols) {
    std::vector<float> v(rows * cols);
    uint64_t s = 0x9E3779B97F4A7C15ull ^ rows;
    for (auto& x : v) {
      s = s * 6364136223846793005ull + 1442695040888963407ull;
      x = 0.02f * (float(s >> 40) / float(1 << 24) - 0.5f);
    }
    return F::encode(v.data(), rows, cols);
  };
  const encoded_matrix gu = make(inter, d), dn = make(d, inter);
  const uint64_t per = 2 * (gu.data.size() + gu.scale.size()) + dn.data.size() + dn.scale.size();
  const uint64_t E = std::max<uint64_t>(2 * k, (working_set_bytes() + per - 1) / per);
  std::vector<std::vector<uint8_t>> bytes;  // [3E]: gate, up, down of each expert
  bytes.reserve(3 * E);
  std::vector<expert_view> ex(E);
  auto view_of = [](const std::vector<uint8_t>& b, const encoded_matrix& e, uint64_t rows, uint64_t cols) {
    return matrix_view{b.data(), b.size(), e.scale.empty() ? nullptr : e.scale.data(), e.scale.size(),
                       e.scale.empty() ? scale_encoding::none : scale_encoding::e8m0, rows, cols};
  };
  for (uint64_t e = 0; e < E; ++e) {
    bytes.push_back(gu.data), bytes.push_back(gu.data), bytes.push_back(dn.data);
    ex[e].gate = view_of(bytes[3 * e], gu, inter, d), ex[e].up = view_of(bytes[3 * e + 1], gu, inter, d);
    ex[e].down = view_of(bytes[3 * e + 2], dn, d, inter);
    ex[e].gate_fmt = ex[e].up_fmt = ex[e].down_fmt = F::id;
  }
  std::vector<float> x(d), out(d), w(k, 1.0f / float(k));
  for (uint64_t i = 0; i < d; ++i) x[i] = float(int(i % 17) - 8) * 0.125f;
  std::vector<uint32_t> ids(k);
  moe_scratch scratch;
  uint64_t next = 0, moved = 0;
  g_pool->set_trace(true);
  for (auto _ : st) {
    for (uint32_t j = 0; j < k; ++j) ids[j] = uint32_t((next + j) % E);
    std::sort(ids.begin(), ids.end());
    moe_forward(*g_pool, bench_kernels(), std::span<const expert_view>(ex), nullptr, x.data(), 1, d, ids.data(),
                w.data(), k, 10.0f, out.data(), scratch, act_precision::i8, g_moe_chunk);
    benchmark::DoNotOptimize(out.data());
    next = (next + k) % E;
    moved += uint64_t(k) * per;
  }
  st.counters["GBps"] = benchmark::Counter(double(moved) / 1e9, benchmark::Counter::kIsRate);
  st.counters["roofline"] = benchmark::Counter(double(moved) / g_roofline, benchmark::Counter::kIsRate);
  report_pool_trace(st);
  st.SetLabel(std::string(cpu_arch_name(bench_kernels().arch)) + " a8, " + std::to_string(g_pool->size()) + " threads, " +
              std::to_string(E) + " experts of " + std::to_string(per >> 10) + " KiB" +
              (g_moe_chunk ? ", chunks of " + std::to_string(g_moe_chunk) + " rows" : ", static"));
}

struct shape {
  uint64_t rows, cols;
  bool big;
};

// (rows, cols) = (out, in): V4 wq_a 4096->1024, wq_b 1024->32768, experts 4096->2048 and 2048->4096,
// wo_b 8192->4096, V4.1 wq_a 5120->1280, experts 2560->2304 (w1/w3 in/2 packed) and 1152->5120, head 4096->129280.
const shape kShapes[] = {{1024, 4096, false}, {32768, 1024, false}, {2048, 4096, false}, {4096, 2048, false},
                         {4096, 8192, false}, {1280, 5120, false},  {2304, 5120, false}, {5120, 2304, false},
                         {129280, 4096, true}};

}  // namespace

int main(int argc, char** argv) {
  bool big = false;
  std::vector<char*> rest;
  for (int i = 0; i < argc; ++i) {
    if (std::strcmp(argv[i], "--threads") == 0 && i + 1 < argc) {
      g_threads = unsigned(std::stoul(argv[++i]));
    } else if (std::strcmp(argv[i], "--arch") == 0 && i + 1 < argc) {
      const std::string a = argv[++i];
      g_arch = a == "generic" ? 0 : a == "avx2" ? 1 : a == "avx512" ? 2 : a == "avx512gfni" ? 3 : -2;
      if (g_arch == -2 || !cpu_supports(cpu_arch(g_arch))) {
        std::fprintf(stderr, "cmfx-bench-cpu: --arch %s: unknown or not supported by this CPU\n", a.c_str());
        return 2;
      }
    } else if (std::strcmp(argv[i], "--big") == 0) {
      big = true;
    } else if (std::strcmp(argv[i], "--moe-chunk") == 0 && i + 1 < argc) {
      g_moe_chunk = std::stoull(argv[++i]);
    } else if (std::strcmp(argv[i], "--pool-trace") == 0) {
      g_pool_trace = true;
    } else if (std::strcmp(argv[i], "--row-tail") == 0 && i + 1 < argc) {
      g_row_tail = std::stod(argv[++i]);
    } else {
      rest.push_back(argv[i]);
    }
  }
  int rc = int(rest.size());
  g_pool = std::make_unique<thread_pool>(g_threads, /*pin=*/true);
  g_roofline = measure_read_bandwidth(*g_pool, std::max<uint64_t>(1ull << 30, 8 * llc_bytes()));
  std::printf("read roofline: %.2f GB/s with %u threads (streaming sum over %llu MiB, best of plain and 1-8 KiB "
              "prefetched)\n",
              g_roofline / 1e9, g_pool->size(),
              (unsigned long long)(std::max<uint64_t>(1ull << 30, 8 * llc_bytes()) >> 20));
  if (g_row_tail >= 0) g_pool->set_row_tail(g_row_tail);  // the roofline above is a plain static run either way
  std::printf("row tail: %.2f of the rows taken dynamically\n", g_pool->row_tail());
  for_each_type(all_formats{}, [&]<class F>() {
    for (const shape& s : kShapes) {
      if ((s.big && !big) || !F::shape_ok(s.rows, s.cols)) continue;
      const std::string dims = std::to_string(s.rows) + "x" + std::to_string(s.cols);
      // matvec/: the fastest path (int8 activations where a kernel exists); matvec-f32/: the strict path.
      benchmark::RegisterBenchmark(("matvec/" + std::string(F::name) + "/" + dims).c_str(),
                                   [s](benchmark::State& st) { bm_gemm<F>(st, s.rows, s.cols, 1, act_precision::i8); })
          ->Unit(benchmark::kMicrosecond)->UseRealTime();
      benchmark::RegisterBenchmark(("matvec-f32/" + std::string(F::name) + "/" + dims).c_str(),
                                   [s](benchmark::State& st) { bm_gemm<F>(st, s.rows, s.cols, 1, act_precision::f32); })
          ->Unit(benchmark::kMicrosecond)->UseRealTime();
      if (s.rows == 2048 && s.cols == 4096)
        for (uint64_t n : {4u, 16u, 64u})
          benchmark::RegisterBenchmark(("gemm" + std::to_string(n) + "/" + std::string(F::name) + "/" + dims).c_str(),
                                       [s, n](benchmark::State& st) { bm_gemm<F>(st, s.rows, s.cols, n, act_precision::i8); })
              ->Unit(benchmark::kMicrosecond)->UseRealTime();
    }
    // the MoE of one token (the expert cache's CPU experts): V4 (d 4096, inter 2048) and V4.1 (5120, 2304)
    if constexpr (F::id == format::q2tp || F::id == format::q4tp || F::id == format::mxfp4)
      for (const auto& [d, inter] : {std::pair<uint64_t, uint64_t>{4096, 2048}, {5120, 2304}})
        for (const uint32_t k : {1u, 6u}) {
          if (!F::shape_ok(inter, d) || !F::shape_ok(d, inter)) continue;
          benchmark::RegisterBenchmark(("moe1/" + std::string(F::name) + "/d" + std::to_string(d) + "_i" +
                                        std::to_string(inter) + "_k" + std::to_string(k)).c_str(),
                                       [d, inter, k](benchmark::State& st) { bm_moe<F>(st, d, inter, k); })
              ->Unit(benchmark::kMicrosecond)->UseRealTime();
        }
  });
  benchmark::Initialize(&rc, rest.data());
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  return 0;
}
