// cmfx-bench-vk: GPU matvec of every format at the model's real shapes, timed with Vulkan timestamp queries.
// Names: vk_matvec/<format>/<rows>x<cols> — f32 activations, the copies dispatched as independent work (no barrier
// between them: kernel throughput); vk_matvec_i8/... — int8 activations (formats with that path on this device);
// vk_matvec_chain/... — a barrier before every dispatch, as in a chain of dependent products (adds the GPU's
// per-dispatch drain and launch time); vk_matvec_chain_f32/... — the same chain with f32 activations for the formats
// whose vk_matvec_chain takes int8 (the decode's --act f32 products); vk_dispatch/{chain,concurrent,chain_scale/N} — the per-dispatch floor of a tiny kernel
// (counter us_per_dispatch). Counters: GBps (weight bytes read per second of GPU time) and roofline
// (GBps / the bandwidth of a streaming-read kernel over a buffer much larger than the GPU's L2, measured in the
// same run). Every benchmark rotates through copies of its weights whose total is >= --working-set (default
// 512 MiB >> the 60 MB L2 of an H200), all dispatched in one recording between two timestamps, repeated until
// the recording holds >= --submit-ms of GPU work. The recording is made once and submitted again and again: the
// GPU is kept busy for >= --warmup-ms before timing (clocks ramp up) and the host adds no gaps while timing.
// vk_moe_f16|f32|i8/<format>/<experts>x4096x2048/n<tokens> — the expert-grouped MoE of a prefill chunk (bm_moe;
// i8: int8 activations, moe_i8_tc.comp on int8 tensor cores or moe_rows_g8.comp (--moe-i8-tc), where the device
// has integer dot products).
// vk_moe_b1/q2tp_q4tp/<experts>x4096x2048 — the decode's batch-1 MoE on the CMF q2tp layout, 64 calls chained, each
// with its own experts (bm_moe_b1; counters us_per_moe, GBps, roofline).
// vk_gemm_f16/<format>/<rows>x<cols>/n<tokens> — a dense GEMM of a prefill chunk of --moe-tokens rows on f16
// tiles (tensor cores where the device has them), chained (bm_gemm; counters ms, TFLOPS).
// vk_mhc/post_pre[_cold|_thrash]/4x4096 — one mHC sublayer boundary of a decode step (hc_post + hc_pre_finish), 64
// in a chain (cold: each its own weights, read from DRAM; thrash: + a 256 MiB read between boundaries, not timed).
// vk_mhc/post_finish[_cold|_thrash|_q8|_q8_thrash|_after_1_pipe|_after_8_pipes|_after_wo_b]/4x4096 — the same as the
// decode records it (hc_post_finish, one dispatch; q8: + u's int8 copy; after_N_pipe(s): after small kernels of N
// distinct pipelines, the boundary timed alone; after_wo_b: after the FP8 product that precedes it).
// vk_mhc/chunk/<n>x4x4096 — one mHC boundary of a prefill chunk of --moe-tokens tokens (hc_post + hc_pre_finish).
// usage: cmfx-bench-vk [--device N] [--cache-dir D] [--working-set MiB] [--submit-ms 5] [--warmup-ms 1000]
//                      [--split S] [--unroll U] [--rows-per-team R] [--x-source 1|2|3] [--xreg-batches N] [--legacy] [--no-spirv-opt]
//                      [--sub 1|2|4] (f32 row kernel: lanes per chunk, matvec_tuning::sub)
//                      [--pairs 1|2] (q2tp int8 row kernel: chunks per lane unit)
//                      [--concurrent-rule 1|2] (row kernel in concurrent groups: the dependent-product rule | throughput)
//                      [--moe-rpt 1|2|4|8] [--moe-pairs 2|4|8|16] [--moe-unroll 1|2] (the grouped int8 MoE kernel)
//                      [--moe-b1-rpt 1|2|4] [--moe-b1-pairs 1|2] [--moe-b1-unroll 1|2|4] [--moe-b1-batches 1|2|4|8] [--moe-tails 0|1]
//                      (the decode's batch-1 int8 MoE, vk_moe_b1: matvec_tuning::moe_b1_* / moe_tails)
//                      [--gemm-warp-tile 1|2] (vk_gemm_f16: a subgroup's blocks in 1 or 2 rows (0: 2 where it fits), matvec_tuning::gemm_warp_tile)
//                      [--hc-tokens T] (vk_mhc/chunk: tokens per mHC block workgroup, matvec_tuning::hc_tokens)
//                      [--moe-tiles 0|1|2] (the grouped f16 MoE: gemm.comp's tiles (0, 1) | moe_tc.comp (2))
//                      [--moe-i8-tc 0|1|2] (the grouped int8 MoE: the default kernel (0) | moe_rows_g8.comp (1) |
//                      moe_i8_tc.comp on the int8 tensor cores, emulated without them (2))
//                      [--f64] (f64 accumulators in norms / softmax / mHC where the device has f64)
//                      [--pipeline-stats] (print the driver's statistics of every pipeline built: registers, ...)
//                      [--shader-dir D] [--moe-tokens 512] [--moe-experts 256] [google-benchmark flags]
//                      (--shader-dir: read shaders/*.comp from D instead of the built-in copies: variants)
//                      (S, U, R: override the automatic work split; --legacy: never the batch-1 row kernel)
// On lavapipe (CPU emulation) it runs, slowly: use --working-set 64 and --benchmark_filter to shorten it.
#include <benchmark/benchmark.h>

#include <chrono>
#include <cstdio>
#include <cstring>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "cmfx/formats/format_list.hpp"
#include "cmfx/kernels/moe.hpp"
#include "cmfx/vk/kernels.hpp"

