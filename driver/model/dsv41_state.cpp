#include "dsv41_state.hpp"

#include <algorithm>
#include <stdexcept>
#include <string>

#include "cmfx/core/error.hpp"

namespace cmfx::driver {

namespace {
constexpr uint32_t pending_cap(uint32_t max_ratio) { return max_ratio + dsv41_rollback_tokens; }
}

dsv41_state_size dsv41_state_bytes(const dsv41_config& c, uint64_t ctx) {
  dsv41_state_size z;
  const uint64_t f = sizeof(float);
  for (uint32_t l = 0; l < c.layers && l < c.plan.size(); ++l) {
    z.ring_bytes += uint64_t(c.window + dsv41_rollback_tokens) * c.head_dim * f;
    const dsv41_layer_plan& p = c.plan[l];
    if (p.mode != dsv41_mode::full) continue;
    if (p.ratio > 1) z.pending_bytes += 2 * uint64_t(pending_cap(2)) * c.head_dim * f;
    z.kv_entry_bytes += ctx / p.ratio * c.head_dim * f;
    z.index_entry_bytes += ctx / p.ratio * c.index_head_dim * f;
  }
  return z;
}

dsv41_state::dsv41_state(const dsv41_config& c) {
  if (c.plan.size() != c.layers) throw std::logic_error("dsv41_state: config has no layer plan");
  ring_cap_ = c.window + dsv41_rollback_tokens;
  pend_cap_ = pending_cap(2);
  head_dim_ = c.head_dim;
  ihd_ = c.index_head_dim;
  layers_.resize(c.layers);
  for (uint32_t l = 0; l < c.layers; ++l) {
    dsv41_layer_state& L = layers_[l];
    L.ring.assign(size_t(ring_cap_) * head_dim_, 0.0f);
    if (c.plan[l].mode == dsv41_mode::full) {
      L.ratio = c.plan[l].ratio;
      if (L.ratio > 1) {
        L.pend_kv.assign(size_t(pend_cap_) * head_dim_, 0.0f);
        L.pend_sc.assign(size_t(pend_cap_) * head_dim_, 0.0f);
      }
    }
  }
}

void dsv41_state::reset() {
  pos_ = 0;
  for (auto& L : layers_) {
    std::fill(L.ring.begin(), L.ring.end(), 0.0f);
    std::fill(L.pend_kv.begin(), L.pend_kv.end(), 0.0f);
    std::fill(L.pend_sc.begin(), L.pend_sc.end(), 0.0f);
    L.entries.clear();
    L.ikeys.clear();
  }
  cids_.clear();
  ik_owner_.clear();
}

void dsv41_state::truncate(uint64_t n) {
  if (n == 0) return reset();
  if (n > pos_) throw usage_error("state truncate to " + std::to_string(n) + ": beyond the current position " + std::to_string(pos_));
  if (pos_ - n > dsv41_rollback_tokens)
    throw usage_error("state truncate to " + std::to_string(n) + " from " + std::to_string(pos_) + ": more than " +
                      std::to_string(dsv41_rollback_tokens) + " positions back (prefill again instead)");
  for (auto& L : layers_)
    if (L.ratio) {
      L.entries.resize(size_t(n / L.ratio) * head_dim_);
      L.ikeys.resize(size_t(n / L.ratio) * ihd_);
    }
  cids_.resize(n);
  ik_owner_.resize(n);
  pos_ = n;
}

}  // namespace cmfx::driver
