// Decode chained on the device (issue #9): greedy (decode_greedy_each: each step's token from the previous argmax)
// and sampled (decode_sampled_each: kernels::sample after the head) on the V4 toys, against a second GPU graph of
// the same toy stepping one token at a time — the same ids, positions and sampler state, across a stop and a
// continuation. Registered by model_cases (cases_model.cpp) in its order.
#include <cmath>
#include <cstring>
#include <random>
#include <set>

#include "chain_check.hpp"
#include "cmfx/sample/sampler.hpp"
#include "harness.hpp"
#include "logprob_check.hpp"
#include "model/dsv4_forward.hpp"
#include "model/dsv4_gpu.hpp"
#include "model_toys.hpp"

namespace cmfx::parity {

namespace {

using namespace cmfx::driver;

/// Two GPU graphs of one toy (prompt-chunking off, room for prompt + n + 1 positions), both after the same random
/// prompt: one chains its decode steps, the other steps one at a time.
struct chain_pair {
  std::unique_ptr<dsv4_model> cpu;
  std::unique_ptr<dsv4_gpu_model> chained, stepped;
  std::mt19937_64 g;
  std::vector<uint32_t> prompt_ids;
  uint32_t vocab = 0;
  /// stepwise: the first graph without the embedding on the device, so that it does not chain (decode_sampled_each
  /// then runs step by step, as with the expert cache).
  chain_pair(suite& s, const std::string& path, uint64_t prompt, uint32_t n, uint64_t seed, bool stepwise = false)
      : g(seed) {
    dsv4_options co;
    co.threads = 1;
    cpu = dsv4_model::open(path, co);
    vocab = cpu->config().vocab;
    dsv4_gpu_options go;
    go.max_ctx = prompt + n + 1;
    go.prefill_chunk = 0;
    stepped = std::make_unique<dsv4_gpu_model>(cpu->weights(), s.dev, s.kern, go);
    go.device_embedding = !stepwise;
    chained = std::make_unique<dsv4_gpu_model>(cpu->weights(), s.dev, s.kern, go);
    prompt_ids.resize(prompt);
    for (auto& id : prompt_ids) id = pick();
  }
  uint32_t pick() { return std::uniform_int_distribution<uint32_t>(0, vocab - 1)(g); }
  void run_prompt() {
    (void)chained->forward(prompt_ids, false);
    (void)stepped->forward(prompt_ids, false);
  }
};

/// Greedy decode chained on the device (decode_greedy_each: each step reads its token from the previous argmax
/// through kernels::embed_rows and is submitted before the previous one ends) against step_greedy one token at a
/// time on a second model from the same prompt: stopped by its callback after k ids (the step it ran ahead is
/// dropped), then continued from a token that is not the argmax (the dropped step's position runs again with
/// another token) — the same ids and positions throughout, and the step after agrees.
std::string chained_case(suite& s, const std::string& path, uint64_t prompt, uint32_t n, uint64_t seed, std::string& info) {
  chain_pair cp(s, path, prompt, n, seed);
  dsv4_gpu_model &chained = *cp.chained, &stepped = *cp.stepped;
  // k: the step run ahead of the stop (position prompt + k) closes a ratio-4 compressor window, so the dropped
  // step pooled an entry that the continuation must pool again
  uint32_t k = n / 3;
  while ((prompt + k + 1) % 4 != 0) ++k;
  if (!chained.chains_decode()) return "decode_greedy does not chain on this device (no embedding on the device)";
  cp.run_prompt();
  return chained_equals_stepped(chained, stepped, prompt, cp.pick(), n, k, info);
}

/// Sampled decode chained on the device (decode_sampled_each: kernels::sample after the head, each step reading its
/// token from the previous draw) against the host path on a second model from the same prompt — each step's
/// logits read back and drawn by cmfx::sampler — with the same settings and seed: stopped by the callback after
/// k ids (the step the device ran ahead drew one number more: the host's sampler state carries on, not the
/// device's), then continued: the same ids throughout, and the two samplers' RNG states agree at the end.
/// With logprobs (top_logprobs ≥ 0; kernels::logprobs after each choice; a temperature of 0: the device's argmax):
/// each step's logprob and alternatives are the host sampler's, bit for bit.
std::string sampled_chain_case(suite& s, const std::string& path, uint64_t prompt, uint32_t n, int32_t top_k,
                               bool penalties, uint64_t seed, std::string& info, float temperature = 1.2f,
                               int32_t top_logprobs = -1, bool stepwise = false) {
  chain_pair cp(s, path, prompt, n, seed, stepwise);
  dsv4_gpu_model &chained = *cp.chained, &stepped = *cp.stepped;
  const uint32_t V = cp.vocab;
  if (!chained.samples_on_device()) return "decode_sampled_each is not available on this device";
  if (chained.chains_decode() == stepwise) return "the graph does not chain as the case asks";
  cp.run_prompt();
  sampling_params sp;
  sp.temperature = temperature, sp.top_p = 0.9f, sp.min_p = 0.01f, sp.top_k = top_k, sp.seed = cp.g();
  if (penalties) sp.repetition_penalty = 1.3f, sp.presence_penalty = 0.5f, sp.frequency_penalty = 0.4f;
  if (top_logprobs >= 0) sp.logprobs = true, sp.top_logprobs = top_logprobs;
  sampler on_dev(V, sp), on_host(V, sp);
  const std::vector<int32_t> prompt_ids(cp.prompt_ids.begin(), cp.prompt_ids.end());
  on_dev.set_prompt(prompt_ids);
  on_host.set_prompt(prompt_ids);
  uint32_t first = cp.pick(), k = n / 3;
  device_choices dc;
  const std::vector<uint32_t>& got = dc.ids;
  if (dc.run(chained, on_dev, first, n, k) != k) return "the callback's stop after " + std::to_string(k) + " ids did not hold";
  if (dc.run(chained, on_dev, got.back(), n - k, n) != n - k)
    return "the continued chain ran " + std::to_string(got.size() - k) + " ids";
  for (uint32_t i = 0; i < n; ++i) {
    const std::vector<float> l = stepped.step(first, true);
    const sample_result& r = on_host.sample(l);
    const uint32_t want = first = uint32_t(r.token);
    if (got[i] != want)
      return "step " + std::to_string(i) + ": chained id " + std::to_string(got[i]) + ", host-sampled " + std::to_string(want);
    if (top_logprobs < 0) continue;
    if (const std::string why = logprobs_differ(dc.lps[i], r); !why.empty()) return "step " + std::to_string(i) + ": " + why;
  }
  if (chained.pos() != stepped.pos()) return "positions differ after the chains";
  if (on_dev.rng_state().x != on_host.rng_state().x || on_dev.rng_state().index != on_host.rng_state().index)
    return "the samplers' RNG states differ after the chains";
  std::vector<uint32_t> cd(V), ch(V);
  on_dev.penalty_state(cd);
  on_host.penalty_state(ch);
  if (cd != ch) return "the samplers' token counts differ after the chains";
  std::set<uint32_t> distinct(got.begin(), got.end());
  info = std::to_string(k) + " + " + std::to_string(n - k) + " ids drawn on the device == the host's sampler (" +
         std::to_string(distinct.size()) + " distinct" + (top_logprobs >= 0 ? ", logprobs identical)" : ")");
  return {};
}

}  // namespace

void model_chain_cases(suite& s, toy_files& files) {
  s.run("model_v4", "-", "greedy decode chained on the device, cmf q4tp toy, 12 + 30 tokens", [&](uint64_t seed, std::string& info) {
    return chained_case(s, files.make("cmf", "q4tp"), 12, 30, seed, info);
  });
  s.run("model_v4", "-", "greedy decode chained on the device, release toy, 8 + 20 tokens", [&](uint64_t seed, std::string& info) {
    return chained_case(s, files.make("release", "native"), 8, 20, seed, info);
  });
  s.run("model_v4", "-", "sampled decode chained on the device, cmf q4tp toy, 12 + 24 tokens", [&](uint64_t seed, std::string& info) {
    return sampled_chain_case(s, files.make("cmf", "q4tp"), 12, 24, 0, false, seed, info);
  });
  s.run("model_v4", "-", "sampled decode chained on the device, top-k 30 + penalties, cmf q4tp toy, 8 + 12 tokens",
        [&](uint64_t seed, std::string& info) {
          return sampled_chain_case(s, files.make("cmf", "q4tp"), 8, 12, 30, true, seed, info);
        });
  s.run("model_v4", "-", "sampled decode chained on the device with 5 logprobs, cmf q4tp toy, 8 + 12 tokens",
        [&](uint64_t seed, std::string& info) {
          return sampled_chain_case(s, files.make("cmf", "q4tp"), 8, 12, 0, false, seed, info, 1.2f, 5);
        });
  s.run("model_v4", "-", "greedy decode chained on the device with 3 logprobs, release toy, 8 + 12 tokens",
        [&](uint64_t seed, std::string& info) {
          return sampled_chain_case(s, files.make("release", "native"), 8, 12, 0, false, seed, info, 0.0f, 3);
        });
  s.run("model_v4", "-", "sampled decode on the device step by step (not chained), penalties + 5 logprobs, q4tp toy",
        [&](uint64_t seed, std::string& info) {
          return sampled_chain_case(s, files.make("cmf", "q4tp"), 8, 12, 20, true, seed, info, 0.9f, 5, true);
        });
}

}  // namespace cmfx::parity