namespace {

using namespace cmfx;

std::unique_ptr<gpu::device> g_dev;
std::unique_ptr<gpu::kernels> g_kern;
uint64_t g_working_set = 512ull << 20;
double g_roofline = 0;  // bytes/s of stream_read
double g_submit_s = 0.005, g_warmup_s = 1.0;  // an idle H200 idles at 345 MHz: 0.2 s of warm-up left 3x noise
gpu::matvec_tuning g_tune;
uint32_t g_moe_tokens = 512;   // --moe-tokens: the vk_moe benchmarks' chunk
uint32_t g_moe_experts = 256;  // --moe-experts: their routed experts (fewer: devices with small bindings)

/// The weights of the benchmark that runs now: one (format, shape) at a time, freed when the next one starts.
struct weights {
  format fmt{};
  uint64_t rows = 0, cols = 0, bytes = 0;
  std::vector<gpu::gpu_matrix> copies;
  gpu::buffer x, y;
};
weights g_w;

/// rows × cols weights drawn from N(0, 0.02²) by g, encoded in format F.
template <class F>
encoded_matrix random_encoded(uint64_t rows, uint64_t cols, std::mt19937_64& g) {
  std::vector<float> v(rows * cols);
  std::normal_distribution<float> nd(0.0f, 0.02f);
  for (auto& f : v) f = nd(g);
  return F::encode(v.data(), rows, cols);
}
matrix_view view_of(const encoded_matrix& e, uint64_t rows, uint64_t cols) {
  return matrix_view{e.data.data(), e.data.size(), e.scale.empty() ? nullptr : e.scale.data(), e.scale.size(),
                     e.scale.empty() ? scale_encoding::none : scale_encoding::e8m0, rows, cols};
}

template <class F>
weights& get_weights(uint64_t rows, uint64_t cols) {
  if (g_w.fmt == F::id && g_w.rows == rows && g_w.cols == cols && !g_w.copies.empty()) return g_w;
  g_w = weights{};
  std::mt19937_64 g(rows * 131 + cols);
  std::normal_distribution<float> nd(0.0f, 0.02f);
  const encoded_matrix e = random_encoded<F>(rows, cols, g);
  const matrix_view mv = view_of(e, rows, cols);
  g_w.fmt = F::id, g_w.rows = rows, g_w.cols = cols;
  g_w.bytes = e.data.size() + e.scale.size();
  const uint64_t n = std::max<uint64_t>(2, (g_working_set + g_w.bytes - 1) / g_w.bytes);
  for (uint64_t i = 0; i < n; ++i) g_w.copies.push_back(gpu::upload_matrix(*g_dev, F::id, mv));
  std::vector<float> x(cols);
  for (auto& f : x) f = nd(g) * 50.0f;
  g_w.x = g_dev->alloc(cols * 4);
  g_dev->upload(g_w.x, x);
  g_w.y = g_dev->alloc(rows * 4 * n);  // one output per copy: the copies are independent work
  return g_w;
}

/// Submits c again and again for at least `seconds` of wall time (GPU clocks ramp up under sustained load).
void warm_up(gpu::commands& c, double seconds) {
  const auto t0 = std::chrono::steady_clock::now();
  do g_dev->submit(c);
  while (std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count() < seconds);
}

template <class F>
void bm_matvec(benchmark::State& st, uint64_t rows, uint64_t cols, act_precision act, bool chain) {
  weights& w = get_weights<F>(rows, cols);
  const uint64_t pass = w.bytes * w.copies.size();
  const uint64_t reps = std::max<uint64_t>(1, uint64_t(g_roofline * g_submit_s) / pass);
  gpu::commands c = g_dev->begin();
  // int8 activations: quantised once (as one norm output feeds several projections), not timed
  const bool i8 = act == act_precision::i8 && g_kern->has_i8(F::id);
  gpu::buffer xq = g_dev->alloc(gpu::kernels::act_q8_bytes(cols));
  if (i8) g_kern->quantize_act(c, F::id, w.x, 1, cols, xq);
  const uint32_t t0 = c.timestamp();
  for (uint64_t r = 0; r < reps; ++r) {
    if (!chain) c.begin_concurrent();
    for (size_t i = 0; i < w.copies.size(); ++i) {
      const gpu::view y(w.y, i * rows * 4, rows * 4);
      if (i8)
        g_kern->matvec_q8(c, w.copies[i], xq, y);
      else
        g_kern->matmul(c, w.copies[i], w.x, 1, y);
    }
    if (!chain) c.end_concurrent();  // one barrier per pass over the copies
  }
  const uint32_t t1 = c.timestamp();
  warm_up(c, g_warmup_s);
  double secs = 0;
  uint64_t bytes = 0;
  while (st.KeepRunningBatch(int64_t(reps * w.copies.size()))) {
    g_dev->submit(c);
    const double s = c.seconds(t0, t1);
    st.SetIterationTime(s);
    secs += s;
    bytes += pass * reps;
  }
  st.counters["GBps"] = secs > 0 ? double(bytes) / secs / 1e9 : 0.0;
  st.counters["roofline"] = secs > 0 ? double(bytes) / secs / g_roofline : 0.0;
  st.counters["MB"] = double(w.bytes) / 1e6;
}

/// The streaming read (the roofline's kernel) over copies of a buffer of `bytes`, recorded as bm_matvec records
/// independent products (one concurrent group per pass over copies filling the working set): how much of the
/// roofline a kernel reading that many bytes per dispatch can reach in this harness (`vk_stream/<bytes>`).
void bm_stream(benchmark::State& st, uint64_t bytes) {
  bytes = bytes / 16 * 16;
  const uint64_t n = std::max<uint64_t>(2, (g_working_set + bytes - 1) / bytes);
  std::vector<gpu::buffer> copies;
  for (uint64_t i = 0; i < n; ++i) {
    copies.push_back(g_dev->alloc(bytes));
    std::vector<uint8_t> junk(bytes);
    for (size_t j = 0; j < junk.size(); ++j) junk[j] = uint8_t((j + i) * 2654435761u >> 13);
    g_dev->upload(copies.back(), junk.data(), bytes);
  }
  gpu::buffer sink = g_dev->alloc(256);
  const uint64_t reps = std::max<uint64_t>(1, uint64_t(g_roofline * g_submit_s) / (bytes * n));
  gpu::commands c = g_dev->begin();
  const uint32_t t0 = c.timestamp();
  for (uint64_t r = 0; r < reps; ++r) {
    c.begin_concurrent();
    for (const gpu::buffer& b : copies) g_kern->stream_read(c, b, sink);
    c.end_concurrent();
  }
  const uint32_t t1 = c.timestamp();
  warm_up(c, g_warmup_s);
  double secs = 0;
  uint64_t total = 0;
  while (st.KeepRunningBatch(int64_t(reps * n))) {
    g_dev->submit(c);
    const double s = c.seconds(t0, t1);
    st.SetIterationTime(s);
    secs += s;
    total += bytes * n * reps;
  }
  st.counters["GBps"] = secs > 0 ? double(total) / secs / 1e9 : 0.0;
  st.counters["roofline"] = secs > 0 ? double(total) / secs / g_roofline : 0.0;
  st.counters["MB"] = double(bytes) / 1e6;
}

/// Warms the GPU up on recording c, then submits it once per benchmark iteration, timing [t0, t1] with its
/// timestamps; returns the mean seconds per iteration.
double time_recording(benchmark::State& st, gpu::commands& c, uint32_t t0, uint32_t t1) {
  warm_up(c, g_warmup_s);
  double secs = 0;
  int64_t iters = 0;
  while (st.KeepRunning()) {
    g_dev->submit(c);
    const double s = c.seconds(t0, t1);
    st.SetIterationTime(s);
    secs += s;
    ++iters;
  }
  return iters ? secs / double(iters) : 0.0;
}

/// The per-dispatch floor: 256 dispatches of a tiny kernel (RMSNorm of one 4096-vector), with a barrier before
/// each (chain) or none (concurrent). Counter us_per_dispatch = GPU time / 256.
void bm_dispatch(benchmark::State& st, bool chain) {
  constexpr uint32_t n = 256, dim = 4096;
  gpu::buffer x = g_dev->alloc(dim * 4), w = g_dev->alloc(dim * 4), y = g_dev->alloc(uint64_t(n) * dim * 4);
  std::vector<float> ones(dim, 1.0f);
  g_dev->upload(x, ones);
  g_dev->upload(w, ones);
  gpu::commands c = g_dev->begin();
  const uint32_t t0 = c.timestamp();
  if (!chain) c.begin_concurrent();
  for (uint32_t i = 0; i < n; ++i) g_kern->rmsnorm(c, x, w, gpu::view(y, uint64_t(i) * dim * 4, dim * 4), 1, dim, 1e-6f);
  if (!chain) c.end_concurrent();
  const uint32_t t1 = c.timestamp();
  const double per = time_recording(st, c, t0, t1);
  st.counters["us_per_dispatch"] = per / n * 1e6;
}

/// The bare floor of a dependent dispatch: 256 in-place scales of n floats (n = 64: one workgroup; 1 Mi: a grid of
/// workgroups), a barrier before each. Counter us_per_dispatch = GPU time / 256.
void bm_dispatch_scale(benchmark::State& st, uint32_t floats) {
  constexpr uint32_t n = 256;
  gpu::buffer x = g_dev->alloc(uint64_t(floats) * 4);
  g_dev->upload(x, std::vector<float>(floats, 1.0f));
  gpu::commands c = g_dev->begin();
  const uint32_t t0 = c.timestamp();
  for (uint32_t i = 0; i < n; ++i) g_kern->scale(c, x, floats, 1.0f);
  const uint32_t t1 = c.timestamp();
  const double per = time_recording(st, c, t0, t1);
  st.counters["us_per_dispatch"] = per / n * 1e6;
}

/// Submits c repeatedly (after the warm-up) and reports as the iteration time the GPU time inside the timestamp
/// pairs `spans` only; returns their mean total per submission (seconds).
double time_spans(benchmark::State& st, gpu::commands& c, const std::vector<std::pair<uint32_t, uint32_t>>& spans) {
  warm_up(c, g_warmup_s);
  double secs = 0;
  int64_t iters = 0;
  while (st.KeepRunning()) {
    g_dev->submit(c);
    double s = 0;
    for (const auto& [a, b] : spans) s += c.seconds(a, b);
    st.SetIterationTime(s);
    secs += s;
    ++iters;
  }
  return iters ? secs / double(iters) : 0.0;
}

/// A decode step's top-k of one row: n normal scores, k kept (the CSA indexer at 16K: 4096 → 512; experts: 256 → 6),
/// 64 dependent calls (a barrier before each, as in the graph). Counter us_per_topk = GPU time / 64. thrash: a
/// 256 MiB streaming read before every call (as a decode step's weights stream through the L2 between two uses of
/// the kernel) and the calls timed alone (timestamps around each).
void bm_topk(benchmark::State& st, uint32_t n, uint32_t k, bool thrash = false) {
  constexpr uint32_t reps = 64;
  std::mt19937_64 g(11);
  std::normal_distribution<float> nd(0.0f, 1.0f);
  std::vector<float> v(n);
  for (auto& f : v) f = nd(g);
  gpu::buffer x = g_dev->alloc(uint64_t(n) * 4), idx = g_dev->alloc(uint64_t(k) * 4);
  gpu::buffer big = thrash ? g_dev->alloc(256ull << 20) : gpu::buffer{}, sink = g_dev->alloc(256);
  g_dev->upload(x, v);
  gpu::commands c = g_dev->begin();
  std::vector<std::pair<uint32_t, uint32_t>> spans;
  const uint32_t t0 = c.timestamp();
  for (uint32_t i = 0; i < reps; ++i) {
    if (thrash) g_kern->stream_read(c, big, sink);
    c.barrier();
    const uint32_t ta = thrash ? c.timestamp() : 0;
    g_kern->topk(c, x, 1, n, k, idx, true);
    if (thrash) spans.push_back({ta, c.timestamp()});
  }
  const uint32_t t1 = c.timestamp();
  st.counters["us_per_topk"] = (thrash ? time_spans(st, c, spans) : time_recording(st, c, t0, t1)) / reps * 1e6;
}

/// A decode step's lightning-indexer scores at V4-Flash's shape (64 index heads × 128, one query row) over n keys
/// (the CSA indexer at 16K: 4096 entries), 64 dependent calls. Counter us_per_score = GPU time / 64.
void bm_index_score(benchmark::State& st, uint32_t n) {
  constexpr uint32_t reps = 64, heads = 64, hd = 128;
  std::mt19937_64 g(12);
  std::normal_distribution<float> nd(0.0f, 1.0f);
  auto fill = [&](uint64_t count) {
    std::vector<float> v(count);
    for (auto& f : v) f = nd(g);
    return v;
  };
  gpu::buffer q = g_dev->alloc(uint64_t(heads) * hd * 4), keys = g_dev->alloc(uint64_t(n) * hd * 4),
              w = g_dev->alloc(heads * 4), score = g_dev->alloc(uint64_t(n) * 4);
  g_dev->upload(q, fill(uint64_t(heads) * hd));
  g_dev->upload(keys, fill(uint64_t(n) * hd));
  g_dev->upload(w, fill(heads));
  gpu::kernels::index_shape is;
  is.rows = 1, is.heads = heads, is.head_dim = hd, is.n = n;
  gpu::commands c = g_dev->begin();
  const uint32_t t0 = c.timestamp();
  for (uint32_t i = 0; i < reps; ++i) {
    c.barrier();
    g_kern->index_score(c, is, q, keys, w, gpu::view(), score);
  }
  const uint32_t t1 = c.timestamp();
  st.counters["us_per_score"] = time_recording(st, c, t0, t1) / reps * 1e6;
}

/// One variant of bm_mhc (each field as described there).
struct mhc_case {
  bool cold = false, thrash = false, fused = false, after_mv = false, q8 = false;
  uint32_t pipes = 0;
};

/// One mHC sublayer boundary of a decode step at V4-Flash's shape (hc 4, d 4096, 24 mix rows): hc_post (+ the next
/// mix's partials) then hc_pre_finish (+ its RMSNorm), 64 boundaries in a dependent chain (as in a decode step).
/// cold: every boundary its own mixing matrix, norm and base (96 MB in all, beyond the L2, as in the model, where
/// each sublayer's are read once per token); else one set for all. thrash (with cold): a 256 MiB streaming read
/// before every boundary, as the model's weights stream through the L2 between two mHC steps, and the boundaries
/// timed alone (timestamps around each). Counter us_per_boundary = GPU time of the boundaries / 64.
/// One mHC sublayer boundary per step: hc_post + hc_pre_finish (two dispatches), or with `fused` the one dispatch
/// the decode graph records (hc_post_finish: the finish in the last workgroup; the Sinkhorn C apart, as there).
/// after_mv (with cold and fused): instead of the streaming read, the FP8 4096 × 8192 product that precedes the
/// boundary in the decode (wo_b; a rotating copy, its output the boundary's o), as in the model's chain.
/// q8 (with fused): the finish also writes u's int8 copy for q4tp (hc_finish_args::y_q8), as the decode's boundary
/// before an attention site does.
/// pipes (with cold and fused, instead of the streaming read): before every boundary, small kernels of `pipes`
/// distinct pipelines (record_pipes), and the boundaries timed alone: whether a boundary after a layer's worth of
/// other kernels (the decode's) pays for their code and state rather than for data in the L2.
void bm_mhc(benchmark::State& st, const mhc_case& k);

/// The small kernels of bm_mhc's `pipes`: 1: one RMSNorm of 4096 values; 8: that, quantize_act and a 64 × 4096 int8
/// product for q4tp, q2tp and MXFP4, and a 64 × 4096 FP8 product.
struct mhc_pipes {
  std::vector<gpu::gpu_matrix> mats;  // q4tp, q2tp, MXFP4 (int8 activations), FP8
  gpu::buffer x, w, y, q, out;
};
template <class F>
gpu::gpu_matrix small_matrix(uint64_t rows, uint64_t cols) {
  std::mt19937_64 g(rows + cols);
  const encoded_matrix e = random_encoded<F>(rows, cols, g);
  return gpu::upload_matrix(*g_dev, F::id, view_of(e, rows, cols));
}
void record_pipes(gpu::commands& c, mhc_pipes& p, uint32_t pipes, uint32_t d) {
  g_kern->rmsnorm(c, p.x, p.w, p.y, 1, d, 1e-6f);
  if (pipes < 8) return;
  const format fs[3] = {format::q4tp, format::q2tp, format::mxfp4};
  for (int i = 0; i < 3; ++i) {
    g_kern->quantize_act(c, fs[i], p.y, 1, d, p.q);
    g_kern->matvec_q8(c, p.mats[size_t(i)], p.q, p.out);
  }
  g_kern->matmul(c, p.mats[3], p.y, 1, p.out);
}
void bm_mhc(benchmark::State& st, const mhc_case& k) {
  const bool cold = k.cold, thrash = k.thrash, fused = k.fused, after_mv = k.after_mv, q8 = k.q8;
  const uint32_t pipes = k.pipes;
  const bool alone = thrash || pipes;  // timestamps around each boundary
  constexpr uint32_t n = 64, hc = 4, d = 4096, rows = (2 + hc) * hc;
  gpu::kernels::hc_shape sh;
  sh.hc = hc, sh.d = d;
  std::mt19937_64 g(7);
  std::normal_distribution<float> nd(0.0f, 1.0f);
  auto rnd = [&](uint64_t count, float scale, float bias) {
    std::vector<float> v(count);
    for (auto& f : v) f = bias + scale * nd(g);
    return v;
  };
  auto up = [&](const std::vector<float>& v) {
    gpu::buffer b = g_dev->alloc(v.size() * 4);
    g_dev->upload(b, v);
    return b;
  };
  gpu::buffer X = up(rnd(uint64_t(hc) * d, 1.0f, 0.0f)), Xn = up(rnd(uint64_t(hc) * d, 1.0f, 0.0f)),
              o = up(rnd(d, 1.0f, 0.0f)), scale = up(rnd(3, 0.1f, 1.0f)),
              coeff = up(rnd(gpu::kernels::hc_coeff_floats(hc), 0.1f, 0.5f)), u = g_dev->alloc(uint64_t(d) * 4),
              part = g_dev->alloc(g_kern->hc_partials_bytes(sh, 1, rows));
  std::vector<gpu::buffer> fn, base, norm;
  for (uint32_t i = 0; i < (cold ? n : 1); ++i) {
    fn.push_back(up(rnd(uint64_t(rows) * hc * d, 0.01f, 0.0f)));
    base.push_back(up(rnd(rows, 0.1f, 0.0f)));
    norm.push_back(up(rnd(d, 0.1f, 1.0f)));
  }
  gpu::buffer big = thrash && !after_mv ? g_dev->alloc(256ull << 20) : gpu::buffer{};
  gpu::buffer sink = g_dev->alloc(256);
  gpu::buffer uq = q8 ? g_dev->alloc(gpu::kernels::act_q8_bytes(d, 1)) : gpu::buffer{};
  mhc_pipes pp;
  if (pipes) {
    if (!g_kern->has_i8(format::q4tp)) {
      st.SkipWithError("no int8-activation products on this device");
      return;
    }
    pp.mats.push_back(small_matrix<fmt_q4tp>(64, d));
    pp.mats.push_back(small_matrix<fmt_q2tp>(64, d));
    pp.mats.push_back(small_matrix<fmt_mxfp4>(64, d));
    pp.mats.push_back(small_matrix<fmt_fp8_b128>(64, d));
    pp.x = up(rnd(d, 1.0f, 0.0f)), pp.w = up(rnd(d, 0.1f, 1.0f)), pp.y = g_dev->alloc(uint64_t(d) * 4);
    pp.q = g_dev->alloc(gpu::kernels::act_q8_bytes(d)), pp.out = g_dev->alloc(64 * 4);
  }
  weights* mv = after_mv ? &get_weights<fmt_fp8_b128>(d, 2 * d) : nullptr;
  gpu::commands c = g_dev->begin();
  g_kern->hc_mix(c, sh, X, fn[0], rows, 1, part);
  std::vector<std::pair<uint32_t, uint32_t>> spans;
  const uint32_t t0 = c.timestamp();
  for (uint32_t i = 0; i < n; ++i) {
    const size_t j = cold ? i : 0, jn = cold ? (i + 1) % n : 0;
    if (mv) g_kern->matmul(c, mv->copies[i % mv->copies.size()], mv->x, 1, o);
    else if (pipes) record_pipes(c, pp, pipes, d);
    else if (thrash) g_kern->stream_read(c, big, sink);
    const uint32_t ta = alone ? c.timestamp() : 0;
    if (fused) {
      gpu::kernels::hc_finish_args f;
      f.base = base[jn], f.scale = scale, f.sinkhorn = false, f.y = u, f.norm = norm[jn];
      if (q8) f.y_q8 = uq, f.y_q8_fmt = format::q4tp;
      g_kern->hc_post_finish(c, sh, o, X, coeff, 1, Xn, fn[jn], rows, part, f);
    } else {
      g_kern->hc_post(c, sh, o, X, coeff, 1, Xn, fn[jn], rows, part);
      g_kern->hc_pre_finish(c, sh, part, Xn, base[j], scale, 1, coeff, u, norm[j]);
    }
    if (alone) spans.push_back({ta, c.timestamp()});
    std::swap(X, Xn);
  }
  const uint32_t t1 = c.timestamp();
  if (!alone) {
    st.counters["us_per_boundary"] = time_recording(st, c, t0, t1) / n * 1e6;
    return;
  }
  st.counters["us_per_boundary"] = time_spans(st, c, spans) / n * 1e6;
}

/// An mHC sublayer boundary of a prefill chunk of n tokens (hc_post with the next mix, then hc_pre_finish with the
/// norm: the two dispatches dsv4_gpu_chunk.cpp records), 16 in a chain, each with its own fn (cold). Counter
/// us_per_boundary; matvec_tuning::hc_tokens (--hc-tokens) sets the tokens per mhc_block.comp workgroup.
void bm_mhc_chunk(benchmark::State& st, uint32_t n) {
  constexpr uint32_t chain = 16, hc = 4, d = 4096, rows = (2 + hc) * hc;
  gpu::kernels::hc_shape sh;
  sh.hc = hc, sh.d = d;
  std::mt19937_64 g(11);
  std::normal_distribution<float> nd(0.0f, 1.0f);
  auto up = [&](uint64_t count, float scale, float bias) {
    std::vector<float> v(count);
    for (auto& f : v) f = bias + scale * nd(g);
    gpu::buffer b = g_dev->alloc(v.size() * 4);
    g_dev->upload(b, v);
    return b;
  };
  gpu::buffer X = up(uint64_t(n) * hc * d, 1.0f, 0.0f), Xn = up(uint64_t(n) * hc * d, 1.0f, 0.0f),
              o = up(uint64_t(n) * d, 1.0f, 0.0f), scale = up(3, 0.1f, 1.0f), base = up(rows, 0.1f, 0.0f),
              norm = up(d, 0.1f, 1.0f), coeff = up(uint64_t(n) * gpu::kernels::hc_coeff_floats(hc), 0.1f, 0.5f),
              u = g_dev->alloc(uint64_t(n) * d * 4), part = g_dev->alloc(g_kern->hc_partials_bytes(sh, n, rows));
  std::vector<gpu::buffer> fn;
  for (uint32_t i = 0; i < chain; ++i) fn.push_back(up(uint64_t(rows) * hc * d, 0.01f, 0.0f));
  gpu::commands c = g_dev->begin();
  const uint32_t t0 = c.timestamp();
  for (uint32_t i = 0; i < chain; ++i) {
    g_kern->hc_post(c, sh, o, X, coeff, n, Xn, fn[i], rows, part);
    g_kern->hc_pre_finish(c, sh, part, Xn, base, scale, n, coeff, u, norm);
    std::swap(X, Xn);
  }
  const uint32_t t1 = c.timestamp();
  st.counters["us_per_boundary"] = time_recording(st, c, t0, t1) / chain * 1e6;
}

/// The expert-grouped MoE of a prefill chunk (kernels::moe with n tokens: gate/up tiles + SwiGLU + down tiles + the
/// weighted sum) at V4-Flash's shape: E experts of [I, d] gate/up and [d, I] down in format F, top-k routes per
/// token drawn uniformly (distinct per token), no shared expert (V4-Flash's is FP8: a dense GEMM). Every expert is
/// its own device copy of one encoded matrix triple. Counters: ms per call, TFLOPS (2·n·k·3·d·I useful FLOPs per
/// call), Gw_per_s (weights of the experts that got a token, decoded per second), precision (1: f16 tiles on the
/// tensor cores, 2: f16 emulated, 0: f32 tiles — the mode gemm_precision_used reports; a layout the mode cannot take
/// still falls back to the f32 tiles inside kernels::moe).
template <class F>
void bm_moe(benchmark::State& st, uint32_t E, uint64_t d, uint64_t I, uint32_t n, uint32_t k, gpu::gemm_precision p,
            act_precision act = act_precision::f32) {
  if (E < k || n == 0) {
    st.SkipWithError("vk_moe: needs --moe-experts >= 6 and --moe-tokens >= 1");
    return;
  }
  const gpu::gemm_precision_scope ps(*g_kern, p);
  std::mt19937_64 g(E * 7 + n);
  std::normal_distribution<float> nd(0.0f, 0.02f);
  auto enc = [&](uint64_t rows, uint64_t cols) {
    std::vector<float> v(rows * cols);
    for (auto& f : v) f = nd(g);
    return F::encode(v.data(), rows, cols);
  };
  const encoded_matrix eg = enc(I, d), eu = enc(I, d), ed = enc(d, I);
  auto view_of = [](const encoded_matrix& e, uint64_t rows, uint64_t cols) {
    return matrix_view{e.data.data(), e.data.size(), e.scale.empty() ? nullptr : e.scale.data(), e.scale.size(),
                       e.scale.empty() ? scale_encoding::none : scale_encoding::e8m0, rows, cols};
  };
  const expert_view one{view_of(eg, I, d), view_of(eu, I, d), view_of(ed, d, I), F::id, F::id, F::id};
  const std::vector<expert_view> experts(E, one);
  const gpu::gpu_moe m = gpu::upload_moe(*g_dev, experts);
  std::vector<float> x(uint64_t(n) * d), w(uint64_t(n) * k);
  for (auto& f : x) f = nd(g) * 50.0f;
  std::vector<uint32_t> ids(uint64_t(n) * k);
  std::vector<uint8_t> used(E, 0);
  for (uint32_t t = 0; t < n; ++t) {
    std::vector<uint32_t> perm(E);
    for (uint32_t e = 0; e < E; ++e) perm[e] = e;
    for (uint32_t j = 0; j < k; ++j) {
      std::swap(perm[j], perm[j + g() % (E - j)]);
      ids[uint64_t(t) * k + j] = perm[j];
      used[perm[j]] = 1;
      w[uint64_t(t) * k + j] = 1.0f / float(k);
    }
  }
  uint64_t active = 0;
  for (uint8_t u : used) active += u;
  gpu::buffer xb = g_dev->alloc(x.size() * 4), ib = g_dev->alloc(ids.size() * 4), wb = g_dev->alloc(w.size() * 4),
              hb = g_dev->alloc(gpu::kernels::moe_scratch_floats(m, n, k, g_tune.moe_tiles == 2) * 4),
              ob = g_dev->alloc(uint64_t(n) * d * 4);
  g_dev->upload(xb, x);
  g_dev->upload(ib, ids.data(), ids.size() * 4);
  g_dev->upload(wb, w);
  gpu::commands c = g_dev->begin();
  const uint32_t t0 = c.timestamp();
  g_kern->moe(c, m, xb, n, ib, wb, k, 10.0f, hb, ob, act);
  const uint32_t t1 = c.timestamp();
  const double per = time_recording(st, c, t0, t1);
  st.counters["ms"] = per * 1e3;
  st.counters["TFLOPS"] = per > 0 ? 2.0 * n * k * 3.0 * double(d) * double(I) / per / 1e12 : 0.0;
  st.counters["Gw_per_s"] = per > 0 ? double(active) * 3.0 * double(d) * double(I) / per / 1e9 : 0.0;
  st.counters["precision"] = double(int(g_kern->gemm_precision_used()));
}

/// The decode's MoE at batch 1 (kernels::moe with n = 1 and int8 activations: the row kernel's MOE_ROWS dispatches
/// with their tails) on the CMF q2tp file's layout: E routed experts of G gate/up [I, d] and D down [d, I] and the
/// shared expert stacked after them, top k. 64 calls chained (kernels::moe's dispatches depend on the previous
/// call's, as in a decode step), each with its own k distinct experts drawn uniformly, so their weights come from
/// DRAM as in the model (E · 9 MB ≫ the L2). Counters: us_per_moe, GBps (the planes of the k + 1 experts a call reads
/// / its time) and roofline — the figure to hold against the decode profile's per-layer MoE time.
template <class G, class D>
void bm_moe_b1(benchmark::State& st, uint32_t E, uint64_t d, uint64_t I, uint32_t k) {
  if (E < k) {
    st.SkipWithError("vk_moe_b1: needs --moe-experts >= 6");
    return;
  }
  constexpr uint32_t calls = 64;
  std::mt19937_64 g(E * 11 + k);
  std::normal_distribution<float> nd(0.0f, 0.02f);
  auto enc = [&]<class F>(uint64_t rows, uint64_t cols) {
    std::vector<float> v(rows * cols);
    for (auto& f : v) f = nd(g);
    return F::encode(v.data(), rows, cols);
  };
  const encoded_matrix eg = enc.template operator()<G>(I, d), eu = enc.template operator()<G>(I, d),
                       ed = enc.template operator()<D>(d, I);
  auto view_of = [](const encoded_matrix& e, uint64_t rows, uint64_t cols) {
    return matrix_view{e.data.data(), e.data.size(), e.scale.empty() ? nullptr : e.scale.data(), e.scale.size(),
                       e.scale.empty() ? scale_encoding::none : scale_encoding::e8m0, rows, cols};
  };
  const expert_view one{view_of(eg, I, d), view_of(eu, I, d), view_of(ed, d, I), G::id, G::id, D::id};
  const std::vector<expert_view> experts(E, one);
  const gpu::gpu_moe m = gpu::upload_moe(*g_dev, experts, &one);
  std::vector<float> x(d), w(uint64_t(calls) * k, 1.0f / float(k));
  for (auto& f : x) f = nd(g) * 50.0f;
  std::vector<uint32_t> ids(uint64_t(calls) * k), perm(E);
  for (uint32_t t = 0; t < calls; ++t) {
    for (uint32_t e = 0; e < E; ++e) perm[e] = e;
    for (uint32_t j = 0; j < k; ++j) {
      std::swap(perm[j], perm[j + g() % (E - j)]);
      ids[uint64_t(t) * k + j] = perm[j];
    }
  }
  gpu::buffer xb = g_dev->alloc(x.size() * 4), ib = g_dev->alloc(ids.size() * 4), wb = g_dev->alloc(w.size() * 4),
              hb = g_dev->alloc(gpu::kernels::moe_scratch_floats(m, 1, k) * 4), ob = g_dev->alloc(d * 4);
  g_dev->upload(xb, x);
  g_dev->upload(ib, ids.data(), ids.size() * 4);
  g_dev->upload(wb, w);
  gpu::commands c = g_dev->begin();
  const uint32_t t0 = c.timestamp();
  for (uint32_t t = 0; t < calls; ++t)
    g_kern->moe(c, m, xb, 1, gpu::view(ib, uint64_t(t) * k * 4, k * 4), gpu::view(wb, uint64_t(t) * k * 4, k * 4), k,
                10.0f, hb, ob, act_precision::i8);
  const uint32_t t1 = c.timestamp();
  const double per = time_recording(st, c, t0, t1) / calls;
  const double bytes = double(gpu::moe_slot_bytes(m)) * (k + 1);
  st.counters["us_per_moe"] = per * 1e6;
  st.counters["GBps"] = per > 0 ? bytes / per / 1e9 : 0.0;
  st.counters["roofline"] = per > 0 && g_roofline > 0 ? bytes / per / g_roofline : 0.0;
}

/// A dense GEMM of a prefill chunk: Y [n, rows] = X [n, cols] · Wᵀ in precision p (kernels::matmul with n batch
/// rows: gemm.comp's tiles), dependent products in a chain as in the model (a barrier before each), rotating through
/// the weight copies of get_weights. Counters: ms per product, TFLOPS (2·n·rows·cols per product), precision (as
/// bm_moe: 1 = f16 tiles on the tensor cores, 2 = f16 emulated, 0 = f32 tiles).
template <class F>
void bm_gemm(benchmark::State& st, uint64_t rows, uint64_t cols, uint32_t n, gpu::gemm_precision p) {
  const gpu::gemm_precision_scope ps(*g_kern, p);
  weights& w = get_weights<F>(rows, cols);
  std::mt19937_64 g(rows + 7 * cols + n);
  std::normal_distribution<float> nd(0.0f, 1.0f);
  std::vector<float> x(uint64_t(n) * cols);
  for (auto& f : x) f = nd(g);
  gpu::buffer xb = g_dev->alloc(x.size() * 4), yb = g_dev->alloc(uint64_t(n) * rows * 4);
  g_dev->upload(xb, x);
  gpu::commands c = g_dev->begin();
  const uint32_t t0 = c.timestamp();
  for (const gpu::gpu_matrix& m : w.copies) g_kern->matmul(c, m, xb, n, yb);
  const uint32_t t1 = c.timestamp();
  const double per = time_recording(st, c, t0, t1) / double(w.copies.size());
  st.counters["ms"] = per * 1e3;
  st.counters["TFLOPS"] = per > 0 ? 2.0 * n * double(rows) * double(cols) / per / 1e12 : 0.0;
  st.counters["precision"] = double(int(g_kern->gemm_precision_used()));
}

/// Best of 5 streaming reads of a buffer of max(1 GiB, ...) capped by a quarter of the device heap.
double measure_roofline(uint64_t& bytes_out) {
  const uint64_t bytes = std::min<uint64_t>(1ull << 30, g_dev->info().device_local_bytes / 4) / 16 * 16;
  gpu::buffer src = g_dev->alloc(bytes), sink = g_dev->alloc(256);
  {
    std::vector<uint8_t> junk(64ull << 20);
    for (size_t i = 0; i < junk.size(); ++i) junk[i] = uint8_t(i * 2654435761u >> 13);
    for (uint64_t off = 0; off < bytes; off += junk.size())
      g_dev->upload(gpu::view(src, off, std::min<uint64_t>(junk.size(), bytes - off)), junk.data(),
                    std::min<uint64_t>(junk.size(), bytes - off));
  }
  double best = 0;
  gpu::commands c = g_dev->begin();
  const uint32_t t0 = c.timestamp();
  g_kern->stream_read(c, src, sink);
  const uint32_t t1 = c.timestamp();
  warm_up(c, g_warmup_s);
  for (int r = 0; r < 5; ++r) {
    g_dev->submit(c);
    best = std::max(best, double(bytes) / c.seconds(t0, t1));
  }
  bytes_out = bytes;
  return best;
}

}  // namespace

