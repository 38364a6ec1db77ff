#include "gpu_runner.hpp"

#include "cmfx/vk/device.hpp"
#include "cmfx/vk/kernels.hpp"
#include "dsv41_gpu.hpp"
#include "dsv4_gpu.hpp"

namespace cmfx::driver {

std::unique_ptr<gpu_runner> gpu_runner::open(const std::string& path, const gpu_run_options& o) {
  std::unique_ptr<gpu_runner> r(new gpu_runner());
  r->v41_ = dsv41_is_model(path);
  if (r->v41_) {
    r->w41_ = dsv41_load(path);
    const dsv41_config& c = r->w41_.cfg;
    r->cfg_.vocab = c.vocab, r->cfg_.bos = c.bos, r->cfg_.eos = c.eos, r->cfg_.layers = c.layers;
    r->source_ = r->w41_.source;
  } else {
    r->w_ = dsv4_load(path);
    r->cfg_ = r->w_.cfg;
    r->source_ = r->w_.source;
  }
  gpu::device_options d;
  d.index = o.device;
  d.transfer_queue = o.vram_budget && o.streaming.transfer_copies;  // the copy engines for the chunks' copies
  r->dev_ = std::make_unique<gpu::device>(d);
  r->k_ = std::make_unique<gpu::kernels>(*r->dev_);
  if (r->v41_) {
    dsv41_gpu_options g;
    g.max_ctx = o.max_ctx, g.expert_act = o.expert_act, g.vram_budget = o.vram_budget, g.cold = o.cold;
    g.dense_act = o.expert_act;  // --act i8 covers the dense products too, as the CPU graph's matmul_act
    g.copy_threads = o.copy_threads, g.budget_keeps_chunks = o.budget_keeps_chunks;
    g.prefill_chunk = o.prefill_chunk;
    g.gemm = o.gemm, g.prefill_experts = o.prefill_experts;
    apply_streaming(o.streaming, g);
    r->m_ = std::make_unique<dsv41_gpu_model>(r->w41_, *r->dev_, *r->k_, g);
  } else {
    dsv4_gpu_options g;
    g.max_ctx = o.max_ctx, g.expert_act = o.expert_act, g.vram_budget = o.vram_budget, g.cold = o.cold;
    g.dense_act = o.expert_act;  // --act i8 covers the dense products too, as the CPU graph's matmul_act
    g.copy_threads = o.copy_threads, g.budget_keeps_chunks = o.budget_keeps_chunks;
    g.prefill_chunk = o.prefill_chunk;
    g.gemm = o.gemm, g.prefill_experts = o.prefill_experts;
    apply_streaming(o.streaming, g);
    r->m_ = std::make_unique<dsv4_gpu_model>(r->w_, *r->dev_, *r->k_, g);
  }
  return r;
}

gpu_runner::~gpu_runner() = default;

std::string gpu_runner::device_name() const { return dev_->info().name; }

std::string gpu_runner::cache_line() const { return gpu_expert_cache_line(m_->cache_stats(), m_->experts()); }

}  // namespace cmfx::driver
