#include "dsv4_gpu_runner.hpp"

#include "cmfx/vk/kernels.hpp"

namespace cmfx::driver {

std::unique_ptr<dsv4_gpu_runner> dsv4_gpu_runner::open(const std::string& path, const dsv4_gpu_run_options& o) {
  std::unique_ptr<dsv4_gpu_runner> r(new dsv4_gpu_runner());
  r->w_ = dsv4_load(path);
  gpu::device_options d;
  d.index = o.device;
  r->dev_ = std::make_unique<gpu::device>(d);
  r->k_ = std::make_unique<gpu::kernels>(*r->dev_);
  dsv4_gpu_options g;
  g.max_ctx = o.max_ctx;
  g.expert_act = o.expert_act;
  g.vram_budget = o.vram_budget;
  r->m_ = std::make_unique<dsv4_gpu_model>(r->w_, *r->dev_, *r->k_, g);
  return r;
}

dsv4_gpu_runner::~dsv4_gpu_runner() = default;

std::string dsv4_gpu_runner::device_name() const { return dev_->info().name; }

std::string dsv4_gpu_runner::cache_line() const { return dsv4_gpu_cache_line(m_->cache_stats(), m_->config()); }

std::vector<float> dsv4_gpu_runner::forward(std::span<const uint32_t> ids, bool last) {
  std::vector<float> logits;
  for (size_t i = 0; i < ids.size(); ++i) logits = m_->step(ids[i], last && i + 1 == ids.size());
  return logits;
}

}  // namespace cmfx::driver
