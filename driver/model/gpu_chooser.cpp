#include "gpu_chooser.hpp"

#include <span>
#include <string>
#include <vector>

namespace cmfx::driver {

void gpu_chooser::begin(gpu::device& dev, const device_sampling& ds, uint32_t vocab) {
  if (!ds.seen.empty() && ds.seen.size() != vocab)
    throw usage_error("gpu model: the penalty state holds " + std::to_string(ds.seen.size()) +
                      " tokens, not the vocabulary's " + std::to_string(vocab));
  if (ds.greedy() && !ds.seen.empty()) throw usage_error("gpu model: greedy decode on the device takes no penalties");
  if (ds.top_logprobs > int32_t(gpu::kernels::logprobs_max_top) || (ds.top_logprobs >= 0 && !ds.logprobs))
    throw usage_error("gpu model: logprobs on the device take at most " +
                      std::to_string(gpu::kernels::logprobs_max_top) + " alternatives and a place to go");
  if (!scratch_) {
    rng_ = dev.alloc(gpu::kernels::sample_rng_bytes);
    scratch_ = dev.alloc(gpu::kernels::sample_scratch_bytes(vocab));
  }
  if (ds.top_logprobs >= 0 && !lp_ring_) lp_ring_ = dev.alloc_readback(uint64_t(slots) * lp_words * 4);
  if (!ds.greedy()) {
    std::vector<uint64_t> words(ds.rng.x.begin(), ds.rng.x.end());
    words.push_back(ds.rng.index);
    dev.upload(rng_, words);
  }
  if (!ds.seen.empty()) {
    if (!seen_) seen_ = dev.alloc(uint64_t(vocab) * 4);
    dev.upload(seen_, ds.seen);
  }
  set_ = ds.settings;
  greedy_ = ds.greedy(), pen_ = !ds.seen.empty(), lp_top_ = ds.top_logprobs, on_ = true;
}

void gpu_chooser::record_draw(gpu::kernels& k, gpu::commands& c, gpu::view logits, uint32_t vocab,
                              gpu::view best) const {
  if (!on_ || greedy_) throw std::logic_error("gpu_chooser: no drawn setting");
  k.sample(c, logits, vocab, set_, rng_, scratch_, best, pen_ ? gpu::view(seen_) : gpu::view());
}

void gpu_chooser::record_logprobs(gpu::kernels& k, gpu::commands& c, gpu::view logits, uint32_t vocab,
                                  gpu::view best, uint32_t slot) const {
  if (!logprobs()) return;
  k.logprobs(c, logits, vocab, uint32_t(lp_top_), best, scratch_,
             gpu::view(lp_ring_, uint64_t(slot % slots) * lp_words * 4, uint64_t(lp_words) * 4));
}

void gpu_chooser::read(gpu::device& dev, uint32_t slot, uint32_t vocab, step_logprobs& out) const {
  if (!logprobs()) return;
  const auto* rec = reinterpret_cast<const uint32_t*>(dev.mapped(lp_ring_)) + uint64_t(slot % slots) * lp_words;
  step_logprobs::from(std::span<const uint32_t>(rec, lp_words), uint32_t(lp_top_), vocab, out);
}

}  // namespace cmfx::driver
