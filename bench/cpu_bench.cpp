// cmfx-bench-cpu: CPU matvec / small-batch GEMM of every format at the models' real shapes.
// Names: matvec/<format>/<rows>x<cols> and gemm<n>/<format>/<rows>x<cols>. Counters: GBps (weight bytes read
// per second) and roofline (GBps / the streaming-read bandwidth this binary measured with the same threads).
// Weights rotate among copies whose total is >= 4x the last-level cache, so every call streams from DRAM.
// usage: cmfx-bench-cpu [--threads N] [--arch generic|avx2|avx512] [--big] [google-benchmark flags]
#include <benchmark/benchmark.h>
#include <unistd.h>

#include <cstdio>
#include <cstring>
#include <map>
#include <memory>
#include <string>

#include "cmfx/kernels/cpu_kernels.hpp"
#include "roofline.hpp"

namespace {

using namespace cmfx;

unsigned g_threads = 0;
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
  const bool i8 = prec == act_precision::i8 && k.gemm_i8[size_t(F::id)] != nullptr;
  st.SetLabel(std::string(cpu_arch_name(k.arch)) + (i8 ? " a8" : " f32") + ", " + std::to_string(g_pool->size()) +
              " threads");
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
      g_arch = a == "generic" ? 0 : a == "avx2" ? 1 : a == "avx512" ? 2 : -2;
      if (g_arch == -2 || !cpu_supports(cpu_arch(g_arch))) {
        std::fprintf(stderr, "cmfx-bench-cpu: --arch %s: unknown or not supported by this CPU\n", a.c_str());
        return 2;
      }
    } else if (std::strcmp(argv[i], "--big") == 0) {
      big = true;
    } else {
      rest.push_back(argv[i]);
    }
  }
  int rc = int(rest.size());
  g_pool = std::make_unique<thread_pool>(g_threads, /*pin=*/true);
  g_roofline = bench::measure_read_bandwidth(*g_pool, std::max<uint64_t>(1ull << 30, 8 * llc_bytes()));
  std::printf("read roofline: %.2f GB/s with %u threads (streaming sum over %llu MiB)\n", g_roofline / 1e9,
              g_pool->size(), (unsigned long long)(std::max<uint64_t>(1ull << 30, 8 * llc_bytes()) >> 20));
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
  });
  benchmark::Initialize(&rc, rest.data());
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  return 0;
}
