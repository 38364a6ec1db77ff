#pragma once
// What a chain of steps on the device continues from (gpu_graph::decode_sampled_each): the host sampler's settings
// (a temperature: gpu::kernels::sample; greedy: the argmax), its MT19937-64 state and, with a penalty, its
// penalty_state words — the device then chooses the tokens that sampler would — and, where logprobs are asked, where
// each step's logprobs land (gpu::kernels::logprobs' record, decoded by step_logprobs::from).
#include <algorithm>
#include <cstdint>
#include <cstring>
#include <span>
#include <vector>

#include "cmfx/sample/sampler.hpp"
#include "cmfx/vk/kernels.hpp"

namespace cmfx::driver {

/// One step's logprobs (of the raw logits, as sampler::sample reports them).
struct step_logprobs {
  float logprob = 0.0f;            ///< of the chosen token
  std::vector<token_logprob> top;  ///< the most likely first

  /// From kernels::logprobs' record (logprobs_words(top_n) words) over a vocabulary of n.
  static void from(std::span<const uint32_t> rec, uint32_t top_n, uint32_t n, step_logprobs& out) {
    logsumexp_parts p;
    uint64_t sum_bits = uint64_t(rec[1]) | (uint64_t(rec[2]) << 32);
    std::memcpy(&p.m, &rec[0], 4);
    std::memcpy(&p.sum, &sum_bits, 8);
    float z = 0.0f;
    std::memcpy(&z, &rec[3], 4);
    out.logprob = logprob_from(z, p);
    out.top.clear();
    for (uint32_t j = 0; j < std::min(top_n, n); ++j) {
      std::memcpy(&z, &rec[4 + top_n + j], 4);
      out.top.push_back({int32_t(rec[4 + j]), logprob_from(z, p)});
    }
  }
};

struct device_sampling {
  gpu::kernels::sample_settings settings;  ///< temperature ≤ 0: greedy (the device's argmax)
  mt19937_64_state rng;
  std::vector<uint32_t> seen;  ///< [vocab] with a penalty, else empty
  /// ≥ 0: each step's logprobs with this many alternatives go to *logprobs before on_token sees its id.
  int32_t top_logprobs = -1;
  step_logprobs* logprobs = nullptr;

  bool greedy() const noexcept { return !(settings.temperature > 0.0f); }

  /// From a sampler whose params() are device_samplable; lp receives each step's logprobs where they are asked.
  static device_sampling of(const sampler& smp, step_logprobs* lp = nullptr) {
    const sampling_params& p = smp.params();
    device_sampling d;
    d.settings.temperature = std::max(p.temperature, 0.0f), d.settings.top_p = p.top_p, d.settings.min_p = p.min_p;
    d.settings.top_k = uint32_t(std::max(p.top_k, 0));
    d.settings.repetition_penalty = p.repetition_penalty, d.settings.presence_penalty = p.presence_penalty;
    d.settings.frequency_penalty = p.frequency_penalty;
    d.rng = smp.rng_state();
    if (p.has_penalties()) {
      d.seen.resize(smp.vocab_size());
      smp.penalty_state(d.seen);
    }
    if (p.logprobs || p.top_logprobs > 0) {
      if (!lp) throw usage_error("device sampling: logprobs asked with nowhere to put them");
      d.top_logprobs = p.top_logprobs, d.logprobs = lp;
    }
    return d;
  }
};

}  // namespace cmfx::driver
