// Throughput of `verify` (hash64 over every tensor of a CMF file) on a page-cached 2 GiB file, as a ratio to
// the streaming-read roofline measured in the same run. Prints GB/s per thread count.
// usage: bench_verify [--bytes N] [--file PATH]   (the file is written once and reused)
#include <benchmark/benchmark.h>

#include <cstdio>
#include <filesystem>
#include <random>
#include <thread>

#include "cmfx/io/cmf_verify.hpp"
#include "cmfx/io/cmf_writer.hpp"
#include "cmfx/core/read_bandwidth.hpp"

namespace {

std::string g_path = (std::filesystem::temp_directory_path() / "cmfx_bench_verify.cmf").string();
uint64_t g_bytes = 2ull << 30;

const std::string kHeader =
    R"({"version":2,"arch":{"arch_name":"bench","hidden_size":4096,"intermediate_size":2048,"num_layers":1,)"
    R"("num_attention_heads":1,"num_kv_heads":1,"head_dim":64,"vocab_size":2,"layer_types":["FullAttention"],)"
    R"("rms_norm_eps":1e-6,"max_position_embeddings":64},"quant_type":"Q4_BLOCK"})";

void ensure_file() {
  if (std::filesystem::exists(g_path) && std::filesystem::file_size(g_path) >= g_bytes) return;
  cmfx::cmf_stream_writer w(g_path, kHeader, 1 << 20);
  std::mt19937_64 rng(1);
  std::vector<uint8_t> t(64ull << 20);  // 64 MiB tensors, like a large expert bank
  for (auto& x : t) x = uint8_t(rng());
  for (uint64_t i = 0; i * t.size() < g_bytes; ++i) {
    t[0] = uint8_t(i);
    std::string name = "t";
    name += std::to_string(i);  // not "t" + ...: g++ 12 false -Wrestrict (PR 105651)
    w.add(name, cmfx::cmf_dtype::u8, {uint32_t(t.size())}, t);
  }
  w.finish();
}

void BM_Verify(benchmark::State& st) {
  ensure_file();
  const auto f = cmfx::cmf_file::open(g_path);
  const unsigned threads = unsigned(st.range(0));
  static double roof[64] = {};
  if (roof[threads] == 0) {
    cmfx::thread_pool pool(threads);
    roof[threads] = cmfx::measure_read_bandwidth(pool, 1ull << 30);
  }
  cmfx::verify_options o;
  o.threads = threads;
  (void)cmfx::verify(f, o);  // warm the page cache
  uint64_t bytes = 0;
  for (auto _ : st) {
    const auto rep = cmfx::verify(f, o);
    if (!rep.ok()) st.SkipWithError("hash mismatch");
    bytes += rep.bytes_hashed;
  }
  const double gbps = double(bytes) / 1e9;
  st.counters["GB/s"] = benchmark::Counter(gbps, benchmark::Counter::kIsRate);
  st.counters["read_roofline_GB/s"] = roof[threads] / 1e9;
  st.counters["ratio_to_read_roofline"] =
      benchmark::Counter(gbps / (roof[threads] / 1e9), benchmark::Counter::kIsRate);
}
BENCHMARK(BM_Verify)->Arg(1)->Arg(2)->Unit(benchmark::kMillisecond)->UseRealTime()->MinTime(2.0);

}  // namespace

int main(int argc, char** argv) {
  for (int i = 1; i + 1 < argc; ++i) {
    if (std::string(argv[i]) == "--file") g_path = argv[i + 1];
    if (std::string(argv[i]) == "--bytes") g_bytes = std::stoull(argv[i + 1]);
  }
  benchmark::Initialize(&argc, argv);
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  return 0;
}
