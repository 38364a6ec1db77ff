#pragma once
// What the driver's commands (bench, run) use of a model graph on a Vulkan device, V4 (dsv4_gpu.hpp) or V4.1
// (dsv41_gpu.hpp): one sequence whose state lives on the device, run token by token, with its byte counts,
// per-phase profile and expert-cache statistics.
#include <cstdint>
#include <functional>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "cmfx/core/error.hpp"
#include "device_sampling.hpp"
#include "gpu_expert_cache.hpp"
#include "prefill_mark.hpp"

namespace cmfx::driver {

/// Device time per phase, summed over the layers of the profiled steps (set_profile), in seconds.
struct gpu_graph_profile {
  double hc = 0, attn_proj = 0, compress = 0, index = 0, attn_core = 0, attn_out = 0, route = 0, experts = 0,
         head = 0, total = 0;
  uint64_t steps = 0;
  std::vector<std::pair<std::string, double>> ops;  ///< "L<layer> <kind> <op>" → seconds (profile layers)
};

/// Where the time of the last forward() over several positions went, summed over its prefill chunks (all zero where
/// it ran token by token): host preparation (the chunk's parameters, uploads), recording, and device time from the
/// chunk's first to its last command (0 without timestamps).
struct gpu_prefill_stats {
  uint32_t chunks = 0, dispatches = 0;
  double prep_s = 0, record_s = 0, device_s = 0;
};

class gpu_graph {
 public:
  virtual ~gpu_graph() = default;
  virtual uint32_t vocab() const noexcept = 0;
  virtual uint32_t experts() const noexcept = 0;
  virtual uint32_t layer_count() const noexcept = 0;
  virtual uint64_t pos() const noexcept = 0;
  /// Back to position 0. A snapshot stays (restore_snapshot returns to it).
  virtual void reset() noexcept = 0;
  /// A copy of the sequence state (and position) and back: what a prompt cache keeps of the last prompt.
  virtual void save_snapshot() = 0;
  virtual void restore_snapshot() = 0;
  /// Benchmarks only: jump to position `pos` with every state value random (gpu_state_fill_random).
  virtual void bench_seek(uint64_t pos) = 0;
  /// Timestamps between the phases of every later step; with `layers`, also after every op of those layers. Turning
  /// it on (from off) starts a new profile().
  virtual void set_profile(bool on, std::vector<uint32_t> layers = {}) = 0;
  /// The first layer of each attention kind (the per-op profile's default selection).
  virtual std::vector<uint32_t> kind_layers() const = 0;
  /// Device time of the prefill chunks run while profiling was on, per op summed over layers and chunks, one line
  /// per op ("" where prompts run token by token).
  virtual std::string prefill_profile() const { return {}; }
  /// Whether forward() of several ids runs them in prefill chunks (else token by token).
  virtual bool prefill_chunked() const { return false; }
  /// Announces that positions [0, end) are one prompt's prefill, run in several forward() calls (V4.1's stale
  /// index-key rule, dsv41_state::mark_prefill: the official prefill is one call; graphs whose results do not
  /// depend on it ignore it). Returns whether the mark took effect.
  virtual bool mark_prefill(uint64_t /*end*/) noexcept { return false; }
  /// How many leading positions of the live sequence (or of the snapshot) a new prompt may reuse
  /// (model/prefix_reuse.hpp): V4.1 under the stale-key rule, its prefill positions; otherwise all.
  virtual uint64_t reuse_limit(bool /*snapshot*/) const noexcept { return no_reuse_limit; }
  /// The chunks of the last forward() / forward_all() (zero where it ran token by token).
  virtual gpu_prefill_stats last_prefill() const { return {}; }
  /// Runs ids at positions pos()…; returns the last token's logits [vocab] when `last`, else nothing.
  virtual std::vector<float> forward(std::span<const uint32_t> ids, bool last) = 0;
  /// The checks of a multi-position call, before any position runs (a refused call leaves the state as it was):
  /// every id < vocab, positions pos … pos + n − 1 within max_ctx. usage_error otherwise.
  static void check_ids(std::span<const uint32_t> ids, uint32_t vocab, uint64_t pos, uint64_t max_ctx) {
    for (uint32_t id : ids)
      if (id >= vocab) throw usage_error("gpu model: token id " + std::to_string(id) + " >= vocab " + std::to_string(vocab));
    if (pos + ids.size() > max_ctx)
      throw usage_error("gpu model: positions " + std::to_string(pos) + ".." + std::to_string(pos + ids.size() - 1) +
                        " reach beyond the device context of " + std::to_string(max_ctx) + " positions (--ctx)");
  }
  /// Runs ids at positions pos()… and returns the logits of every one [n, vocab] (teacher-forced perplexity). Here
  /// one token at a time; a graph with batched prefill overrides it.
  virtual std::vector<float> forward_all(std::span<const uint32_t> ids) {
    std::vector<float> out;
    for (size_t i = 0; i < ids.size(); ++i) {
      const std::vector<float> l = forward(ids.subspan(i, 1), true);
      out.insert(out.end(), l.begin(), l.end());
    }
    return out;
  }
  /// Runs `token` and returns the argmax of its logits, computed on the device.
  virtual uint32_t step_greedy(uint32_t token) = 0;
  /// Greedy decode with the ids as they come: runs `first`, hands each step's argmax to on_token and runs it next,
  /// until on_token returns false or `max` ids were handed over. Returns the ids handed over; pos() advances by as
  /// many (a step the device ran ahead of a stop is dropped: everything it wrote is keyed by its position and is
  /// written again when that position runs). Here step by step; a graph may chain the steps on the device.
  virtual uint64_t decode_greedy_each(uint32_t first, uint64_t max, const std::function<bool(uint32_t)>& on_token) {
    return step_chosen_each(first, max, on_token, [&](uint32_t tok) { return step_greedy(tok); });
  }
  /// Whether decode_sampled_each is available (kernels::sample and kernels::logprobs on this device).
  virtual bool samples_on_device() const noexcept { return false; }
  /// Whether `steps` decode_sampled_each steps from here fit the context (and the device samples).
  bool can_sample(uint64_t steps) const noexcept { return samples_on_device() && pos() + steps <= max_ctx(); }
  /// Decode with each step's token chosen on the device from its logits as the host sampler ds came from would
  /// (cmfx::sampler's choice, bit for bit: sampling_params::device_samplable) — drawn, continuing its MT19937-64
  /// stream with one draw per step (and its penalty counts), or its argmax when greedy — with the raw logits'
  /// logprobs in *ds.logprobs before on_token sees each id where ds asks for them. Otherwise as decode_greedy_each:
  /// chained on the device where the graph chains its steps, else step by step (only the id and the logprobs
  /// record read back). The caller's sampler records each handed-over id with accept_drawn (a step run ahead of a
  /// stop drew too; the host's state, not the device's, carries on).
  virtual uint64_t decode_sampled_each(uint32_t /*first*/, uint64_t /*max*/, const device_sampling& /*ds*/,
                                       const std::function<bool(uint32_t)>& /*on_token*/) {
    throw usage_error("gpu model: this graph does not sample on the device");
  }
  /// decode_greedy_each for n steps; returns the n argmax ids (the last one not yet run).
  std::vector<uint32_t> decode_greedy(uint32_t first, uint64_t n) {
    std::vector<uint32_t> out;
    out.reserve(n);
    decode_greedy_each(first, n, [&](uint32_t id) {
      out.push_back(id);
      return true;
    });
    return out;
  }
  /// Whether decode_greedy_each (and decode_sampled_each) chains its steps on the device (then last_dispatches /
  /// last_record_seconds / last_device_seconds are its per-step means). Never while set_chaining(false) holds.
  virtual bool chains_decode() const noexcept { return false; }
  /// on (default): decode chains its steps where the graph can; off: every step runs by itself, as where it cannot
  /// (`cmfx bench --decode-chain off`: what chaining saves).
  void set_chaining(bool on) noexcept { chaining_ = on; }
  bool chaining() const noexcept { return chaining_; }
  /// Positions the device state holds.
  virtual uint64_t max_ctx() const noexcept = 0;
  /// Whether `steps` greedy steps from here chain on the device (and fit the context).
  bool can_chain(uint64_t steps) const noexcept { return chains_decode() && pos() + steps <= max_ctx(); }

