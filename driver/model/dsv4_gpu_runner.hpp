#pragma once
// The V4 graph on a Vulkan device as the driver's commands use it (`cmfx run --backend vulkan`): opens the device,
// maps and uploads a model file, and runs token ids through dsv4_gpu_model. One sequence.
#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "dsv4_gpu.hpp"

namespace cmfx::gpu {
class device;
class kernels;
}  // namespace cmfx::gpu

namespace cmfx::driver {

struct dsv4_gpu_run_options {
  int device = -1;          ///< index in gpu::list_devices(); -1: the best (discrete first)
  uint64_t max_ctx = 4096;  ///< positions the device state holds
  /// --act: i8 = int8 activations for the routed and shared experts on the GPU (dsv4_gpu_options::expert_act;
  /// the CPU graph's i8 covers every projection); f32 = the parity reference.
  act_precision expert_act = act_precision::f32;
  uint64_t vram_budget = 0;  ///< dsv4_gpu_options::vram_budget (0: every expert resident)
};

class dsv4_gpu_runner {
 public:
  /// Throws usage_error for a file that is not a V4 model, gpu_error when no Vulkan device is usable.
  static std::unique_ptr<dsv4_gpu_runner> open(const std::string& path, const dsv4_gpu_run_options& o);
  ~dsv4_gpu_runner();

  const dsv4_config& config() const noexcept { return w_.cfg; }
  const dsv4_weights& weights() const noexcept { return w_; }
  dsv4_gpu_model& model() noexcept { return *m_; }
  std::string device_name() const;
  /// One line of expert-cache statistics (hit rate, bytes moved per token), or that every expert is resident.
  std::string cache_line() const;

  /// Runs ids at positions model().pos()…; returns the last token's logits when `last`, else nothing.
  std::vector<float> forward(std::span<const uint32_t> ids, bool last);

 private:
  dsv4_gpu_runner() = default;
  std::unique_ptr<gpu::device> dev_;
  std::unique_ptr<gpu::kernels> k_;
  dsv4_weights w_;
  std::unique_ptr<dsv4_gpu_model> m_;
};

}  // namespace cmfx::driver
