#pragma once
// The stop-and-continue check of a greedy decode chained on the device, shared by the V4 and V4.1 parity cases
// (cases_model_chain.cpp, cases_model_v41.cpp).
#include <algorithm>
#include <cstdint>
#include <set>
#include <string>
#include <vector>

#include "model/gpu_graph.hpp"

namespace cmfx::parity {

/// Both graphs at position `at0` after the same prompt: `chained` decodes n greedy ids from `first` with
/// decode_greedy_each, stopped by its callback after k (the step it ran ahead is dropped), then continues from a
/// token that is not the argmax (that position runs again with another token); `stepped` runs step_greedy one token
/// at a time. The same ids and positions throughout, and the step after the chain agrees (the state the chain left
/// is the stepped one's). Returns "" or the first difference; info: what was compared.
inline std::string chained_equals_stepped(driver::gpu_graph& chained, driver::gpu_graph& stepped, uint64_t at0,
                                          uint32_t first, uint32_t n, uint32_t k, std::string& info) {
  auto compare = [&](const std::vector<uint32_t>& got, uint32_t tok, uint64_t at, const char* part) -> std::string {
    for (uint64_t i = 0; i < got.size(); ++i) {
      const uint32_t want = tok = stepped.step_greedy(tok);
      if (got[i] != want)
        return std::string(part) + " step " + std::to_string(i) + ": chained id " + std::to_string(got[i]) +
               ", step by step " + std::to_string(want);
    }
    if (chained.pos() != at)
      return std::string(part) + ": position " + std::to_string(chained.pos()) + ", expected " + std::to_string(at);
    return {};
  };
  std::vector<uint32_t> got;
  const uint64_t m = chained.decode_greedy_each(first, n, [&](uint32_t id) {
    got.push_back(id);
    return got.size() < k;
  });
  if (m != k || got.size() != k) return "the callback's stop after " + std::to_string(k) + " ids gave " + std::to_string(m);
  if (auto why = compare(got, first, at0 + k, "stopped chain"); !why.empty()) return why;
  const uint32_t other = (got.back() + 1) % chained.vocab();  // not the argmax: the dropped step's position
  const std::vector<uint32_t> rest = chained.decode_greedy(other, n - k);
  if (rest.size() != n - k) return "decode_greedy returned " + std::to_string(rest.size()) + " ids";
  if (auto why = compare(rest, other, at0 + n, "continued chain"); !why.empty()) return why;
  if (chained.step_greedy(rest.back()) != stepped.step_greedy(rest.back())) return "the step after the chain differs";
  std::set<uint32_t> distinct(got.begin(), got.end());
  distinct.insert(rest.begin(), rest.end());
  info = std::to_string(k) + " + " + std::to_string(n - k) + " chained greedy ids == step by step (" +
         std::to_string(distinct.size()) + " distinct)";
  return {};
}

}  // namespace cmfx::parity
