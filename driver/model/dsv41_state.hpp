#pragma once
// Per-sequence state of the V4.1 graph (dsv4-architecture.md §5.2, V4.1 table): the window KV ring of every layer;
// for KV sources the compressor's pending rows (ratio 2), the compressed KV entries and the index keys (after RoPE
// and, with qat_kv, their FP4 quantisation — what the packed cache stores); the Engram id history; and the
// shared-runtime fact the official code carries across calls (which layer last published index keys).
//
// Rings hold `window + dsv41_rollback_tokens` positions, so `truncate(n)` rolls back up to dsv41_rollback_tokens
// positions exactly. A state is a value: copy it to fork a sequence.
#include <cstdint>
#include <vector>

#include "dsv41_config.hpp"

namespace cmfx::driver {

struct dsv41_layer_state {
  std::vector<float> ring;              // [ring_cap, head_dim], by position mod ring_cap
  uint32_t ratio = 0;                   // KV sources: their compress ratio; 0 elsewhere
  std::vector<float> pend_kv, pend_sc;  // ratio 2: wkv·u and wgate·u by position mod pend_cap
  std::vector<float> entries;           // [count, head_dim] compressed KV (rope applied)
  std::vector<float> ikeys;             // [count, index_head_dim] index keys (rope applied)
};

struct dsv41_state_size {
  uint64_t ring_bytes = 0, pending_bytes = 0, kv_entry_bytes = 0, index_entry_bytes = 0;
  uint64_t total() const noexcept { return ring_bytes + pending_bytes + kv_entry_bytes + index_entry_bytes; }
};
/// Bytes of state at `ctx` tokens as this implementation stores it (f32 rows).
dsv41_state_size dsv41_state_bytes(const dsv41_config& c, uint64_t ctx);

class dsv41_state {
 public:
  dsv41_state() = default;
  explicit dsv41_state(const dsv41_config& c);

  uint64_t pos() const noexcept { return pos_; }
  uint32_t head_dim() const noexcept { return head_dim_; }
  uint32_t index_head_dim() const noexcept { return ihd_; }
  std::vector<dsv41_layer_state>& layers() noexcept { return layers_; }
  const std::vector<dsv41_layer_state>& layers() const noexcept { return layers_; }
  float* ring_row(uint32_t l, uint64_t p) noexcept { return layers_[l].ring.data() + (p % ring_cap_) * head_dim_; }
  const float* ring_row(uint32_t l, uint64_t p) const noexcept {
    return layers_[l].ring.data() + (p % ring_cap_) * head_dim_;
  }
  float* pend_kv(uint32_t l, uint64_t p) noexcept { return layers_[l].pend_kv.data() + (p % pend_cap_) * head_dim_; }
  float* pend_sc(uint32_t l, uint64_t p) noexcept { return layers_[l].pend_sc.data() + (p % pend_cap_) * head_dim_; }
  uint64_t entries(uint32_t l) const noexcept { return layers_[l].entries.size() / head_dim_; }
  const float* entry(uint32_t l, uint64_t j) const noexcept { return layers_[l].entries.data() + j * head_dim_; }
  uint64_t keys(uint32_t l) const noexcept { return ihd_ ? layers_[l].ikeys.size() / ihd_ : 0; }
  const float* key(uint32_t l, uint64_t j) const noexcept { return layers_[l].ikeys.data() + j * ihd_; }

  /// Engram: compressed token id of each position so far.
  std::vector<uint32_t>& cids() noexcept { return cids_; }
  const std::vector<uint32_t>& cids() const noexcept { return cids_; }
  /// The layer that last published index keys after each position's step (−1: none yet).
  std::vector<int16_t>& ik_owner() noexcept { return ik_owner_; }
  int last_ik_owner() const noexcept { return ik_owner_.empty() ? -1 : ik_owner_.back(); }

  void reset();
  /// Roll back to position n (n ≤ pos(), pos() − n ≤ dsv41_rollback_tokens, or n == 0).
  void truncate(uint64_t n);
  void advance(uint64_t tokens) noexcept { pos_ += tokens; }

 private:
  uint64_t pos_ = 0;
  uint32_t ring_cap_ = 0, pend_cap_ = 0, head_dim_ = 0, ihd_ = 0;
  std::vector<dsv41_layer_state> layers_;
  std::vector<uint32_t> cids_;
  std::vector<int16_t> ik_owner_;
};

}  // namespace cmfx::driver
