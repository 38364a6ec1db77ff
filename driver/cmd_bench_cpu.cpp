// `cmfx bench --backend cpu --synthetic v4-flash|tiny|v41-flash|v41-tiny`: the speed of the whole V4 or V4.1 graph
// on the CPU (dsv4_model / dsv41_model) with random weights at the real dimensions — the CPU counterpart of
// cmd_bench.cpp. Prints prefill and greedy decode tok/s at batch 1, the weight bytes one decode step reads
// (model/token_bytes.hpp, counted as the GPU graphs count theirs) and their ratio to a streaming read measured in the
// same run with the same thread count (cmfx/core/read_bandwidth.hpp).
//
// The synthetic models share their matrices between layers and experts (--variants 0: one per role), which lets a
// CPU's caches serve what a real model reads from DRAM; `--variants N` gives N distinct matrices per role.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <random>
#include <span>
#include <string>
#include <vector>

#include "cmfx/core/error.hpp"
#include "cmfx/core/read_bandwidth.hpp"
#include "cmfx/core/thread_pool.hpp"
#include "commands.hpp"
#include "model/cpu_profile.hpp"
#include "model/dsv41_forward.hpp"
#include "model/dsv41_synthetic.hpp"
#include "model/dsv4_forward.hpp"
#include "model/dsv4_synthetic.hpp"
#include "model/token_bytes.hpp"

