#pragma once
// What a chain of sampled steps on the device continues from (gpu_graph::decode_sampled_each): the host sampler's
// settings, its MT19937-64 state and, with a penalty, its penalty_state words — the device then draws the tokens
// that sampler would (gpu::kernels::sample).
#include <algorithm>
#include <cstdint>
#include <vector>

#include "cmfx/sample/sampler.hpp"
#include "cmfx/vk/kernels.hpp"

namespace cmfx::driver {

struct device_sampling {
  gpu::kernels::sample_settings settings;
  mt19937_64_state rng;
  std::vector<uint32_t> seen;  ///< [vocab] with a penalty, else empty

  /// From a sampler whose params() are device_samplable.
  static device_sampling of(const sampler& smp) {
    const sampling_params& p = smp.params();
    device_sampling d;
    d.settings.temperature = p.temperature, d.settings.top_p = p.top_p, d.settings.min_p = p.min_p;
    d.settings.top_k = uint32_t(std::max(p.top_k, 0));
    d.settings.repetition_penalty = p.repetition_penalty, d.settings.presence_penalty = p.presence_penalty;
    d.settings.frequency_penalty = p.frequency_penalty;
    d.rng = smp.rng_state();
    if (p.has_penalties()) {
      d.seen.resize(smp.vocab_size());
      smp.penalty_state(d.seen);
    }
    return d;
  }
};

}  // namespace cmfx::driver
