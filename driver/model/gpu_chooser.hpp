#pragma once
// The device side of decode steps that choose their token on the device as the host's sampler would
// (gpu_graph::decode_sampled_each), shared by the V4 and V4.1 graphs: the buffers (MT19937-64 state, scratch,
// penalty counts, a ring of logprobs records), the commands after the head (kernels::sample, then
// kernels::logprobs) and the host's reading of a step's logprobs. A graph records with the setting begin() took;
// push constants are fixed at recording, so recordings made under one setting are not run under another.
#include <cstdint>
#include <memory>

#include "cmfx/vk/device.hpp"
#include "cmfx/vk/kernels.hpp"
#include "device_sampling.hpp"

namespace cmfx::driver {

struct gpu_recording;  // gpu_recording.hpp

class gpu_chooser {
 public:
  /// Logprobs records in the ring (a chain has at most two steps in flight).
  static constexpr uint32_t slots = 4;
  static constexpr uint32_t lp_words = gpu::kernels::logprobs_words(gpu::kernels::logprobs_max_top);

  /// Takes ds's setting for the recordings until end(): its RNG state and penalty counts uploaded (buffers allocated
  /// on first use), its logprobs count. usage_error where ds does not fit (penalty counts of another vocabulary,
  /// penalties with greedy, too many alternatives, logprobs without a place to go).
  void begin(gpu::device& dev, const device_sampling& ds, uint32_t vocab);
  void end() noexcept { on_ = false, lp_top_ = -1; }
  bool active() const noexcept { return on_; }
  /// The graph's logits mode for the setting: 3 (drawn: record_draw) or 2 (greedy: the graph's argmax).
  int mode() const noexcept { return greedy_ ? 2 : 3; }
  bool logprobs() const noexcept { return on_ && lp_top_ >= 0; }

  /// kernels::sample from logits [vocab] into best[0] (mode 3).
  void record_draw(gpu::kernels& k, gpu::commands& c, gpu::view logits, uint32_t vocab, gpu::view best) const;
  /// With logprobs: kernels::logprobs of the token in best[0] into record `slot` (after the choice, same recording).
  void record_logprobs(gpu::kernels& k, gpu::commands& c, gpu::view logits, uint32_t vocab, gpu::view best,
                       uint32_t slot) const;
  /// With logprobs: record `slot` (after its recording ran) decoded into out.
  void read(gpu::device& dev, uint32_t slot, uint32_t vocab, step_logprobs& out) const;

  /// One decode_sampled_each call: begin(ds) on construction, end() on destruction, and the graph's recording made
  /// ahead dropped at both ends (its push constants carry no setting, or another one).
  class session {
   public:
    session(gpu_chooser& c, std::shared_ptr<gpu_recording>& ahead, gpu::device& dev, const device_sampling& ds,
            uint32_t vocab)
        : c_(c), ahead_(ahead) {
      ahead_.reset();
      c_.begin(dev, ds, vocab);
    }
    ~session() {
      c_.end();
      ahead_.reset();
    }
    session(const session&) = delete;
    session& operator=(const session&) = delete;

   private:
    gpu_chooser& c_;
    std::shared_ptr<gpu_recording>& ahead_;
  };

 private:
  bool on_ = false, greedy_ = false, pen_ = false;
  int32_t lp_top_ = -1;
  gpu::kernels::sample_settings set_;
  gpu::buffer rng_, scratch_, seen_, lp_ring_;
};

}  // namespace cmfx::driver
