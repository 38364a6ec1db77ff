#pragma once
// The DeepSeek-V4.1-Flash text forward pass on the CPU (dsv4-architecture.md §4, §5): embedding → 4-copy stream →
// per layer [Engram (listed layers) → attention on the lagged pre-mix → hc_post → MoE on this attention's pre-mix →
// hc_post] → collapse with the last FFN's pre → norm → head. CSA2 attention: KV sources compress (ratio 2 pooled in
// pairs, ratio 1 per token) and publish compressed KV + index keys; index sources score them (the candidate source
// also builds the two-level candidate pool that later index sources are confined to); the other compressed layers
// reuse the latest compressed KV and top-k.
//
// A chunk at position 0 is the official prefill; every later token behaves as an official one-token decode step, so
// with stale_index_k off a prefill equals any split of it into prefill + decode steps. With stale_index_k on (the
// official behaviour), decode steps reproduce the official shared-runtime quirk (dsv41_config.hpp), which a prefill
// does not have.
#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "dsv41_state.hpp"
#include "dsv41_weights.hpp"

namespace cmfx::driver {

struct cpu_profile;

/// Per-token decisions for parity tests: [layer][token], sorted ascending.
struct dsv41_trace {
  std::vector<std::vector<std::vector<uint32_t>>> topk;     // index-source layers: compressed entries picked
  std::vector<std::vector<std::vector<uint32_t>>> experts;  // routed experts
  std::vector<std::vector<int>> keys_from;                  // index-source layers: whose index keys were scored
  // index-source layers: how close each token's selections came to a tie — the smallest gap, over the top-k pick
  // and (candidate source) the block pick, between the last score kept and the first left out, divided by the
  // largest |score| of the row; +inf when nothing was left out. A consumer comparing another backend's picks
  // (tests/parity) accepts a different pick only where this is within that backend's rounding.
  std::vector<std::vector<float>> topk_margin;
  std::vector<std::vector<float>> experts_margin;  // the same for the routed experts (route_score_margin)
};

enum class dsv41_logits { none, last, all };

struct dsv41_segment {
  dsv41_state* st = nullptr;
  uint64_t first = 0, count = 0;
};

class dsv41_model {
 public:
  dsv41_model(dsv41_weights w, const dsv41_options& o);
  ~dsv41_model();
  dsv41_model(const dsv41_model&) = delete;
  dsv41_model& operator=(const dsv41_model&) = delete;

  static std::unique_ptr<dsv41_model> open(const std::string& path, const dsv41_options& o);

  const dsv41_config& config() const noexcept;
  const dsv41_weights& weights() const noexcept;
  const dsv41_options& options() const noexcept;
  /// A fresh state in this model's storage (packed FP4 rows when qat_kv && packed_kv, else f32 rows).
  dsv41_state new_state() const { return dsv41_state(config(), packed_state()); }
  bool packed_state() const noexcept { return options().qat_kv && options().packed_kv; }

  /// Runs `ids` at positions st.pos()…; logits rows as dsv4_model::forward.
  std::vector<float> forward(std::span<const uint32_t> ids, dsv41_state& st, dsv41_logits want,
                             dsv41_trace* trace = nullptr);
  /// Several sequences in one pass (see dsv4_model::forward_batch).
  std::vector<float> forward_batch(std::span<const uint32_t> ids, std::span<const dsv41_segment> segs,
                                   dsv41_logits want, dsv41_trace* trace = nullptr);

  /// Attaches a profile (cpu_profile.hpp) that the forward calls charge their phases to, or detaches it (nullptr).
  /// The profile must outlive its attachment.
  void set_profile(cpu_profile* p) noexcept;

  struct impl;

 private:
  std::unique_ptr<impl> p_;
};

}  // namespace cmfx::driver