int main(int argc, char** argv) {
  gpu::device_options opt;
  std::vector<char*> rest{argv[0]};
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if (a == "--device" && i + 1 < argc) opt.index = std::stoi(argv[++i]);
    else if (a == "--cache-dir" && i + 1 < argc) opt.cache_dir = argv[++i];
    else if (a == "--working-set" && i + 1 < argc) g_working_set = std::stoull(argv[++i]) << 20;
    else if (a == "--no-spirv-opt") opt.optimize_spirv = false;
    else if (a == "--f64") opt.float64 = true;
    else if (a == "--nontemporal") opt.nontemporal_weights = true;
    else if (a == "--pipeline-stats") opt.pipeline_statistics = true;
    else if (a == "--submit-ms" && i + 1 < argc) g_submit_s = std::stod(argv[++i]) / 1e3;
    else if (a == "--warmup-ms" && i + 1 < argc) g_warmup_s = std::stod(argv[++i]) / 1e3;
    else if (a == "--split" && i + 1 < argc) g_tune.split = uint32_t(std::stoul(argv[++i]));
    else if (a == "--unroll" && i + 1 < argc) g_tune.unroll = uint32_t(std::stoul(argv[++i]));
    else if (a == "--rows-per-team" && i + 1 < argc) g_tune.rows_per_team = uint32_t(std::stoul(argv[++i]));
    else if (a == "--pairs" && i + 1 < argc) g_tune.pairs = uint32_t(std::stoul(argv[++i]));
    else if (a == "--concurrent-rule" && i + 1 < argc) g_tune.concurrent = uint32_t(std::stoul(argv[++i]));
    else if (a == "--moe-rpt" && i + 1 < argc) g_tune.moe_rows_per_team = uint32_t(std::stoul(argv[++i]));
    else if (a == "--moe-pairs" && i + 1 < argc) g_tune.moe_pairs = uint32_t(std::stoul(argv[++i]));
    else if (a == "--moe-unroll" && i + 1 < argc) g_tune.moe_unroll = uint32_t(std::stoul(argv[++i]));
    else if (a == "--moe-tiles" && i + 1 < argc) g_tune.moe_tiles = uint32_t(std::stoul(argv[++i]));
    else if (a == "--moe-b1-rpt" && i + 1 < argc) g_tune.moe_b1_rows_per_team = uint32_t(std::stoul(argv[++i]));
    else if (a == "--moe-b1-pairs" && i + 1 < argc) g_tune.moe_b1_pairs = uint32_t(std::stoul(argv[++i]));
    else if (a == "--moe-b1-unroll" && i + 1 < argc) g_tune.moe_b1_unroll = uint32_t(std::stoul(argv[++i]));
    else if (a == "--moe-b1-batches" && i + 1 < argc) g_tune.moe_b1_batches = uint32_t(std::stoul(argv[++i]));
    else if (a == "--gemm-warp-tile" && i + 1 < argc) g_tune.gemm_warp_tile = uint32_t(std::stoul(argv[++i]));
    else if (a == "--hc-tokens" && i + 1 < argc) g_tune.hc_tokens = uint32_t(std::stoul(argv[++i]));
    else if (a == "--moe-tails" && i + 1 < argc) g_tune.moe_tails = uint32_t(std::stoul(argv[++i]));
    else if (a == "--moe-i8-tc" && i + 1 < argc) g_tune.moe_i8_tc = uint32_t(std::stoul(argv[++i]));
    else if (a == "--x-source" && i + 1 < argc) g_tune.x_source = uint32_t(std::stoul(argv[++i]));
    else if (a == "--sub" && i + 1 < argc) g_tune.sub = uint32_t(std::stoul(argv[++i]));
    else if (a == "--xreg-batches" && i + 1 < argc) g_tune.xreg_batches = uint32_t(std::stoul(argv[++i]));
    else if (a == "--legacy") g_tune.legacy = true;
    else if (a == "--shader-dir" && i + 1 < argc) opt.shader_dir = argv[++i];
    else if (a == "--moe-tokens" && i + 1 < argc) g_moe_tokens = uint32_t(std::stoul(argv[++i]));
    else if (a == "--moe-experts" && i + 1 < argc) g_moe_experts = uint32_t(std::stoul(argv[++i]));
    else rest.push_back(argv[i]);
  }
  try {
    g_dev = std::make_unique<gpu::device>(opt);
    g_kern = std::make_unique<gpu::kernels>(*g_dev);
    g_kern->set_tuning(g_tune);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "cmfx-bench-vk: %s\n", e.what());
    return 1;
  }
  std::printf("device: %s\nvariants: %s\n", g_dev->info().describe().c_str(), g_kern->describe().c_str());
  uint64_t rb = 0;
  g_roofline = measure_roofline(rb);
  std::printf("read roofline: %.1f GB/s (stream_read over %llu MiB, timestamps); working set per benchmark >= %llu MiB\n",
              g_roofline / 1e9, (unsigned long long)(rb >> 20), (unsigned long long)(g_working_set >> 20));
  std::fflush(stdout);
  const std::pair<uint64_t, uint64_t> shapes[] = {{1024, 4096}, {32768, 1024}, {2048, 4096}, {4096, 2048}, {4096, 8192}};
  auto add = [](const std::string& name, auto fn) {
    benchmark::RegisterBenchmark(name.c_str(), fn)->UseManualTime()->Unit(benchmark::kMicrosecond);
  };
  add("vk_dispatch/chain", [](benchmark::State& st) { bm_dispatch(st, true); });
  // the sizes of the batch-1 matvec benchmarks' matrices (q2tp 1024x4096, 4096x8192; q4tp 4096x8192; FP8 4096x8192)
  for (const uint64_t b : {1134592ull, 2269184ull, 9060352ull, 17301504ull, 33554432ull})
    add("vk_stream/" + std::to_string(b), [b](benchmark::State& st) { bm_stream(st, b); });
  add("vk_dispatch/concurrent", [](benchmark::State& st) { bm_dispatch(st, false); });
  add("vk_dispatch/chain_scale/64", [](benchmark::State& st) { bm_dispatch_scale(st, 64); });
  add("vk_dispatch/chain_scale/1048576", [](benchmark::State& st) { bm_dispatch_scale(st, 1u << 20); });
  add("vk_topk/4096/k512", [](benchmark::State& st) { bm_topk(st, 4096, 512); });
  add("vk_topk/256/k6", [](benchmark::State& st) { bm_topk(st, 256, 6); });
  add("vk_topk/4096/k512_thrash", [](benchmark::State& st) { bm_topk(st, 4096, 512, true); });
  add("vk_index_score/4096", [](benchmark::State& st) { bm_index_score(st, 4096); });
  add("vk_index_score/2048", [](benchmark::State& st) { bm_index_score(st, 2048); });
  const std::pair<const char*, mhc_case> mhc_cases[] = {
      {"post_pre", {}},
      {"post_pre_cold", {.cold = true}},
      {"post_pre_thrash", {.cold = true, .thrash = true}},
      {"post_finish", {.fused = true}},
      {"post_finish_cold", {.cold = true, .fused = true}},
      {"post_finish_thrash", {.cold = true, .thrash = true, .fused = true}},
      {"post_finish_q8", {.fused = true, .q8 = true}},
      {"post_finish_q8_thrash", {.cold = true, .thrash = true, .fused = true, .q8 = true}},
      {"post_finish_after_1_pipe", {.cold = true, .fused = true, .pipes = 1}},
      {"post_finish_after_8_pipes", {.cold = true, .fused = true, .pipes = 8}},
  };
  for (const auto& [name, k] : mhc_cases)
    add(std::string("vk_mhc/") + name + "/4x4096", [k](benchmark::State& st) { bm_mhc(st, k); });
  add("vk_mhc/chunk/" + std::to_string(g_moe_tokens) + "x4x4096",
      [](benchmark::State& st) { bm_mhc_chunk(st, g_moe_tokens); });
  add("vk_mhc/post_finish_after_wo_b/4x4096", [](benchmark::State& st) {
    bm_mhc(st, {.cold = true, .thrash = true, .fused = true, .after_mv = true});
  });
  for_each_type(all_formats{}, [&]<class F>() {
    for (const auto& [r, c] : shapes) {
      if (!F::shape_ok(r, c)) continue;
      const std::string tail = std::string(F::name) + "/" + std::to_string(r) + "x" + std::to_string(c);
      add("vk_matvec/" + tail, [r = r, c = c](benchmark::State& st) { bm_matvec<F>(st, r, c, act_precision::f32, false); });
      if (g_kern->has_i8(F::id))
        add("vk_matvec_i8/" + tail, [r = r, c = c](benchmark::State& st) { bm_matvec<F>(st, r, c, act_precision::i8, false); });
      add("vk_matvec_chain/" + tail, [r = r, c = c](benchmark::State& st) {
        bm_matvec<F>(st, r, c, g_kern->has_i8(F::id) ? act_precision::i8 : act_precision::f32, true);
      });
      // the f32-activation chain of the formats whose chain above takes int8 (the decode's --act f32 products)
      if (g_kern->has_i8(F::id))
        add("vk_matvec_chain_f32/" + tail, [r = r, c = c](benchmark::State& st) {
          bm_matvec<F>(st, r, c, act_precision::f32, true);
        });
    }
  });
  // Dense GEMMs of a prefill chunk (--moe-tokens rows) on f16 tiles, at the same shapes
  for_each_type(all_formats{}, [&]<class F>() {
    for (const auto& [r, c] : shapes)
      if (F::shape_ok(r, c))
        add("vk_gemm_f16/" + std::string(F::name) + "/" + std::to_string(r) + "x" + std::to_string(c) + "/n" +
                std::to_string(g_moe_tokens),
            [r = r, c = c](benchmark::State& st) { bm_gemm<F>(st, r, c, g_moe_tokens, gpu::gemm_precision::f16); });
  });
  // The expert-grouped MoE of a prefill chunk at V4-Flash's shape (256 experts, d 4096, I 2048, top 6)
  for_each_type(all_formats{}, [&]<class F>() {
    if (F::id != format::q2tp && F::id != format::q4tp && F::id != format::mxfp4) return;
    for (const auto& [pname, p] : {std::pair{"f16", gpu::gemm_precision::f16}, std::pair{"f32", gpu::gemm_precision::f32}})
      add(std::string("vk_moe_") + pname + "/" + std::string(F::name) + "/" + std::to_string(g_moe_experts) +
              "x4096x2048/n" + std::to_string(g_moe_tokens),
          [p = p](benchmark::State& st) { bm_moe<F>(st, g_moe_experts, 4096, 2048, g_moe_tokens, 6, p); });
    if (g_kern->has_i8(F::id))
      add(std::string("vk_moe_i8/") + std::string(F::name) + "/" + std::to_string(g_moe_experts) + "x4096x2048/n" +
              std::to_string(g_moe_tokens),
          [](benchmark::State& st) {
            bm_moe<F>(st, g_moe_experts, 4096, 2048, g_moe_tokens, 6, gpu::gemm_precision::f32, act_precision::i8);
          });
  });
  // The decode's batch-1 MoE on the CMF q2tp layout (q2tp gate/up, q4tp down, the shared expert stacked), top 6
  if (g_kern->has_i8(format::q2tp) && g_kern->has_i8(format::q4tp))
    add("vk_moe_b1/q2tp_q4tp/" + std::to_string(g_moe_experts) + "x4096x2048",
        [](benchmark::State& st) { bm_moe_b1<fmt_q2tp, fmt_q4tp>(st, g_moe_experts, 4096, 2048, 6); });
  int ac = int(rest.size());
  benchmark::Initialize(&ac, rest.data());
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  for (const std::string& l : g_dev->pipeline_statistics()) std::printf("pipeline %s\n", l.c_str());
  g_w = weights{};
  g_kern.reset();
  g_dev.reset();
  return 0;
}
