#pragma once
// Per-sequence state of the V4.1 graph (dsv4-architecture.md §5.2, V4.1 table): the window KV ring of every layer;
// for KV sources the compressor's pending rows (ratio 2), the compressed KV entries and the index keys (after RoPE);
// the Engram id history; and the shared-runtime fact the official code carries across calls (which layer last
// published index keys).
//
// Compressed KV and index keys are stored in one of two ways, fixed when the state is made:
//   packed (the default with qat_kv): the cache format itself — FP4 E2M1 rows with an E4M3 scale per 16 (compressed
//          KV, 288 B at the release's 512 values) and with a UE8M0 scale per 32 (index keys, 68 B at 128), in
//          packed_fp4_bank (include/cmfx/kv/packed_kv.hpp); attention decodes only the rows a top-k picked;
//   f32:   rows as computed (qat_kv off), or after the same FP4 fake-quant (qat_kv on with packed_kv off, a test
//          option: bit-identical to the packed path).
//
// Rings hold `window + dsv41_rollback_tokens` positions, so `truncate(n)` rolls back up to dsv41_rollback_tokens
// positions exactly. A state is a value: copy it to fork a sequence.
#include <algorithm>
#include <cstdint>
#include <span>
#include <vector>

#include "cmfx/kv/packed_kv.hpp"
#include "dsv41_config.hpp"
#include "prefill_mark.hpp"

namespace cmfx::driver {

struct dsv41_layer_state {
  std::vector<float> ring;              // [ring_cap, head_dim], by position mod ring_cap
  uint32_t ratio = 0;                   // KV sources: their compress ratio; 0 elsewhere
  std::vector<float> pend_kv, pend_sc;  // ratio 2: wkv·u and wgate·u by position mod pend_cap
  // KV sources, packed state: compressed KV / index keys as packed FP4 rows (rope applied, then quantised).
  packed_fp4_bank<kv_main_codec> kv_rows;
  packed_fp4_bank<kv_index_codec> ik_rows;
  // KV sources, f32 state: [count, head_dim] compressed KV and [count, index_head_dim] index keys (rope applied).
  std::vector<float> entries;
  std::vector<float> ikeys;
};

/// The shape of this model's state for v41_state_bytes (include/cmfx/kv/packed_kv.hpp): trunk layers, trailing
/// DSpark ratios, window, widths, the KV sources' ratios, the Engram look-back (max_ngram − 1 ids).
v41_state_config dsv41_state_shape(const dsv41_config& c);
/// Bytes of the f32 window rings as the CPU graph keeps them ((window + dsv41_rollback_tokens) rows per layer).
uint64_t dsv41_f32_ring_bytes(const dsv41_config& c);

class dsv41_state {
 public:
  dsv41_state() = default;
  /// packed: store compressed KV / index keys as packed FP4 rows (requires that the model quantises the cache).
  dsv41_state(const dsv41_config& c, bool packed);

  bool packed() const noexcept { return packed_; }
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
  /// Compressed entries / index keys of KV source l so far.
  uint64_t entries(uint32_t l) const noexcept {
    return packed_ ? layers_[l].kv_rows.rows() : layers_[l].entries.size() / head_dim_;
  }
  uint64_t keys(uint32_t l) const noexcept {
    return packed_ ? layers_[l].ik_rows.rows() : (ihd_ ? layers_[l].ikeys.size() / ihd_ : 0);
  }
  /// f32 state only: row j.
  const float* entry(uint32_t l, uint64_t j) const noexcept { return layers_[l].entries.data() + j * head_dim_; }
  const float* key(uint32_t l, uint64_t j) const noexcept { return layers_[l].ikeys.data() + j * ihd_; }
  /// Appends one compressed entry and its index key to KV source l (rope applied). Packed: quantised into the
  /// rows here; f32: stored as given (the caller applied the fake-quant when the model quantises the cache).
  void append_entry(uint32_t l, std::span<const float> kv, std::span<const float> key);
  /// Index keys [first, first + out.size()/index_head_dim) of source l into out (a tile; decoded when packed).
  void read_keys(uint32_t l, uint64_t first, std::span<float> out) const;
  /// Bytes held by the compressed KV / index keys of all sources (packed rows, or f32 rows).
  uint64_t kv_bytes() const noexcept;
  uint64_t index_key_bytes() const noexcept;

  /// Engram: compressed token id of each position so far.
  std::vector<uint32_t>& cids() noexcept { return cids_; }
  const std::vector<uint32_t>& cids() const noexcept { return cids_; }
  /// The layer that last published index keys after each position's step (−1: none yet).
  std::vector<int16_t>& ik_owner() noexcept { return ik_owner_; }
  int last_ik_owner() const noexcept { return ik_owner_.empty() ? -1 : ik_owner_.back(); }

  /// The end of the official prefill (spec §5.1: the reference prefills a whole prompt in ONE call at position 0,
  /// then runs one-token decode steps): positions below it are prefill positions for the stale-index-key rule
  /// (dsv41_options::stale_index_k), whatever calls they arrive in. A call at position 0 marks at least its own
  /// tokens; mark_prefill lets a caller that runs a prompt in pieces (the driver's 512-token pieces, the serve
  /// scheduler) announce the whole prompt first.
  uint64_t prefill_end() const noexcept { return prefill_.end; }
  /// Marks positions [0, end) as one prefill while the state holds only prefill positions (prefill_mark::mark);
  /// returns whether it took effect.
  bool mark_prefill(uint64_t end) noexcept { return prefill_.mark(pos_, end); }
  const prefill_mark& prefill() const noexcept { return prefill_; }
  /// A call of n ids begins here: at position 0 it is (at least) a prefill of its own ids.
  void mark_call(uint64_t n) noexcept { prefill_.mark_call(pos_, n); }

  void reset();
  /// Roll back to position n (n ≤ pos(), pos() − n ≤ dsv41_rollback_tokens, or n == 0).
  void truncate(uint64_t n);
  void advance(uint64_t tokens) noexcept { pos_ += tokens; }

 private:
  uint64_t pos_ = 0;
  prefill_mark prefill_;
  bool packed_ = false;
  uint32_t ring_cap_ = 0, pend_cap_ = 0, head_dim_ = 0, ihd_ = 0;
  std::vector<dsv41_layer_state> layers_;
  std::vector<uint32_t> cids_;
  std::vector<int16_t> ik_owner_;
};

}  // namespace cmfx::driver
