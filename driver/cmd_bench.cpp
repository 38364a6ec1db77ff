// `cmfx bench --synthetic v4-flash|tiny|v41-flash|v41-tiny`: the speed of the whole V4 or V4.1 graph on a Vulkan
// device at the real dimensions, with random weights (driver/model/dsv4_synthetic.hpp, dsv41_synthetic.hpp) — no
// model file needed. Prints prefill and
// decode tok/s at batch 1, the weight bytes one decode step reads, and their ratio to the device's read bandwidth
// measured in the same run (a streaming read of a buffer far above the L2, kernels::stream_read).
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <random>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "cmfx/core/error.hpp"
#include "cmfx/formats/format_list.hpp"
#include "cmfx/sample/sampler.hpp"
#include "cmfx/vk/kernels.hpp"
#include "byte_size.hpp"
#include "commands.hpp"
#include "model/dsv4_gpu.hpp"
#include "model/dsv41_gpu.hpp"
#include "model/dsv41_synthetic.hpp"
#include "model/dsv4_synthetic.hpp"

namespace cmfx::driver {

namespace {

using clk = std::chrono::steady_clock;
double since(clk::time_point t) { return std::chrono::duration<double>(clk::now() - t).count(); }

/// Best-of-5 streaming-read bandwidth (bytes/s) over a buffer of `bytes`.
double read_roofline(gpu::device& dev, gpu::kernels& k, uint64_t bytes) {
  gpu::buffer src = dev.alloc(bytes), sink = dev.alloc(256);
  {
    gpu::commands c = dev.begin();
    c.fill(src, bytes, 0x3F800000u);  // 1.0f everywhere: nothing pathological for the read kernel
    dev.submit(c);
  }
  gpu::commands c = dev.begin();
  const uint32_t t0 = c.timestamp();
  k.stream_read(c, src, sink);
  const uint32_t t1 = c.timestamp();
  double best = 0;
  for (int i = 0; i < 6; ++i) {
    dev.submit(c);
    if (i) best = std::max(best, double(bytes) / c.seconds(t0, t1));  // the first run warms up
  }
  return best;
}

void print_profile(const gpu_graph_profile& p) {
  if (!p.steps) return;
  const double n = double(p.steps);
  std::printf("per-step device time by phase (%llu profiled decode steps, ms/step):\n", (unsigned long long)p.steps);
  const std::pair<const char*, double> rows[] = {
      {"mHC pre/post + norms", p.hc},    {"attention projections", p.attn_proj}, {"compressor + q/kv rope", p.compress},
      {"indexer score + top-k", p.index}, {"sparse attention", p.attn_core},    {"wo_a + wo_b + hc_post", p.attn_out},
      {"router + routing", p.route},      {"experts (+ shared)", p.experts},     {"head", p.head}};
  for (auto& [name, s] : rows) std::printf("  %-26s %8.3f  (%4.1f %%)\n", name, s / n * 1e3, 100.0 * s / std::max(p.total, 1e-30));
  std::printf("  %-26s %8.3f\n", "total (timestamped)", p.total / n * 1e3);
  if (!p.ops.empty()) std::printf("per-op device time (us/step, a timestamp after every op of the layers listed):\n");
  for (auto& [name, s] : p.ops) std::printf("  %-52s %9.1f\n", name.c_str(), s / n * 1e6);
}

}  // namespace

bool bench_synth_options(const bench_args& a, dsv4_synth_options& so, dsv41_synth_options& so41) {
  if (a.synthetic.empty()) throw usage_error("bench: --synthetic v4-flash|tiny|v41-flash|v41-tiny is required");
  const bool v41 = a.synthetic.rfind("v41-", 0) == 0;
  if (v41) {
    so41.preset = dsv41_synth_preset(a.synthetic == "v41-tiny" ? "tiny" : a.synthetic);
    so41.experts = dsv4_synth_format(a.weights);
    so41.dense = dsv4_synth_format(a.dense);
    if (!a.expert_down.empty()) so41.expert_down = dsv4_synth_format(a.expert_down);
    so41.layers = a.layers;
    so41.seed = a.seed;
    so41.variants = a.variants;
    so41.shared_routed = a.shared_expert == "routed";
  } else {
    so.preset = dsv4_synth_preset(a.synthetic);
    so.experts = dsv4_synth_format(a.weights);
    so.dense = dsv4_synth_format(a.dense);
    if (!a.expert_down.empty()) so.expert_down = dsv4_synth_format(a.expert_down);
    so.layers = a.layers;
    so.seed = a.seed;
    so.variants = a.variants;
    so.shared_routed = a.shared_expert == "routed";
  }
  return v41;
}

int run_bench(const bench_args& a) {
  // refused rather than ignored: the folds write int8 copies for the dense products' int8 inputs, on the device
  const bool fold_given = a.fold_quant != "default" && a.fold_quant != "none";
  if (fold_given && (a.backend == "cpu" || (a.dense_act.empty() ? a.act : a.dense_act) != "i8"))
    throw usage_error("bench: --fold-quant " + a.fold_quant + " needs --backend vulkan and int8 dense products (--act i8, "
                      "or --dense-act i8)");
  if (a.prefill_shared != "default" && (a.backend == "cpu" || a.shared_expert != "routed"))
    throw usage_error("bench: --prefill-shared " + a.prefill_shared + " needs --backend vulkan and --shared-expert "
                      "routed (the shared expert stacked with the routed ones)");
  if (a.backend == "cpu") return run_bench_cpu(a);
  if (a.threads != 0)  // refused rather than ignored: the Vulkan graph's host threads are --copy-threads
    throw usage_error("bench --backend vulkan: --threads is a --backend cpu option (host threads packing streamed "
                      "experts: --copy-threads)");
  dsv4_synth_options so;
  dsv41_synth_options so41;
  const bool v41 = bench_synth_options(a, so, so41);
  if (v41 && (a.fold_quant == "u" || a.fold_quant == "both"))  // refused before any device work
    throw usage_error("bench: --fold-quant u / both: V4.1's boundaries have no binding left for u's int8 copy (o only)");
  if (a.prompt + a.tokens > a.ctx)
    throw usage_error("bench: --prompt + --tokens (" + std::to_string(a.prompt + a.tokens) + ") exceed --ctx " +
                      std::to_string(a.ctx));
  if (a.profile_at && a.profile_at + 16 > a.ctx)
    throw usage_error("bench: --profile-at " + std::to_string(a.profile_at) + " + 16 profiled steps exceed --ctx " +
                      std::to_string(a.ctx));

  gpu::device_options dopt;
  dopt.index = a.device;
  dopt.shader_dir = a.shader_dir;
  dopt.allow_shuffle = a.shuffle;
  dopt.float64 = a.f64;
  dopt.nontemporal_weights = a.nontemporal;
  dopt.transfer_queue = a.copy_queue == "transfer" && !a.vram_budget.empty();  // for the expert cache's copies
  gpu::device dev(dopt);
  gpu::kernels k(dev);
  if (a.mv_subgroups || a.mv_rows_per_team || a.mv_pairs || a.mv_concurrent || a.moe_tails || a.moe_i8_tc ||
      a.gemm_min_groups || a.mv_sub || a.mv_x_source || a.mv_xreg_batches || a.moe_b1_rpt ||
      a.moe_b1_pairs || a.moe_b1_unroll || a.moe_b1_batches || a.hc_tokens || a.gemm_warp_tile) {
    gpu::matvec_tuning tu;
    tu.target_subgroups = a.mv_subgroups, tu.rows_per_team = a.mv_rows_per_team, tu.moe_tails = a.moe_tails;
    tu.pairs = a.mv_pairs, tu.concurrent = a.mv_concurrent, tu.sub = a.mv_sub, tu.x_source = a.mv_x_source;
    tu.xreg_batches = a.mv_xreg_batches;
    tu.moe_b1_rows_per_team = a.moe_b1_rpt, tu.moe_b1_pairs = a.moe_b1_pairs, tu.moe_b1_unroll = a.moe_b1_unroll;
    tu.moe_b1_batches = a.moe_b1_batches;
    tu.moe_i8_tc = a.moe_i8_tc, tu.gemm_min_groups = a.gemm_min_groups, tu.hc_tokens = a.hc_tokens;
    tu.gemm_warp_tile = a.gemm_warp_tile;
    k.set_tuning(tu);
  }
  std::printf("device: %s\n", dev.info().describe().c_str());
  if (!dev.info().coop_shapes.empty()) std::printf("cooperative-matrix shapes: %s\n", dev.info().coop_shapes.c_str());
  const uint64_t rbytes = std::min({a.roofline_mib << 20, std::max<uint64_t>(dev.info().device_local_bytes / 8, 64ull << 20),
                                     dev.info().max_allocation / 256 * 256});
  const double roof = read_roofline(dev, k, rbytes);
  std::printf("read roofline: %.1f GB/s (stream_read over %.0f MiB, best of 5)\n", roof / 1e9, double(rbytes) / (1 << 20));

  auto t = clk::now();
  dsv4_weights w;
  dsv41_weights w41;
  if (v41)
    w41 = dsv41_synthetic(so41);
  else
    w = dsv4_synthetic(so);
  const double gen_s = since(t);
  t = clk::now();
  const act_precision xact = a.act == "i8" ? act_precision::i8 : act_precision::f32;
  const act_precision dact = a.dense_act.empty() ? xact : a.dense_act == "i8" ? act_precision::i8 : act_precision::f32;
  const uint64_t budget = a.vram_budget.empty() ? 0 : parse_byte_size(a.vram_budget, "--vram-budget");
  chunk_streaming cs;
  cs.transfer_copies = a.copy_queue == "transfer", cs.pass_overlap = a.pass_overlap;
  cs.prefetch_bytes = a.prefetch == "auto" ? prefetch_auto : parse_byte_size(a.prefetch, "--prefetch");
  cs.cached_staging = a.staging == "cached", cs.stream_pack = a.pack == "stream";
  std::unique_ptr<gpu_graph> mp;
  if (v41) {
    dsv41_gpu_options go;
    go.max_ctx = a.ctx, go.expert_act = xact, go.vram_budget = budget, go.copy_threads = a.copy_threads;
    go.budget_keeps_chunks = a.budget_keeps_chunks;
    go.cold = a.cold, go.cold_margin = a.cold_margin, go.cache_spin_waits = a.cache_wait == "spin";
    go.cache_cpu_chunk = a.cpu_chunk, go.cache_prefetch_d2d_compute = a.prefetch_d2d == "compute";
    apply_streaming(cs, go);
    go.dense_act = dact;
    go.prefill_chunk = a.prefill_chunk, go.gemm = a.gemm, go.prefill_experts = a.prefill_experts;
    if (a.fold_quant != "default") go.fold_o_q8 = a.fold_quant == "o";
    if (a.fuse_route != "default") go.fuse_route = a.fuse_route == "on";
    if (a.prefill_shared != "default") go.prefill_shared_apart = a.prefill_shared == "apart";
    go.pipeline = !a.no_pipeline;
    mp = std::make_unique<dsv41_gpu_model>(w41, dev, k, go);
  } else {
    dsv4_gpu_options go;
    go.max_ctx = a.ctx, go.expert_act = xact, go.vram_budget = budget, go.copy_threads = a.copy_threads;
    go.budget_keeps_chunks = a.budget_keeps_chunks;
    go.cold = a.cold, go.cold_margin = a.cold_margin, go.cache_spin_waits = a.cache_wait == "spin";
    go.cache_cpu_chunk = a.cpu_chunk, go.cache_prefetch_d2d_compute = a.prefetch_d2d == "compute";
    apply_streaming(cs, go);
    go.prefill_chunk = a.prefill_chunk, go.gemm = a.gemm, go.prefill_experts = a.prefill_experts;
    go.dense_act = dact;  // the decode's q4tp / q2tp / MXFP4 dense products (--dense) too, as `cmfx run --act i8`
    if (a.fold_quant != "default") {
      go.fold_o_q8 = a.fold_quant == "o" || a.fold_quant == "both";
      go.fold_u_q8 = a.fold_quant == "u" || a.fold_quant == "both";
    }
    if (a.fuse_route != "default") go.fuse_route = a.fuse_route == "on";
    if (a.prefill_shared != "default") go.prefill_shared_apart = a.prefill_shared == "apart";
    go.pipeline = !a.no_pipeline;
    mp = std::make_unique<dsv4_gpu_model>(w, dev, k, go);
  }
  gpu_graph& m = *mp;
  const double up_s = since(t);
  std::printf("model: synthetic %s, %u layers, experts %s%s (%s activations), dense %s%s, shared expert %s; weights %.2f GB on the device (generated %.1f s, "
              "uploaded %.1f s), state + scratch %.1f MB, ctx %llu\n",
              a.synthetic.c_str(), m.layer_count(), a.weights.c_str(),
              a.expert_down.empty() ? "" : (" (w2 " + a.expert_down + ")").c_str(), a.act.c_str(), a.dense.c_str(),
              dact == act_precision::i8 && k.has_i8(dsv4_synth_format(a.dense)) ? " (i8 activations at decode)" : "",
              a.shared_expert == "routed" ? "in the routed formats" : "dense",
              double(m.weight_bytes()) / 1e9, gen_s, up_s, double(m.state_bytes()) / 1e6, (unsigned long long)a.ctx);
  std::printf("host matrices: %s\n", a.variants ? (std::to_string(a.variants) + " distinct per role (--variants)").c_str()
                                                 : "the preset's variants per role (full-size presets: one, shared)");

  std::mt19937_64 g(a.seed);
  std::uniform_int_distribution<uint32_t> pick(0, m.vocab() - 1);
  // Decode sampling (--temp > 0; or greedy with --logprobs): chosen on the device, chained, or the host's sampler over
  // the logits read back.
  sampling_params sp;
  sp.temperature = a.temp, sp.top_p = a.top_p, sp.min_p = a.min_p, sp.top_k = int32_t(a.top_k), sp.seed = a.seed;
  sp.repetition_penalty = a.repeat_penalty, sp.presence_penalty = a.presence_penalty;
  sp.frequency_penalty = a.frequency_penalty;
  sp.logprobs = a.logprobs >= 0, sp.top_logprobs = std::max(a.logprobs, 0);
  const bool sampled = a.temp > 0.0f || sp.logprobs, on_device = sampled && a.sampling == "device";
  step_logprobs lp;  // each decode token's, with --logprobs
  if (on_device && !(m.samples_on_device() && sp.device_samplable(m.vocab(), gpu::kernels::sample_max_top_k,
                                                                  int32_t(gpu::kernels::logprobs_max_top))))
    throw usage_error("bench: --sampling device needs a device with f64 and 64-bit integers in shaders (and greedy "
                      "decode without penalties); use --sampling host");
  sampler smp(m.vocab(), sp);

  const bool chain = a.decode_chain == "on";
  m.set_chaining(chain);
  // Warm-up: builds every pipeline of a decode step (GLSL compiles are not part of the timings).
  t = clk::now();
  {
    const uint32_t w0 = pick(g);
    (void)m.forward(std::span<const uint32_t>(&w0, 1), true);
    (void)m.step_greedy(pick(g));
    if (on_device)
      (void)m.decode_sampled_each(pick(g), 1, device_sampling::of(smp, &lp), [](uint32_t) { return true; });
    // a prefill chunk's pipelines (V4): more rows than one 8-row GEMM tile, so the tiled GEMMs are built too
    std::vector<uint32_t> w16(16);
    for (uint32_t& x : w16) x = pick(g);
    (void)m.forward(w16, true);
    // a step at the far end of the context: kernels choose other variants for long key lists (the indexer's
    // scores beyond 2048 entries), which would otherwise be built inside the timed far decode
    if (a.far && a.ctx > a.prompt + a.tokens + 1) {
      m.bench_seek(a.ctx - 2);
      (void)m.step_greedy(pick(g));
    }
  }
  m.reset();
  std::printf("warm-up (pipeline builds): %.2f s\n", since(t));
  if (a.nontemporal)
    std::printf("nontemporal: %llu weight loads marked in the compiled shaders\n",
                (unsigned long long)k.stats().nontemporal_loads);
  // Prefill: the prompt through forward() — in chunks of --prefill-chunk positions (one recording each; under the
  // expert cache cut at each layer's routing, its experts in passes) — from position 0, --prefill-reps times where it
  // runs in chunks without the expert cache. The median run is the figure; the first one is
  // reported beside it (the device's clocks may still be ramping up after the idle warm-up).
  std::vector<uint32_t> prompt(a.prompt);
  for (uint32_t& x : prompt) x = pick(g);
  smp.set_prompt(std::vector<int32_t>(prompt.begin(), prompt.end()));  // the repetition penalty's prompt tokens
  // Under the expert cache once too: a second run would start with the slots the first left.
  const uint32_t reps = m.prefill_chunked() && a.prompt > 1 && !m.cache_stats().active ? a.prefill_reps : 1;
  std::vector<std::pair<double, gpu_prefill_stats>> runs;
  const gpu_expert_cache_stats cp0 = m.cache_stats();
  for (uint32_t r = 0; r < reps; ++r) {
    if (r) m.reset();
    t = clk::now();
    (void)m.forward(prompt, true);
    runs.emplace_back(since(t), m.last_prefill());
  }
  const gpu_expert_cache_stats cp = gpu_expert_cache_since(m.cache_stats(), cp0);  // the prompt's share
  const double first_s = runs.front().first;
  std::vector<std::pair<double, gpu_prefill_stats>> sorted = runs;
  std::sort(sorted.begin(), sorted.end(), [](const auto& x, const auto& y) { return x.first < y.first; });
  const auto& [pre_s, pre_stats] = sorted[sorted.size() / 2];
  // Decode: greedy, the device's argmax fed back.
  uint32_t tok = pick(g);
  const gpu_expert_cache_stats c0 = m.cache_stats();
  uint64_t disp = 0;
  double rec = 0, busy = 0;
  gpu_graph::step_host_seconds host;  // summed over the steps run one at a time
  auto add_host = [&] {
    const gpu_graph::step_host_seconds h = m.last_step_host();
    host.prepare += h.prepare, host.record_ahead += h.record_ahead, host.wait += h.wait;
  };
  t = clk::now();
  if (a.tokens && on_device && chain) {  // sampled on the device, chained (decode_sampled_each)
    m.decode_sampled_each(tok, a.tokens, device_sampling::of(smp, &lp), [&](uint32_t id) {
      smp.accept_drawn(int32_t(id));
      tok = id;
      return true;
    });
    disp = uint64_t(m.last_dispatches()) * a.tokens;
    rec = m.last_record_seconds() * double(a.tokens);
    busy = m.last_device_seconds() * double(a.tokens);
  } else if (on_device) {  // --decode-chain off: decode_sampled_each step by step, each step's figures summed
    m.decode_sampled_each(tok, a.tokens, device_sampling::of(smp, &lp), [&](uint32_t id) {
      smp.accept_drawn(int32_t(id));
      tok = id;
      disp += m.last_dispatches();
      rec += m.last_record_seconds();
      busy += m.last_device_seconds();
      add_host();
      return true;
    });
  } else if (sampled) {  // the logits read back, the host's sampler
    for (uint64_t i = 0; i < a.tokens; ++i) {
      const std::vector<float> l = m.forward(std::span<const uint32_t>(&tok, 1), true);
      tok = uint32_t(smp.sample(l).token);
      disp += m.last_dispatches();
      rec += m.last_record_seconds();
      busy += m.last_device_seconds();
      add_host();
    }
  } else if (a.tokens && m.chains_decode()) {  // the steps chained on the device (decode_greedy)
    tok = m.decode_greedy(tok, a.tokens).back();
    disp = uint64_t(m.last_dispatches()) * a.tokens;
    rec = m.last_record_seconds() * double(a.tokens);
    busy = m.last_device_seconds() * double(a.tokens);
  } else {
    for (uint64_t i = 0; i < a.tokens; ++i) {
      tok = m.step_greedy(tok);
      disp += m.last_dispatches();
      rec += m.last_record_seconds();
      busy += m.last_device_seconds();
      add_host();
    }
  }
  const double dec_s = since(t);
  const gpu_expert_cache_stats cd = gpu_expert_cache_since(m.cache_stats(), c0);  // the decode's share
  const double pre_tps = a.prompt ? double(a.prompt) / pre_s : 0, dec_tps = a.tokens ? double(a.tokens) / dec_s : 0;
  const double bpt = double(m.bytes_per_token());
  const bool chunked = m.prefill_chunked();
  std::string pre_how = "token by token";
  if (chunked) {
    const gpu::gemm_precision_scope gs(k, a.gemm);
    pre_how = "chunks of " + std::to_string(a.prefill_chunk) + " positions, tiled GEMMs " +
              (k.gemm_precision_used() == gpu::gemm_precision::f16 ? "f16 on the tensor cores where a tile's layout allows"
                                                                   : "f32") +
              (a.prefill_experts == prefill_expert_mode::f16   ? ", experts on them"
               : a.prefill_experts == prefill_expert_mode::act ? ", experts in the --act precision"
                                                           : ", experts on them or in the --act precision, the faster");
  }
  std::printf("prefill: %llu tokens in %.3f s = %.1f tok/s (%s)\n", (unsigned long long)a.prompt, pre_s, pre_tps,
              pre_how.c_str());
  if (runs.size() > 1)
    std::printf("         median of %zu runs from position 0; the first run: %.3f s = %.1f tok/s\n", runs.size(),
                first_s, double(a.prompt) / first_s);
  if (pre_stats.chunks && cp.active)  // the chunks cut at each layer's routing: their device work is in the waits
    std::printf("         that run: %u chunks, %u dispatches; host preparation %.1f ms, recording, passes and waits "
                "%.1f ms (under the expert cache each chunk is cut at every layer's routing and waited for)\n",
                pre_stats.chunks, pre_stats.dispatches, pre_stats.prep_s * 1e3, pre_stats.record_s * 1e3);
  else if (pre_stats.chunks)
    std::printf("         that run: %u chunks, %u dispatches; host preparation %.1f ms, recording %.1f ms (%s), "
                "device time %.1f ms (%.1f tok/s of device time)\n",
                pre_stats.chunks, pre_stats.dispatches, pre_stats.prep_s * 1e3, pre_stats.record_s * 1e3,
                a.no_pipeline ? "serial with the device" : "each chunk's while the one before runs",
                pre_stats.device_s * 1e3, pre_stats.device_s > 0 ? double(a.prompt) / pre_stats.device_s : 0.0);
  if (pre_stats.chunks && cp.active)
    std::printf("         prefill %s\n", gpu_expert_cache_line(cp, m.experts()).c_str());
  char how[200] = "greedy on the device";
  if (sampled)
    std::snprintf(how, sizeof how, "%s %s: T %g, top-p %g, min-p %g, top-k %u%s, logprobs %d",
                  a.temp > 0.0f ? "sampled" : "greedy", on_device ? "on the device" : "on the host", double(a.temp),
                  double(a.top_p), double(a.min_p), a.top_k, sp.has_penalties() ? ", penalties" : "", a.logprobs);
  const bool chained = (on_device || !sampled) && m.chains_decode();
  std::printf("decode : %llu tokens in %.2f s = %.2f tok/s at positions %llu..%llu (batch 1, %s; %s)\n",
              (unsigned long long)a.tokens, dec_s, dec_tps, (unsigned long long)a.prompt,
              (unsigned long long)(a.prompt + a.tokens), how,
              chained ? "chained on the device" : "each step run by itself");
  std::printf("         %.3f GB of weights read per token -> %.1f GB/s = %.3f of the read roofline; %.0f dispatches "
              "and %.2f ms of recording per token\n",
              bpt / 1e9, bpt * dec_tps / 1e9, bpt * dec_tps / roof, a.tokens ? double(disp) / double(a.tokens) : 0.0,
              a.tokens ? rec / double(a.tokens) * 1e3 : 0.0);
  if (busy > 0 && a.tokens)
    std::printf("         device time %.3f ms of the %.3f ms per token (%.1f %%; the rest: submission, the argmax "
                "read-back, the next token's parameters)\n",
                busy / double(a.tokens) * 1e3, dec_s / double(a.tokens) * 1e3, 100.0 * busy / dec_s);
  if (a.tokens && host.prepare + host.record_ahead + host.wait > 0) {
    const double n = double(a.tokens) / 1e3;
    std::printf("         host per step (run one at a time): %.3f ms before its submission, %.3f ms recording the next "
                "step meanwhile, %.3f ms blocked on its fence%s\n",
                host.prepare / n, host.record_ahead / n, host.wait / n,
                cd.active ? " (with the expert cache: its whole token)" : "");
  }
  if (cd.active) std::printf("         decode %s\n", gpu_expert_cache_line(cd, m.experts()).c_str());
  double far_tps = 0;
  if (a.far && a.ctx > a.prompt + a.tokens + 1) {
    // Decode at the far end of the context (positions ctx − tokens …) after a jump over random state (bench_seek).
    m.bench_seek(a.ctx - a.tokens - 1);
    t = clk::now();
    if (a.tokens) tok = m.decode_greedy(tok, a.tokens).back();
    const double far_s = since(t);
    far_tps = double(a.tokens) / far_s;
    std::printf("decode : %.2f tok/s at positions %llu..%llu (state randomised by a seek; %.1f %% of the short-context rate)\n",
                far_tps, (unsigned long long)(a.ctx - a.tokens - 1), (unsigned long long)(a.ctx - 1),
                100.0 * far_tps / std::max(dec_tps, 1e-30));
  }
  if (a.profile && a.prompt > 1) {  // the prompt again, with a timestamp after every op group of each chunk
    m.reset();
    m.set_profile(true, {});
    (void)m.forward(prompt, true);
    m.set_profile(false);
    const std::string pp = m.prefill_profile();
    if (!pp.empty()) std::printf("prefill device time per op (all layers, all chunks):\n%s", pp.c_str());
  }
  if (a.profile && a.tokens) {
    m.bench_seek(a.profile_at ? a.profile_at : a.prompt);
    m.set_profile(true, m.kind_layers());  // per-op detail of the first layer of each kind
    for (uint64_t i = 0; i < std::min<uint64_t>(a.tokens, 16); ++i) tok = m.step_greedy(tok);
    print_profile(m.profile());
  }
  if (a.json)
    std::printf("{\"prefill_tps\": %.3f, \"prefill_first_tps\": %.3f, \"decode_tps\": %.3f, \"decode_far_tps\": %.3f, "
                "\"bytes_per_token\": %.0f, \"roofline_gbps\": %.3f, \"roofline_ratio\": %.4f, \"weight_bytes\": %llu, \"cache_slots\": %u, "
                "\"cache_hit_rate\": %.4f, \"cache_bytes_per_token\": %.0f, \"cpu_experts_per_token\": %.3f, "
                "\"decode_chained\": %s}\n",
                pre_tps, a.prompt ? double(a.prompt) / first_s : 0.0, dec_tps, far_tps, bpt, roof / 1e9,
                bpt * dec_tps / roof, (unsigned long long)m.weight_bytes(),
                cd.active ? cd.slots : 0u, cd.lookups ? double(cd.hits) / double(cd.lookups) : 1.0,
                cd.tokens ? double(cd.bytes_moved) / double(cd.tokens) : 0.0,
                cd.tokens ? double(cd.cpu_experts) / double(cd.tokens) : 0.0, chained ? "true" : "false");
  return 0;
}

}  // namespace cmfx::driver