namespace cmfx::driver {

namespace {

using clk = std::chrono::steady_clock;
double since(clk::time_point t) { return std::chrono::duration<double>(clk::now() - t).count(); }

uint32_t argmax(const std::vector<float>& l) {
  return uint32_t(std::max_element(l.begin(), l.end()) - l.begin());
}

/// Options of the Vulkan graph that the CPU bench does not have: refused rather than ignored.
void refuse_vulkan_options(const bench_args& a) {
  const bench_args d;
  std::string bad;
  auto flag = [&](bool set, const char* name) {
    if (set) bad += (bad.empty() ? "" : ", ") + std::string(name);
  };
  flag(a.device != d.device, "--device");
  flag(!a.vram_budget.empty(), "--vram-budget");
  flag(a.profile_at != d.profile_at, "--profile-at");
  flag(a.temp != d.temp || a.logprobs != d.logprobs, "--temp / --logprobs (the CPU bench decodes greedily)");
  flag(!a.dense_act.empty(), "--dense-act");
  flag(a.prefill_reps != d.prefill_reps, "--prefill-reps");
  flag(!a.shader_dir.empty(), "--shader-dir");
  flag(a.f64, "--f64");
  flag(a.pass_overlap != d.pass_overlap, "--no-pass-overlap");
  flag(a.copy_queue != d.copy_queue, "--copy-queue");
  flag(a.prefetch != d.prefetch || a.prefetch_d2d != d.prefetch_d2d, "--prefetch / --prefetch-d2d");
  flag(a.staging != d.staging || a.pack != d.pack, "--staging / --pack");
  if (!bad.empty()) throw usage_error("bench --backend cpu: " + bad + (bad.find(',') == std::string::npos ? " is" : " are") +
                                      " --backend vulkan option(s)");
}

struct cpu_figures {
  double gen_s = 0, warm_s = 0, pre_s = 0, dec_s = 0;
  cpu_profile prof, pre_prof;  // the decode steps' and the prefill call's phases (--profile)
};

/// Warm-up (one token on a state of its own: first-touch allocations), the prompt's prefill in one forward call,
/// then `tokens` greedy steps.
template <class Model, class Logits>
cpu_figures time_graph(Model& m, Logits last, const bench_args& a, uint32_t vocab) {
  cpu_figures f;
  std::mt19937_64 g(a.seed);
  std::uniform_int_distribution<uint32_t> pick(0, vocab - 1);
  std::vector<uint32_t> prompt(std::max<uint64_t>(a.prompt, 1));
  for (auto& t : prompt) t = pick(g);
  auto t = clk::now();
  {
    auto warm = m.new_state();
    (void)m.forward(std::span<const uint32_t>(prompt.data(), 1), warm, last);
  }
  f.warm_s = since(t);
  auto st = m.new_state();
  if (a.profile) m.set_profile(&f.pre_prof);
  t = clk::now();
  std::vector<float> logits = m.forward(std::span<const uint32_t>(prompt.data(), prompt.size()), st, last);
  f.pre_s = since(t);
  uint32_t tok = argmax(logits);
  if (a.profile) m.set_profile(&f.prof);
  t = clk::now();
  for (uint64_t i = 0; i < a.tokens; ++i) {
    logits = m.forward(std::span<const uint32_t>(&tok, 1), st, last);
    tok = argmax(logits);
  }
  f.dec_s = since(t);
  m.set_profile(nullptr);
  return f;
}

/// The model over the synthetic weights `w`, then time_graph; bytes: the weights a decode step reads.
template <class Model, class Options, class Weights, class Logits>
cpu_figures build_and_time(Weights w, token_bytes (*count)(const Weights&), Logits last, const bench_args& a,
                           act_precision act, token_bytes& bytes, uint32_t& layers) {
  bytes = count(w);
  layers = uint32_t(w.layers.size());
  const uint32_t vocab = w.cfg.vocab;
  Options co;
  co.threads = a.threads, co.matmul_act = act;
  Model m(std::move(w), co);
  return time_graph(m, last, a, vocab);
}

/// Phases as a table: ms per token and share of the wall time `dec_s` of `tokens` tokens ("outside" = the wall time
/// no phase covers: argmax, the forward call's set-up); with `tb` (the decode steps) also the weight bytes per
/// second of the phases that read weights (token_bytes.hpp) and their ratio to the roofline `roof` (bytes/s).
/// Returns the JSON members `, "<key>_ms": {…}` and, with `tb`, `, "<key>_gbps": {…}`.
std::string print_profile(const cpu_profile& p, double dec_s, uint64_t tokens, const char* what, const token_bytes* tb,
                          double roof, const char* key) {
  const double per = tokens ? 1e3 / double(tokens) : 0, wall = dec_s * 1e3;  // ms per token per second; ms
  std::printf("profile: %s, %.3f ms per token (wall); exclusive time per phase (cpu_profile.hpp):\n", what,
              dec_s * per);
  std::printf("  %-10s %10s %7s %8s%s\n", "phase", "ms/token", "share", "calls", tb ? "   MB/token   ratio" : "");
  std::string js = std::string(", \"") + key + "_ms\": {", gb = "{";
  char buf[96];
  auto phase_bytes = [&](std::string_view n) -> uint64_t {
    if (!tb) return 0;
    return n == "dense" ? tb->dense : n == "router" ? tb->router : n == "experts" ? tb->experts : n == "head" ? tb->head : 0;
  };
  auto row = [&](std::string_view name, double s, uint64_t calls, bool first) {
    std::printf("  %-10.*s %10.3f %6.1f%% %8llu", int(name.size()), name.data(), s * per,
                wall > 0 ? 100.0 * s * 1e3 / wall : 0.0, (unsigned long long)calls);
    const uint64_t b = phase_bytes(name);
    if (b && s > 0 && tokens) {  // weight bytes per token over this phase's seconds per token
      const double bps = double(b) / (s / double(tokens));
      std::printf(" %10.2f %7.3f", double(b) / 1e6, roof > 0 ? bps / roof : 0.0);
      std::snprintf(buf, sizeof buf, "%s\"%.*s\": %.6g", gb.size() > 1 ? ", " : "", int(name.size()), name.data(), bps / 1e9);
      gb += buf;
    }
    std::printf("\n");
    std::snprintf(buf, sizeof buf, "%s\"%.*s\": %.4f", first ? "" : ", ", int(name.size()), name.data(), s * per);
    js += buf;
  };
  for (size_t i = 0; i < cpu_phase_names.size(); ++i) row(cpu_phase_names[i], p.seconds[i], p.calls[i], i == 0);
  row("outside", std::max(0.0, dec_s - p.total()), 0, false);
  return js + "}" + (tb ? std::string(", \"") + key + "_gbps\": " + gb + "}" : std::string());
}

}  // namespace

int run_bench_cpu(const bench_args& a) {
  refuse_vulkan_options(a);
  dsv4_synth_options so;
  dsv41_synth_options so41;
  const bool v41 = bench_synth_options(a, so, so41);
  so.threads = so41.threads = a.threads;
  const act_precision act = a.act == "i8" ? act_precision::i8 : act_precision::f32;

  const uint64_t rbytes = std::max<uint64_t>(a.roofline_mib, 1) << 20;
  double roof = 0;
  unsigned threads = 0;
  {  // its own pool, gone before the model's starts
    thread_pool pool(a.threads);
    roof = measure_read_bandwidth(pool, rbytes);
    threads = pool.size();
  }
  std::printf("read roofline: %.2f GB/s with %u threads (streaming sum over %llu MiB, best of plain and 1-8 KiB "
              "prefetched)\n",
              roof / 1e9, threads, (unsigned long long)(rbytes >> 20));

  auto t = clk::now();
  cpu_figures f;
  token_bytes tb;
  uint32_t layers = 0;
  if (v41) {
    dsv41_weights w = dsv41_synthetic(so41);
    const double gen_s = since(t);
    f = build_and_time<dsv41_model, dsv41_options>(std::move(w), &dsv41_token_bytes, dsv41_logits::last, a, act, tb,
                                                   layers);
    f.gen_s = gen_s;
  } else {
    dsv4_weights w = dsv4_synthetic(so);
    const double gen_s = since(t);
    f = build_and_time<dsv4_model, dsv4_options>(std::move(w), &dsv4_token_bytes, dsv4_logits::last, a, act, tb, layers);
    f.gen_s = gen_s;
  }
  const uint64_t prompt = std::max<uint64_t>(a.prompt, 1);
  const double pre_tps = double(prompt) / f.pre_s, dec_tps = a.tokens ? double(a.tokens) / f.dec_s : 0;
  const uint64_t bpt = tb.total();
  const double gbps = double(bpt) * dec_tps / 1e9;
  std::printf("model: synthetic %s on the CPU, %u layers, experts %s%s, dense %s, shared expert %s, %s activations; "
              "generated %.1f s; host matrices: %s\n",
              a.synthetic.c_str(), layers, a.weights.c_str(),
              a.expert_down.empty() ? "" : (" (w2 " + a.expert_down + ")").c_str(), a.dense.c_str(),
              a.shared_expert == "routed" ? "in the routed formats" : "dense", a.act.c_str(),
              f.gen_s, a.variants ? (std::to_string(a.variants) + " distinct per role (--variants)").c_str()
                                  : "the preset's variants per role (full-size presets: one, shared)");
  std::printf("warm-up: one token in %.3f s\n", f.warm_s);
  std::printf("prefill: %llu tokens in %.3f s = %.2f tok/s (one forward call)\n", (unsigned long long)prompt, f.pre_s,
              pre_tps);
  std::printf("decode : %llu tokens in %.3f s = %.3f tok/s at positions %llu..%llu (batch 1, greedy)\n",
              (unsigned long long)a.tokens, f.dec_s, dec_tps, (unsigned long long)prompt,
              (unsigned long long)(prompt + a.tokens));
  std::printf("         %.3f GB of weights read per token -> %.2f GB/s = %.3f of the read roofline\n", double(bpt) / 1e9,
              gbps, roof > 0 ? gbps * 1e9 / roof : 0.0);
  std::string prof_json;
  if (a.profile) {
    const std::string pre = "prefill call of " + std::to_string(prompt) + " tokens";
    prof_json = print_profile(f.pre_prof, f.pre_s, prompt, pre.c_str(), nullptr, roof, "prefill_profile");
    const std::string dec = std::to_string(a.tokens) + " decode steps";
    prof_json += print_profile(f.prof, f.dec_s, a.tokens, dec.c_str(), &tb, roof, "profile");
  }
  if (a.json)
    std::printf("{\"backend\": \"cpu\", \"threads\": %u, \"prefill_tps\": %.4f, \"decode_tps\": %.4f, \"bytes_per_token\": "
                "%llu, \"roofline_gbps\": %.3f, \"roofline_ratio\": %.4f%s}\n",
                threads, pre_tps, dec_tps, (unsigned long long)bpt, roof / 1e9, roof > 0 ? gbps * 1e9 / roof : 0.0,
                prof_json.c_str());
  return 0;
}

}  // namespace cmfx::driver
