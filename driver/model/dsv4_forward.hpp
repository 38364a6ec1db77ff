#pragma once
// The DeepSeek-V4-Flash forward pass on the CPU (dsv4-architecture.md §3, §5): embedding → 4-copy mHC stream →
// per layer [hc_pre → RMSNorm → attention → hc_post → hc_pre → RMSNorm → MoE → hc_post] → hc_head → norm → head.
//
// One entry point runs a chunk of tokens at positions state.pos() … pos()+n−1: a whole prompt (prefill) or one
// token (decode) or anything between. Projections, routing and the MoE are batched over the chunk; the window
// append, compressor state machine and indexer are evaluated per token with "token t sees the cache as of token t"
// semantics, so a prefill equals any split of it into prefill + decode steps.
#include <cstdint>
#include <memory>
#include <span>
#include <vector>

#include "dsv4_state.hpp"
#include "dsv4_weights.hpp"

namespace cmfx {
class thread_pool;
}

namespace cmfx::driver {

struct cpu_profile;

/// Per-token decisions, for parity tests: [layer][token] sorted ascending.
struct dsv4_trace {
  std::vector<std::vector<std::vector<uint32_t>>> topk;     // indexer picks (ratio-4 layers; empty elsewhere)
  std::vector<std::vector<std::vector<uint32_t>>> experts;  // routed experts
  // How close each selection came to a tie (selection_margin of ops/topk.hpp: the gap between the last score kept
  // and the first left out over the row's largest |score|; +inf for hash routing or when nothing was left out). A
  // consumer comparing another backend's picks (tests/parity) accepts a different pick only within its rounding.
  std::vector<std::vector<float>> topk_margin, experts_margin;
};

enum class dsv4_logits { none, last, all };

/// Part of a multi-sequence chunk: `count` consecutive tokens (from chunk row `first`) of the sequence `st`, at
/// positions st->pos()…. Each state appears in at most one segment of a chunk.
struct dsv4_segment {
  dsv4_state* st = nullptr;
  uint64_t first = 0, count = 0;
};

class dsv4_model {
 public:
  dsv4_model(dsv4_weights w, const dsv4_options& o);
  ~dsv4_model();
  dsv4_model(const dsv4_model&) = delete;
  dsv4_model& operator=(const dsv4_model&) = delete;

  static std::unique_ptr<dsv4_model> open(const std::string& path, const dsv4_options& o);

  const dsv4_config& config() const noexcept;
  const dsv4_weights& weights() const noexcept;
  dsv4_state new_state() const { return dsv4_state(config()); }

  /// Runs `ids` at positions st.pos()…, advancing the state. Returns logits [rows, vocab]: rows = ids.size() for
  /// dsv4_logits::all, 1 (the last token) for last, 0 for none. `trace` (optional) receives per-token decisions.
  std::vector<float> forward(std::span<const uint32_t> ids, dsv4_state& st, dsv4_logits want,
                             dsv4_trace* trace = nullptr);

  /// Several sequences in one pass (continuous batching): the projections, routing, MoE and head run batched over
  /// every token of every segment; attention reads and writes each token's own sequence state. Logits: `last` =
  /// one row per segment (its last token), in segment order; `all` = one row per token. Equal, bit for bit, to
  /// running each segment alone.
  std::vector<float> forward_batch(std::span<const uint32_t> ids, std::span<const dsv4_segment> segs,
                                   dsv4_logits want, dsv4_trace* trace = nullptr);

  /// The worker threads of the forward pass, for a caller's own data-parallel work between forward calls (the
  /// server samples its slots on them); never from inside a forward call.
  thread_pool& pool() noexcept;

  /// Attaches a profile (cpu_profile.hpp) that the forward calls charge their phases to, or detaches it (nullptr).
  /// The profile must outlive its attachment.
  void set_profile(cpu_profile* p) noexcept;

  struct impl;

 private:
  std::unique_ptr<impl> p_;
};

}  // namespace cmfx::driver
