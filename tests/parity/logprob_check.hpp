#pragma once
// Tokens chosen on the device (gpu_graph::decode_sampled_each) as the model cases record them, and a step's logprobs
// (driver::step_logprobs, from kernels::logprobs) against cmfx::sampler's for the same logits: bit for bit (any NaN
// matches any NaN: payloads carry no meaning here).
#include <cmath>
#include <cstring>
#include <string>
#include <vector>

#include "cmfx/sample/sampler.hpp"
#include "model/device_sampling.hpp"
#include "model/gpu_graph.hpp"

namespace cmfx::parity {

inline bool same_bits(float a, float b) { return (std::isnan(a) && std::isnan(b)) || std::memcmp(&a, &b, 4) == 0; }

/// "" where got is want's logprob and alternatives, else what differs.
inline std::string logprobs_differ(const driver::step_logprobs& got, const sample_result& want) {
  if (!same_bits(got.logprob, want.logprob))
    return "the chosen token's logprob " + std::to_string(got.logprob) + ", host " + std::to_string(want.logprob);
  if (got.top.size() != want.top_logprobs.size())
    return std::to_string(got.top.size()) + " alternatives, host " + std::to_string(want.top_logprobs.size());
  for (size_t j = 0; j < got.top.size(); ++j)
    if (got.top[j].token != want.top_logprobs[j].token || !same_bits(got.top[j].logprob, want.top_logprobs[j].logprob))
      return "alternative " + std::to_string(j) + ": " + std::to_string(got.top[j].token) + " " +
             std::to_string(got.top[j].logprob) + ", host " + std::to_string(want.top_logprobs[j].token) + " " +
             std::to_string(want.top_logprobs[j].logprob);
  return {};
}

/// The ids a graph chose on the device and each one's logprobs, over one or more decode_sampled_each calls.
struct device_choices {
  std::vector<uint32_t> ids;
  std::vector<driver::step_logprobs> lps;
  /// Up to max steps from `from` with smp's setting (each id recorded with accept_drawn), stopped by the callback
  /// once `stop_after` ids are held in all; returns the steps handed over.
  uint64_t run(driver::gpu_graph& m, sampler& smp, uint32_t from, uint64_t max, size_t stop_after) {
    driver::step_logprobs lp;
    return m.decode_sampled_each(from, max, driver::device_sampling::of(smp, &lp), [&](uint32_t id) {
      smp.accept_drawn(int32_t(id));
      ids.push_back(id);
      lps.push_back(lp);
      return ids.size() < stop_after;
    });
  }
};

}  // namespace cmfx::parity
