#pragma once
// A device step's logprobs (driver::step_logprobs, from kernels::logprobs) against cmfx::sampler's for the same
// logits: bit for bit (any NaN matches any NaN: payloads carry no meaning here).
#include <cmath>
#include <cstring>
#include <string>

#include "cmfx/sample/sampler.hpp"
#include "model/device_sampling.hpp"

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

}  // namespace cmfx::parity
