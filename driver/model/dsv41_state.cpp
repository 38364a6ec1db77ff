#include "dsv41_state.hpp"

#include <algorithm>
#include <stdexcept>
#include <string>

#include "cmfx/core/error.hpp"

namespace cmfx::driver {

static_assert(kv_main_codec::block == dsv41_kv_fp4_block && kv_index_codec::block == dsv41_index_fp4_block,
              "the packed rows use the graph's FP4 block sizes");

namespace {
constexpr uint32_t pending_cap(uint32_t max_ratio) { return max_ratio + dsv41_rollback_tokens; }
}

v41_state_config dsv41_state_shape(const dsv41_config& c) {
  v41_state_config z;
  z.layers = c.layers;
  z.dspark_stages = c.compress_ratios.size() > c.layers ? uint32_t(c.compress_ratios.size() - c.layers) : 0;
  z.window = c.window;
  z.head_dim = c.head_dim;
  z.index_head_dim = c.index_head_dim;
  z.kv_source_ratios.clear();
  for (uint32_t l = 0; l < c.layers && l < c.plan.size(); ++l)
    if (c.plan[l].mode == dsv41_mode::full) z.kv_source_ratios.push_back(c.plan[l].ratio);
  z.window_fp8_block = dsv41_act_block;
  z.engram_history = c.engram_layers.empty() ? 0 : c.engram_max_ngram - 1;
  return z;
}

uint64_t dsv41_f32_ring_bytes(const dsv41_config& c) {
  return uint64_t(c.layers) * (c.window + dsv41_rollback_tokens) * c.head_dim * sizeof(float);
}

dsv41_state::dsv41_state(const dsv41_config& c, bool packed) : packed_(packed) {
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
      if (packed_) {
        if (!kv_main_codec::width_ok(head_dim_) || !kv_index_codec::width_ok(ihd_))
          throw usage_error("V4.1 packed KV state: head_dim " + std::to_string(head_dim_) + " / index_head_dim " +
                            std::to_string(ihd_) + " are not whole numbers of the FP4 row blocks (" +
                            std::to_string(kv_main_codec::block) + " / " + std::to_string(kv_index_codec::block) + ")");
        L.kv_rows = packed_fp4_bank<kv_main_codec>(head_dim_, L.ratio, packed_kv_unbounded);
        L.ik_rows = packed_fp4_bank<kv_index_codec>(ihd_, L.ratio, packed_kv_unbounded);
      }
      if (L.ratio > 1) {
        L.pend_kv.assign(size_t(pend_cap_) * head_dim_, 0.0f);
        L.pend_sc.assign(size_t(pend_cap_) * head_dim_, 0.0f);
      }
    }
  }
}

void dsv41_state::reset() {
  pos_ = 0;
  prefill_ = {};
  for (auto& L : layers_) {
    std::fill(L.ring.begin(), L.ring.end(), 0.0f);
    std::fill(L.pend_kv.begin(), L.pend_kv.end(), 0.0f);
    std::fill(L.pend_sc.begin(), L.pend_sc.end(), 0.0f);
    L.entries.clear();
    L.ikeys.clear();
    L.kv_rows.clear();
    L.ik_rows.clear();
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
      if (packed_) {
        L.kv_rows.truncate(n / L.ratio);
        L.ik_rows.truncate(n / L.ratio);
      } else {
        L.entries.resize(size_t(n / L.ratio) * head_dim_);
        L.ikeys.resize(size_t(n / L.ratio) * ihd_);
      }
    }
  cids_.resize(n);
  ik_owner_.resize(n);
  pos_ = n;
  prefill_.truncate(n);
}

void dsv41_state::append_entry(uint32_t l, std::span<const float> kv, std::span<const float> key) {
  dsv41_layer_state& L = layers_[l];
  if (packed_) {
    L.kv_rows.append(kv);
    L.ik_rows.append(key);
  } else {
    L.entries.insert(L.entries.end(), kv.begin(), kv.end());
    L.ikeys.insert(L.ikeys.end(), key.begin(), key.end());
  }
}

void dsv41_state::read_keys(uint32_t l, uint64_t first, std::span<float> out) const {
  if (packed_) return layers_[l].ik_rows.decode_range(first, out);
  const std::vector<float>& k = layers_[l].ikeys;
  if ((first * ihd_ + out.size()) > k.size()) throw std::out_of_range("dsv41_state::read_keys: past the stored keys");
  std::copy_n(k.data() + first * ihd_, out.size(), out.data());
}

uint64_t dsv41_state::kv_bytes() const noexcept {
  uint64_t b = 0;
  for (const auto& L : layers_) b += packed_ ? L.kv_rows.bytes() : L.entries.size() * sizeof(float);
  return b;
}

uint64_t dsv41_state::index_key_bytes() const noexcept {
  uint64_t b = 0;
  for (const auto& L : layers_) b += packed_ ? L.ik_rows.bytes() : L.ikeys.size() * sizeof(float);
  return b;
}

}  // namespace cmfx::driver
