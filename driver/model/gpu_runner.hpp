#pragma once
// A model file's graph on a Vulkan device as the driver's commands use it (`cmfx run|model --backend vulkan`): opens
// the device, maps and uploads a V4 (dsv4_gpu_model) or V4.1 (dsv41_gpu_model) file, and runs token ids through it.
// One sequence.
#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "cmfx/kernels/act_precision.hpp"
#include "dsv41_weights.hpp"
#include "dsv4_weights.hpp"
#include "gpu_expert_cache.hpp"
#include "gpu_graph.hpp"
#include "prefill_experts.hpp"

namespace cmfx::gpu {
class device;
class kernels;
}  // namespace cmfx::gpu

namespace cmfx::driver {

struct gpu_run_options {
  int device = -1;          ///< index in gpu::list_devices(); -1: the best (discrete first)
  uint64_t max_ctx = 4096;  ///< positions the device state holds
  /// --act: i8 = int8 activations for the routed and shared experts on the GPU (expert_act of the graphs' options)
  /// and for the decode steps' dense products whose format has an int8 kernel (dense_act of both graphs), as the
  /// CPU graph's i8 covers every projection; f32 = the parity reference.
  act_precision expert_act = act_precision::f32;
  uint64_t vram_budget = 0;  ///< the graphs' vram_budget (0: every expert resident)
  uint32_t prefill_chunk = 512;  ///< the graphs' prefill_chunk (dsv4_gpu_options / dsv41_gpu_options)
  gpu::gemm_precision gemm = gpu::gemm_precision::f16;  ///< dsv4_gpu_options::gemm (--gemm)
  prefill_expert_mode prefill_experts = prefill_expert_mode::fastest;  ///< dsv4_gpu_options::prefill_experts
  cold_experts cold = cold_experts::copy;  ///< the graphs' cold (--cold-experts; with vram_budget)
  uint32_t copy_threads = 8;  ///< the graphs' copy_threads (--copy-threads: packing and CPU experts of the cache)
  bool budget_keeps_chunks = false;  ///< the graphs' budget_keeps_chunks (--budget-keeps-chunks)
  /// Under vram_budget: the chunks' expert streaming (with transfer_copies the device opens its transfer queue).
  chunk_streaming streaming;
};

class gpu_runner {
 public:
  /// Throws usage_error for a file that is not a V4 / V4.1 model, gpu_error when no Vulkan device is usable.
  static std::unique_ptr<gpu_runner> open(const std::string& path, const gpu_run_options& o);
  ~gpu_runner();

  /// V4: the model's config; V4.1: the fields the driver's turn and tokenizer check use (vocab, bos, eos, layers).
  const dsv4_config& config() const noexcept { return cfg_; }
  /// The file's layout ("cmf" / "release").
  const std::string& source() const noexcept { return source_; }
  bool is_v41() const noexcept { return v41_; }
  gpu_graph& model() noexcept { return *m_; }
  const gpu_graph& model() const noexcept { return *m_; }
  std::string device_name() const;
  /// One line of expert-cache statistics (hit rate, bytes moved per token), or that every expert is resident.
  std::string cache_line() const;

  /// Runs ids at positions model().pos()… (a chunk at position 0 is a prefill, as are positions a
  /// model().mark_prefill covers); the last token's logits when
  /// `last`, else nothing.
  std::vector<float> forward(std::span<const uint32_t> ids, bool last) { return m_->forward(ids, last); }
  /// Every id's logits [n, vocab] (gpu_graph::forward_all).
  std::vector<float> forward_all(std::span<const uint32_t> ids) { return m_->forward_all(ids); }

 private:
  gpu_runner() = default;
  std::unique_ptr<gpu::device> dev_;
  std::unique_ptr<gpu::kernels> k_;
  dsv4_weights w_;
  dsv41_weights w41_;
  dsv4_config cfg_;
  std::string source_;
  bool v41_ = false;
  std::unique_ptr<gpu_graph> m_;
};

}  // namespace cmfx::driver
