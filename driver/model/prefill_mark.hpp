#pragma once
// The end of a sequence's official prefill, kept once for V4.1's CPU state (dsv41_state) and its GPU graph
// (dsv41_gpu_model). The official code prefills a whole prompt in ONE call at position 0, then runs one-token decode
// steps (spec §5.1); under V4.1's stale index-key rule (dsv41_options::stale_index_k) a prefill row and a decode step
// score different keys, so each position must know which of the two it is, whatever calls it arrives in.
#include <algorithm>
#include <cstdint>
#include <limits>

namespace cmfx::driver {

/// "Any prefix may be reused" (model/prefix_reuse.hpp, gpu_graph::reuse_limit, serve::engine::reuse_limit).
inline constexpr uint64_t no_reuse_limit = std::numeric_limits<uint64_t>::max();

/// Positions [0, end) of a sequence are prefill positions.
struct prefill_mark {
  uint64_t end = 0;

  /// Marks [0, e) as one prefill if a state at position `pos` holds only prefill positions so far (pos ≤ end: a
  /// fresh state, a prompt not yet followed by a decode step, or one truncated back into its prefill) — then the
  /// tokens it holds are exactly what the longer prefill would have made of them. Returns whether it took effect
  /// (false after a decode step: later tokens are decode steps, as in the reference).
  bool mark(uint64_t pos, uint64_t e) noexcept {
    if (pos > end) return false;
    end = std::max(end, e);
    return true;
  }
  /// The end once a call of n ids at `pos` begins: a call at position 0 is (at least) a prefill of its own ids.
  uint64_t end_for_call(uint64_t pos, uint64_t n) const noexcept { return pos == 0 ? std::max(end, n) : end; }
  /// Marks a call of n ids at `pos` (end_for_call).
  void mark_call(uint64_t pos, uint64_t n) noexcept { end = end_for_call(pos, n); }
  /// How many of a call's n ids at `pos` are prefill rows (its leading ones).
  uint64_t call_rows(uint64_t pos, uint64_t n) const noexcept {
    const uint64_t e = end_for_call(pos, n);
    return e > pos ? std::min(n, e - pos) : 0;
  }
  /// The state rolled back to n positions: a prefill of at most n, which a mark may extend again.
  void truncate(uint64_t n) noexcept { end = std::min(end, n); }
  bool covers(uint64_t pos) const noexcept { return pos < end; }
};

}  // namespace cmfx::driver
