#pragma once
// Per-sequence state of the V4 graph (dsv4-architecture.md §5.2): per layer the window KV ring, and for ratio > 0
// layers the compressor's per-token projections (kv, score + ape) and its finished entries (main KV cache), plus
// the indexer compressor's (indexer keys) on ratio-4 layers.
//
// Rings hold `window + dsv4_rollback_tokens` positions (the compressor rings 2·ratio or ratio plus the same
// margin), indexed by position mod capacity, so `truncate(n)` can roll back up to dsv4_rollback_tokens positions
// exactly (speculative decoding). A state is a value: copy it to fork a sequence.
#include <cstdint>
#include <vector>

#include "dsv4_config.hpp"

namespace cmfx::driver {

/// One compressor's history. Windows are rebuilt from the per-token rows when they close, so the overlap
/// ("previous window") half needs no separate buffer.
struct dsv4_comp_state {
  uint32_t ratio = 0, width = 0, cw = 0;  // cw = coff·width (row width of kv / score)
  uint32_t cap = 0;                       // ring capacity in positions
  std::vector<float> kv, score;           // [cap, cw]; score already includes ape
  std::vector<float> entries;             // [count, width], finished compressed entries (rope applied)
  uint64_t count() const noexcept { return width ? entries.size() / width : 0; }
  float* kv_row(uint64_t pos) noexcept { return kv.data() + (pos % cap) * cw; }
  float* score_row(uint64_t pos) noexcept { return score.data() + (pos % cap) * cw; }
  const float* kv_row(uint64_t pos) const noexcept { return kv.data() + (pos % cap) * cw; }
  const float* score_row(uint64_t pos) const noexcept { return score.data() + (pos % cap) * cw; }
  const float* entry(uint64_t j) const noexcept { return entries.data() + j * width; }
};

struct dsv4_layer_state {
  std::vector<float> ring;  // [ring_cap, head_dim] window KV by position mod ring_cap
  dsv4_comp_state comp;     // ratio > 0
  dsv4_comp_state ix;       // indexer (ratio 4)
};

/// Bytes of per-sequence state for a context of `ctx` tokens, as this implementation stores it (f32): the
/// fixed rings (window KV, compressor windows) and the entries that grow with the context.
struct dsv4_state_size {
  uint64_t ring_bytes = 0;        // window KV rings, all layers
  uint64_t comp_window_bytes = 0; // compressor / indexer-compressor pending windows (kv + score)
  uint64_t kv_entry_bytes = 0;    // compressed KV entries at ctx
  uint64_t index_entry_bytes = 0; // indexer keys at ctx
  uint64_t total() const noexcept { return ring_bytes + comp_window_bytes + kv_entry_bytes + index_entry_bytes; }
};
dsv4_state_size dsv4_state_bytes(const dsv4_config& c, uint64_t ctx);

class dsv4_state {
 public:
  dsv4_state() = default;
  explicit dsv4_state(const dsv4_config& c);

  uint64_t pos() const noexcept { return pos_; }
  uint32_t ring_cap() const noexcept { return ring_cap_; }
  uint32_t head_dim() const noexcept { return head_dim_; }
  std::vector<dsv4_layer_state>& layers() noexcept { return layers_; }
  const std::vector<dsv4_layer_state>& layers() const noexcept { return layers_; }
  float* ring_row(uint32_t layer, uint64_t p) noexcept {
    return layers_[layer].ring.data() + (p % ring_cap_) * head_dim_;
  }
  const float* ring_row(uint32_t layer, uint64_t p) const noexcept {
    return layers_[layer].ring.data() + (p % ring_cap_) * head_dim_;
  }

  /// Forget everything (position 0).
  void reset();
  /// Roll back to position n (n ≤ pos(), pos() − n ≤ dsv4_rollback_tokens, or n == 0).
  void truncate(uint64_t n);
  /// Called by the forward pass after it appended `tokens` positions.
  void advance(uint64_t tokens) noexcept { pos_ += tokens; }

 private:
  uint64_t pos_ = 0;
  uint32_t ring_cap_ = 0, head_dim_ = 0;
  std::vector<dsv4_layer_state> layers_;
};

}  // namespace cmfx::driver