  virtual uint64_t weight_bytes() const noexcept = 0;     ///< device bytes of the weights
  virtual uint64_t state_bytes() const noexcept = 0;      ///< device bytes of the sequence state and scratch
  virtual uint64_t bytes_per_token() const noexcept = 0;  ///< weight bytes one decode step reads
  virtual uint32_t last_dispatches() const noexcept = 0;
  virtual double last_record_seconds() const noexcept = 0;
  /// Device time of the last step from its first to its last command (0 where not measured: no timestamps, the
  /// expert cache's segmented steps).
  virtual double last_device_seconds() const noexcept = 0;
  /// Host time of the last step run by itself (not chained; 0 elsewhere), by phase: before its submission (the
  /// token's inputs, and its recording where none was made ahead), recording the next position while it runs, and
  /// blocked on its fence. What a step costs beyond its device time is spent in these and between steps.
  struct step_host_seconds {
    double prepare = 0, record_ahead = 0, wait = 0;
  };
  virtual step_host_seconds last_step_host() const noexcept { return {}; }
  virtual const gpu_graph_profile& profile() const noexcept = 0;
  virtual const gpu_expert_cache_stats& cache_stats() const noexcept = 0;

 protected:
  /// The step-by-step loop of decode_greedy_each / decode_sampled_each: step(token) runs one position and returns
  /// the id chosen there.
  template <class Step>
  static uint64_t step_chosen_each(uint32_t first, uint64_t max, const std::function<bool(uint32_t)>& on_token,
                                   Step&& step) {
    uint64_t n = 0;
    while (n < max) {
      first = step(first);
      ++n;
      if (!on_token(first)) break;
    }
    return n;
  }

 private:
  bool chaining_ = true;
};

}  // namespace cmfx::driver
