// The driver's prompt cache (driver/generate.cpp) on a V4.1 toy with a prompt longer than its 512-token pieces: the
// pieces must be the official ONE prefill call (spec §5.1) under the stale index-key rule — prompt_cache marks the
// whole prompt (dsv41_state::mark_prefill / the GPU graph's) before running them.
//   - CPU: prompt_cache's last logits == one forward() of the whole prompt, bit for bit (the same chunking of the
//     arithmetic: the CPU graph's results do not depend on how its prefill is split), while the same pieces
//     without the mark (decode steps after the first piece) differ — so the case sees a lost mark;
//   - GPU (gpu_runner, as `cmfx run --backend vulkan`): prompt_cache's last logits == one forward() of the whole
//     prompt on a second runner, bit for bit (prefill chunks of 64 end at the same positions either way), and the
//     unmarked pieces differ.
#include <cmath>
#include <random>

#include "generate.hpp"
#include "harness.hpp"
#include "model/dsv41_forward.hpp"
#include "model/gpu_runner.hpp"
#include "model_toys.hpp"

namespace cmfx::parity {

namespace {

using namespace cmfx::driver;

constexpr uint64_t kPrompt = 600;  // 512 + 88: two prompt_cache pieces

/// max |a − b| / max |b|.
double max_rel(const std::vector<float>& a, const std::vector<float>& b) {
  double d = 0, m = 0;
  for (size_t i = 0; i < std::min(a.size(), b.size()); ++i) {
    d = std::max(d, double(std::fabs(a[i] - b[i])));
    m = std::max(m, double(std::fabs(b[i])));
  }
  return m > 0 ? d / m : d;
}

std::vector<uint32_t> random_ids(uint64_t seed, uint32_t vocab) {
  std::mt19937_64 g(seed);
  std::vector<uint32_t> ids(kPrompt);
  for (uint32_t& x : ids) x = std::uniform_int_distribution<uint32_t>(0, vocab - 1)(g);
  return ids;
}

std::string cpu_case(const std::string& path, uint64_t seed, std::string& info) {
  dsv41_options co;
  co.threads = 1;
  co.qat_kv = false;  // the unquantised cache: the picks the stale rule changes are not hidden behind FP4 ties
  auto m = dsv41_model::open(path, co);
  const std::vector<uint32_t> ids = random_ids(seed, m->config().vocab);
  dsv41_state one = m->new_state();
  const std::vector<float> want = m->forward(ids, one, dsv41_logits::last);
  prompt_cache pc(*m);
  uint64_t reused = 0;
  const std::vector<float> got = pc.prefill(ids, reused);
  if (reused != 0) return "a fresh prompt cache reused " + std::to_string(reused) + " tokens";
  if (got != want)
    return "prompt_cache's logits differ from one forward() (max rel " + std::to_string(max_rel(got, want)) + ")";
  dsv41_state st = m->new_state();  // the same pieces unmarked: decode steps after the first
  const std::span<const uint32_t> first(ids.data(), prefill_chunk);
  const std::span<const uint32_t> rest(ids.data() + prefill_chunk, kPrompt - prefill_chunk);
  (void)m->forward(first, st, dsv41_logits::none);
  const std::vector<float> unmarked = m->forward(rest, st, dsv41_logits::last);
  const double r = max_rel(unmarked, want);
  if (r < 1e-4) return "the unmarked pieces match one prefill too (max rel " + std::to_string(r) + "): no test";
  char b[160];
  std::snprintf(b, sizeof b, "%llu-token prompt in pieces of %llu == one call; unmarked pieces: max rel %.3g",
                (unsigned long long)kPrompt, (unsigned long long)prefill_chunk, r);
  info = b;
  return {};
}

std::string gpu_case(const std::string& path, uint64_t seed, std::string& info) {
  gpu_run_options o;
  o.max_ctx = kPrompt + 8;
  o.prefill_chunk = 64;
  o.gemm = gpu::gemm_precision::f32;
  auto cached = gpu_runner::open(path, o), whole = gpu_runner::open(path, o), plain = gpu_runner::open(path, o);
  if (!cached->is_v41()) return "the V4.1 toy did not open as V4.1";
  const std::vector<uint32_t> ids = random_ids(seed, cached->config().vocab);
  const std::vector<float> want = whole->forward(ids, true);
  prompt_cache pc(*cached);
  uint64_t reused = 0;
  const std::vector<float> got = pc.prefill(ids, reused);
  const gpu_prefill_stats ps = cached->model().last_prefill();
  if (ps.chunks != 2) return "the last piece ran " + std::to_string(ps.chunks) + " prefill chunks, not 2 (64 + 24)";
  if (got != want)
    return "prompt_cache's logits differ from one forward() (max rel " + std::to_string(max_rel(got, want)) + ")";
  (void)plain->forward(std::span<const uint32_t>(ids.data(), prefill_chunk), false);
  const std::vector<float> unmarked =
      plain->forward(std::span<const uint32_t>(ids.data() + prefill_chunk, kPrompt - prefill_chunk), true);
  if (plain->model().last_prefill().chunks != 0) return "the unmarked second piece ran in prefill chunks";
  const double r = max_rel(unmarked, want);
  if (r < 1e-4) return "the unmarked pieces match one prefill too (max rel " + std::to_string(r) + "): no test";
  char b[200];
  std::snprintf(b, sizeof b,
                "%s: %llu-token prompt in pieces of %llu (chunks of 64) == one call; unmarked: max rel %.3g",
                cached->device_name().c_str(), (unsigned long long)kPrompt, (unsigned long long)prefill_chunk, r);
  info = b;
  return {};
}

}  // namespace

void prompt_cache_cases(suite& s) {
  toy_files files;
  s.run("prompt_cache", "-", "V4.1 cmf f32 toy, CPU: a 600-token prompt in 512-token pieces is one prefill",
        [&](uint64_t seed, std::string& info) { return cpu_case(files.make("cmf", "f32", "v41"), seed, info); });
  s.run("prompt_cache", "-", "V4.1 cmf f32 toy, GPU runner: a 600-token prompt in 512-token pieces is one prefill",
        [&](uint64_t seed, std::string& info) { return gpu_case(files.make("cmf", "f32", "v41"), seed, info); });
}

}  // namespace cmfx::parity
