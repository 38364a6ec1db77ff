#pragma once
// What the scheduler needs of a model (`cmfx serve --backend cpu|vulkan`): sequences in numbered slots, each with a
// live state and a snapshot of the state at the end of its last prompt, and one forward call over segments of
// several slots (continuous batching).
//   engine_cpu.cpp — the V4 or V4.1 graph on the CPU: any number of slots, every step one forward_batch over all
//                    of them.
//   engine_gpu.cpp — the V4 / V4.1 graph on a Vulkan device: one slot (the device holds one sequence), states and
//                    snapshots on the device, the expert cache's counters on /metrics.
#include <cstdint>
#include <functional>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "model/device_sampling.hpp"
#include "model/prefill_mark.hpp"

namespace cmfx::driver {
class dsv4_model;
class dsv41_model;
class gpu_runner;
}  // namespace cmfx::driver

namespace cmfx::driver::serve {

struct engine_segment {
  unsigned slot = 0;   ///< whose live state the ids run on
  uint64_t first = 0;  ///< index of its first id in the call's ids
  uint64_t count = 0;  ///< ids of this segment (≥ 1)
};

class engine {
 public:
  virtual ~engine() = default;
  virtual uint32_t vocab() const = 0;
  virtual uint32_t eos() const = 0;
  /// Slots the engine can hold at once (the scheduler's --parallel must not exceed it).
  virtual unsigned max_slots() const = 0;
  /// How far truncate() may roll a live state back from its end (0: only to its end or to position 0).
  virtual uint64_t rollback_tokens() const = 0;
  /// The slot's live state back to position 0 (its snapshot stays).
  virtual void reset(unsigned slot) = 0;
  /// The slot's live state to position n: n = 0, its end, or within rollback_tokens() of its end.
  virtual void truncate(unsigned slot, uint64_t n) = 0;
  /// The slot's live state is about to prefill a prompt of `end` positions in several forward() steps: positions
  /// [0, end) are one prefill where that matters (V4.1's stale index-key rule, dsv41_state::mark_prefill; a state
  /// that already ran a decode step keeps it). Engines whose results do not depend on it ignore it.
  virtual void mark_prefill(unsigned /*slot*/, uint64_t /*end*/) {}
  /// How many leading positions of the slot's live state (or of its snapshot) a new prompt may reuse
  /// (model/prefix_reuse.hpp: V4.1 under the stale-key rule, only its prefill positions; otherwise all).
  virtual uint64_t reuse_limit(unsigned /*slot*/, bool /*snapshot*/) const { return no_reuse_limit; }
  /// snapshot = live state / live state = snapshot; drop frees the snapshot's memory where that is possible.
  virtual void save_snapshot(unsigned slot) = 0;
  virtual void restore_snapshot(unsigned slot) = 0;
  virtual void drop_snapshot(unsigned slot) = 0;
  /// Bytes of the slot's live state and snapshot (host memory on the CPU, device memory on the GPU).
  virtual uint64_t state_bytes(unsigned slot) const = 0;
  /// Runs every segment's ids on its slot's live state, in segment order; returns the last token's logits of each
  /// segment, [segs.size(), vocab]. Throws on failure (the slots' states are then undefined: reset them).
  virtual std::vector<float> forward(std::span<const uint32_t> ids, std::span<const engine_segment> segs) = 0;
  /// fn(i) for every i < n, spread over the engine's worker threads where it has them (the scheduler's sampling).
  virtual void parallel(size_t n, const std::function<void(size_t)>& fn) = 0;
  /// Prometheus text of the engine's own metrics (backend, expert cache). Called on the scheduler thread after
  /// each step; the scheduler hands the text to the metrics object.
  virtual std::string metrics_text() const = 0;
  /// One line for the start-up log ("cpu, 16 threads" / "vulkan: <device>, <cache line>").
  virtual std::string describe() const = 0;
  /// Greedy steps chained on the device for one slot (gpu_graph::decode_greedy_each): whether the engine can run
  /// `steps` of them from the slot's position, and the run — `first`, then each id handed to on_token, until it
  /// returns false or `max` ids; returns the ids handed over (the slot's position advances by as many).
  virtual bool can_chain(unsigned /*slot*/, uint64_t /*steps*/) const { return false; }
  virtual uint64_t chain_greedy(unsigned /*slot*/, uint32_t /*first*/, uint64_t /*max*/,
                                const std::function<bool(uint32_t)>& /*on_token*/) {
    return 0;
  }
  /// The same with the tokens drawn on the device (gpu_graph::decode_sampled_each: as the slot's sampler ds came
  /// from; the scheduler records each id in that sampler).
  virtual bool can_sample(unsigned /*slot*/, uint64_t /*steps*/) const { return false; }
  virtual uint64_t chain_sampled(unsigned /*slot*/, uint32_t /*first*/, uint64_t /*max*/, const device_sampling& /*ds*/,
                                 const std::function<bool(uint32_t)>& /*on_token*/) {
    return 0;
  }
};

/// A CPU graph with `slots` sequences (each a dsv4_state / dsv41_state, copies as snapshots).
std::unique_ptr<engine> make_cpu_engine(dsv4_model& m, unsigned slots);
std::unique_ptr<engine> make_cpu_engine(dsv41_model& m, unsigned slots);
/// A model on a Vulkan device (gpu_runner: V4 or V4.1), one sequence.
std::unique_ptr<engine> make_gpu_engine(gpu_runner& r);

}  // namespace cmfx::driver::serve
