#pragma once
// Routed experts of a GPU graph (V4 and V4.1): resident when they fit the VRAM budget, otherwise a per-layer device
// expert cache. The graph runs a token as one submission up to the first layer's routing and one per layer after
// it (run_token); between them the host reads the layer's selected ids from mapped memory, copies the experts that
// are not resident from the mapped weights into a write-combined upload ring (copy threads), and records their
// copies into the least recently used slots plus the slot map's update before the layer's MoE, which reads its
// experts through the map (gpu::kernels::moe(..., slot_map)): ids and sum order unchanged, so the output is
// bit-identical to the resident layer's.
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "cmfx/core/thread_pool.hpp"
#include "cmfx/kernels/moe.hpp"
#include "cmfx/vk/kernels.hpp"

namespace cmfx::driver {

/// The expert cache's totals since construction.
struct gpu_expert_cache_stats {
  bool active = false;        ///< false: every expert resident
  uint32_t slots = 0;         ///< routed-expert slots per layer
  uint64_t slot_bytes = 0;    ///< device bytes of one expert (gate, up, down)
  uint64_t tokens = 0;        ///< steps run with the cache
  uint64_t lookups = 0;       ///< selected routed experts (top_k per layer per token)
  uint64_t hits = 0;          ///< of those, already resident
  uint64_t bytes_moved = 0;   ///< host → device expert bytes
  double move_seconds = 0;    ///< host time spent copying experts into the upload ring (inside the steps)
  double copy_device_seconds = 0;  ///< device time of the ring → slot copies (timestamps; 0 without them)
  double wait_seconds = 0;    ///< host time blocked on the device's per-layer parts (compute + copies + latency)
};

/// "expert cache: S of E slots per layer, hit rate …, … MB moved per token" (or "every expert resident").
std::string gpu_expert_cache_line(const gpu_expert_cache_stats& s, uint32_t experts);

class gpu_expert_cache {
 public:
  gpu_expert_cache(gpu::device& dev, uint32_t experts, uint32_t top_k);

  /// Layer l's (= the count so far) host experts and shared expert; sets moe's shape (experts, dim, inter) and
  /// whether the shared expert is stacked with the routed ones (same formats and shape; else the graph runs it
  /// apart); place() fills it. The views must stay valid while the model lives (mapped weights). Returns the weight
  /// bytes one token reads from the layer's stacked experts (top_k routed + the stacked shared one).
  uint64_t add_layer(const std::vector<expert_view>& experts, const expert_view& shared, gpu::gpu_moe* moe);
  /// After every other allocation (`used` device bytes): uploads every layer's experts when they fit `budget`
  /// (0 = no limit), else allocates the same number of slots per layer (what the budget leaves, ≥ top_k, else a
  /// usage_error naming the minimum). Returns the device bytes it took.
  /// Bytes every layer's routed (and stacked shared) experts take when all are resident — what place() compares
  /// with the budget.
  uint64_t resident_bytes() const;
  uint64_t place(uint64_t used, uint64_t budget, uint32_t copy_threads);

  bool active() const noexcept { return stats_.active; }
  const gpu_expert_cache_stats& stats() const noexcept { return stats_; }
  /// Layer l's slot map for kernels::moe (no view when every expert is resident).
  gpu::view slot_map(uint32_t l) const;
  /// Where a recording copies layer l's selected ids (top_k uint32) for the host to read after its part ran.
  gpu::view ids_slot(uint32_t l) const;

  /// Runs one token: `pre` and `first` (up to the first layer's routing) then segs[l] (the rest after layer l's
  /// routing), making each layer's selected experts resident in between. Returns when the token ran; on an error
  /// waits for everything submitted and empties the cache before rethrowing.
  void run_token(gpu::commands& pre, gpu::commands& first, std::vector<gpu::commands>& segs);

 private:
  struct layer {
    std::vector<expert_view> host;  // routed experts (views into the mapped weights)
    expert_view shared;
    gpu::gpu_moe* moe = nullptr;
    std::vector<uint32_t> slot_of;   // [experts]
    std::vector<int64_t> expert_in;  // [slots]: −1 empty
    std::vector<uint64_t> last_use;  // [slots]
    gpu::buffer map;                 // uint32 [experts] (0xFFFFFFFF = not resident)
  };
  struct chunk {
    uint8_t* to;
    const uint8_t* from;
    uint64_t bytes;
  };
  /// Makes layer l's selected experts resident: per missing expert, packs its image into the ring and submits a
  /// recording of its copy into a slot (appended to `out`; the last one also updates the slot map). Returns the
  /// number of experts moved.
  uint32_t fill(uint32_t l, const uint32_t* ids, std::vector<gpu::commands>& out);
  void invalidate();

  gpu::device& dev_;
  uint32_t experts_, top_k_;
  std::vector<layer> layers_;
  gpu::buffer ring_;      // host-written: the packed images of one layer's missing experts
  gpu::buffer readback_;  // host-read: every layer's selected ids
  std::unique_ptr<thread_pool> copiers_;
  std::vector<chunk> chunks_;  // one layer's packed images in pieces ≤ 1 MiB (reused)
  gpu_expert_cache_stats stats_;
  uint64_t tick_ = 0;
};

}  // namespace cmfx::driver
