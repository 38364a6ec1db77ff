#pragma once
// The DeepSeek-V4 graph on a Vulkan device (issue #9): every weight resident in device memory, every op of a token
// (mHC, attention with compressor and indexer, MoE, head) recorded into one command buffer and submitted once; the
// host reads back only the logits (or the greedy token id). The math is the CPU graph's (dsv4_forward.hpp) with the
// kernels of include/cmfx/vk/kernels.hpp; tests/parity/cases_model.cpp compares the two on the toy.
//
// Scope of this version: one sequence; a prompt runs in chunks of positions (dsv4_gpu_chunk.cpp), decode one token
// per submission; QAT options off; f32 activations (int8 for the experts at decode). The per-sequence state (window rings, compressor windows, compressed entries, indexer keys)
// lives on the device for up to `max_ctx` positions.
#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "cmfx/kernels/act_precision.hpp"
#include "cmfx/vk/gemm_precision.hpp"
#include "dsv4_forward.hpp"
#include "gpu_graph.hpp"
#include "prefill_experts.hpp"

namespace cmfx::gpu {
class device;
class kernels;
}  // namespace cmfx::gpu

namespace cmfx::driver {

struct dsv4_gpu_options {
  uint64_t max_ctx = 4096;  ///< positions the device state holds (compressed entries: max_ctx / ratio per layer)
  /// Activations of the routed and shared experts (stacked with them): f32 (default, the parity reference) or i8
  /// (rounded per 32 values, integer dot products; q4tp / q2tp / MXFP4 experts on devices with integer dot
  /// products — kernels::moe). Everything else stays f32.
  act_precision expert_act = act_precision::f32;
  /// Activations of the decode step's dense products whose format has an integer-dot kernel (q4tp / q2tp / MXFP4:
  /// the attention, compressor and indexer projections, wo_a / wo_b, a shared expert kept apart, the head): f32
  /// (default) or i8 — the CPU's dsv4_options::matmul_act = i8 rounds the same inputs by the same rule
  /// (gpu_dense_i8.hpp). The router gate, FP8 / BF16 / f32 matrices and the prefill chunks stay as they are.
  act_precision dense_act = act_precision::f32;
  /// With int8 dense inputs, int8 copies written by their producers instead of a quantisation step each (docs/VULKAN.md
  /// "Quantisation steps folded into their producers"): o's by the split attention's combine (fold_o_q8), u's by
  /// the boundary's finish before the attention site and the head (fold_u_q8). The same bits. o on by default:
  /// +0.8 % decode on the H200, alternated twice (docs/PERF.md "Forty-second session"); u off: with o it measured
  /// 1 % slower (u then staged in shared memory; "Fortieth session"), alone 4 % slower in one run.
  bool fold_o_q8 = true, fold_u_q8 = false;
  /// The router's logits and the routing in one dispatch (kernels::router_route: the last of the router's
  /// workgroups routes; where the router is f32 or bf16). On by default: +1.6–1.9 % decode on the H200, alternated
  /// twice (docs/PERF.md "Forty-second session"). The logits' sums run in another order than the router's matvec,
  /// so selections may differ from two dispatches at near-ties.
  bool fuse_route = true;
  /// Prefill chunks: a shared expert stacked with the routed ones (the CMF files' formats) runs apart, as three
  /// tiled GEMMs like a shared expert of other formats, from copies of its matrices uploaded beside the stack
  /// (~10 MB per layer; not under a vram_budget), instead of as one more expert of the
  /// grouped MoE kernels with every token of the chunk. Decode steps keep it stacked. On by default since the
  /// forty-fifth session: 12-layer prefills of the CMF layout on the H200 ran 5102 / 5007 tok/s apart against
  /// 4533 / 4522 stacked, alternated (docs/PERF.md "Forty-fifth session").
  bool prefill_shared_apart = true;
  /// Device bytes the model may take (weights, sequence state, scratch); 0 = no limit, every weight resident.
  /// When the routed experts do not fit, every layer keeps an expert cache of the same number of slots (what the
  /// budget leaves after everything else, split evenly over the layers; at least top_k with cold = copy): after a
  /// layer's routing the host reads the selected ids, copies the experts that are not resident from the mapped
  /// weights into the least recently used slots (or computes some on the CPU: `cold`), and the layer's MoE reads
  /// its experts through a slot map (kernels::moe). The token then runs as one submission per layer (two with
  /// cold = cpu / auto), the next position recorded a layer at a time in the waits (record_task), without
  /// profiling.
  uint64_t vram_budget = 0;
  /// Under a vram_budget that every expert fits only without the prefill chunk's scratch: false (default) drops the
  /// scratch — experts resident, prompts token by token, the decode's speed first; true keeps it — prompts in
  /// chunks, the experts through the expert cache (its passes), all but a few resident (chunk_experts.hpp
  /// place_experts).
  bool budget_keeps_chunks = false;
  /// Host threads that copy streamed experts into the upload ring (expert cache only; at most the cores) — and
  /// compute them with cold_experts::cpu.
  uint32_t copy_threads = 8;
  /// What the expert cache does with a selected expert that is not resident (gpu_expert_cache.hpp): copy it in
  /// (default) or, unless it is hotter than the coldest slot, compute it on the host's CPU.
  cold_experts cold = cold_experts::copy;
  /// cold_experts::cpu: how many more (decayed) uses than the coldest slot's a miss needs to be copied in.
  double cold_margin = 1.0;
  bool cache_spin_waits = true;  ///< the expert cache's per-layer waits spin (gpu_expert_cache_options::spin_waits)
  uint64_t cache_cpu_chunk = 64;  ///< rows per chunk of the CPU experts (gpu_expert_cache_options::cpu_chunk_rows)
  /// The chunks' passes overlap copies and MoEs (gpu_expert_cache_options::pass_overlap).
  bool cache_pass_overlap = false;
  /// The chunks' pass copies in transfer recordings ordered by sync points (gpu_expert_cache_options::
  /// transfer_copies; on the copy engines with device_options::transfer_queue).
  bool cache_transfer_copies = false;
  uint64_t cache_pass_group_bytes = uint64_t(32) << 20;  ///< gpu_expert_cache_options::pass_group_bytes
  /// Device bytes for the chunks' prefetched experts (gpu_expert_cache_options::prefetch_bytes; with
  /// cache_transfer_copies; 0: none).
  uint64_t cache_prefetch_bytes = 0;
  double cache_prefetch_min_uses = 4.0;  ///< gpu_expert_cache_options::prefetch_min_uses
  bool cache_prefetch_d2d_compute = true;  ///< gpu_expert_cache_options::prefetch_d2d_compute
  bool cache_cached_staging = false;       ///< gpu_expert_cache_options::cached_staging
  bool cache_stream_pack = false;          ///< gpu_expert_cache_options::stream_pack
  /// Positions per prefill chunk (forward() of several ids): each chunk is one recording with every op batched
  /// over its rows (dsv4_gpu_chunk.cpp). 0 or 1: token by token. The window ring holds window + chunk rows and the
  /// compressor rings ≥ chunk + 2·ratio, so the state grows with it; the chunk's scratch is allocated by the first
  /// chunk — under a vram_budget at construction, counted before the experts are placed. With the expert cache a
  /// chunk runs each layer's experts in passes (chunk_experts.hpp: int8 chunk experts — prefill_experts — on the
  /// grouped int8 path, prefill_chunk ≥ 3); where that does not apply the scratch is freed and prompts run token by
  /// token.
  uint32_t prefill_chunk = 512;
  /// The prefill chunks' tiled GEMMs (dense products, grouped experts, the head of forward_all): f16 (default: tiles
  /// rounded to f16 with saturation, f32 sums, on the tensor cores where the device has cooperative matrices, else
  /// the f32 tiles; 1.6x the prefill of f32 on the H200, docs/PERF.md) or f32 (the CPU's results up to summation
  /// order: the parity reference). Decode steps are not affected.
  gpu::gemm_precision gemm = gpu::gemm_precision::f16;
  /// The activation precision of the prefill chunks' experts (prefill_experts.hpp): fastest (default) — per
  /// format, the int8 kernels or the f16 tiles, whichever the H200 measured faster; f16; act (= expert_act).
  /// Decode steps are not affected.
  prefill_expert_mode prefill_experts = prefill_expert_mode::fastest;
  /// Record ahead: the next position's command buffer while the device runs this one; a prompt's next prefill
  /// chunk (its inputs staged, its commands recorded) while the device runs this chunk (chunk_pipeline.hpp).
  bool pipeline = true;
  /// The embedding (vocab × dim in its format) on the device too, so that decode_greedy_each chains its steps
  /// without the host (not with the expert cache, nor where it would exceed vram_budget, one storage binding or the
  /// device memory). The chain always records ahead (`pipeline` applies to run()'s single steps).
  bool device_embedding = true;
  bool profile = false;     ///< timestamps between the phases of every layer (see dsv4_gpu_profile)
  std::vector<uint32_t> profile_layers;  ///< with profile: also a timestamp after every op of these layers
};

using dsv4_gpu_profile = gpu_graph_profile;

/// The expert cache (dsv4_gpu_options::vram_budget), totals since construction (gpu_expert_cache.hpp).
using dsv4_gpu_cache_stats = gpu_expert_cache_stats;

/// "expert cache: S of E slots per layer, hit rate …, … MB moved per token" (or "every expert resident").
inline std::string dsv4_gpu_cache_line(const dsv4_gpu_cache_stats& s, const dsv4_config& c) {
  return gpu_expert_cache_line(s, c.experts);
}

class dsv4_gpu_model final : public gpu_graph {
 public:
  /// Uploads every weight of `w` (kept alive by the model: the embedding is decoded on the host per token).
  dsv4_gpu_model(const dsv4_weights& w, gpu::device& dev, gpu::kernels& k, const dsv4_gpu_options& o = {});
  ~dsv4_gpu_model() override;
  dsv4_gpu_model(const dsv4_gpu_model&) = delete;
  dsv4_gpu_model& operator=(const dsv4_gpu_model&) = delete;

  const dsv4_config& config() const noexcept;
  uint64_t pos() const noexcept override;
  /// Back to position 0 (the device state is overwritten as positions are written again).
  void reset() noexcept override;
  /// A copy of the sequence state (and position) in a second set of device buffers (allocated on first use),
  /// and back: what a prompt cache keeps of the last prompt. restore_snapshot without a snapshot resets.
  void save_snapshot() override;
  void restore_snapshot() override;
  /// Benchmarks only: jump to position `pos` (< max_ctx) with every state value uniform in [−1, 1), as if `pos`
  /// tokens had left random keys and entries — the work of a step depends on the position and, through the
  /// indexer's top-k (passes over tied scores), on those values: random keys give distinct scores, as real ones do.
  void bench_seek(uint64_t pos) override;
  /// Timestamps between the phases of every later step (accumulated in profile()); off by default.
  void set_profile(bool on, std::vector<uint32_t> layers = {}) override;

  /// Runs `token` at position pos() and advances. want_logits: returns the logits [vocab] (else empty).
  /// trace (optional): appends this token's indexer picks and routed experts, as dsv4_model::forward does.
  std::vector<float> step(uint32_t token, bool want_logits, dsv4_trace* trace = nullptr);
  /// Runs `token` and returns the argmax of its logits, computed on the device (4 bytes read back).
  uint32_t step_greedy(uint32_t token) override;
  /// Greedy steps chained on the device (each reads its token from the previous argmax; the host submits step
  /// i + 1 before step i ends) — where the embedding is on the device, else step by step.
  uint64_t decode_greedy_each(uint32_t first, uint64_t max, const std::function<bool(uint32_t)>& on_token) override;
  bool chains_decode() const noexcept override;
  /// Tokens chosen on the device (gpu_graph::decode_sampled_each) where the device has kernels::sample: chained
  /// where chains_decode, else step by step (the expert cache).
  bool samples_on_device() const noexcept override;
  uint64_t decode_sampled_each(uint32_t first, uint64_t max, const device_sampling& ds,
                               const std::function<bool(uint32_t)>& on_token) override;
  uint64_t max_ctx() const noexcept override;
  /// Several positions: in chunks of prefill_chunk (one recording each), or token by token (chunk 0/1, the expert
  /// cache, a single id). last: the logits of the last id.
  std::vector<float> forward(std::span<const uint32_t> ids, bool last) override;
  /// Every id's logits: in prefill chunks with every row's logits (forward_chunk_rows), or token by token.
  std::vector<float> forward_all(std::span<const uint32_t> ids) override;
  /// Tests: the chunked path on ids (≤ prefill_chunk of them, one chunk) with the logits of every row [n, vocab];
  /// trace (optional): appends every row's routed experts and indexer picks, as step() does.
  std::vector<float> forward_chunk_rows(std::span<const uint32_t> ids, dsv4_trace* trace = nullptr);
  uint32_t vocab() const noexcept override { return config().vocab; }
  uint32_t experts() const noexcept override { return config().experts; }
  uint32_t layer_count() const noexcept override { return config().layers; }
  std::vector<uint32_t> kind_layers() const override;
  std::string prefill_profile() const override;
  bool prefill_chunked() const override;
  gpu_prefill_stats last_prefill() const override;

  uint64_t weight_bytes() const noexcept override;     ///< device bytes of the weights
  uint64_t state_bytes() const noexcept override;      ///< device bytes of the sequence state and scratch
  /// Weight bytes one decode step reads: every dense matrix, the head, and top_k routed experts (+ shared) per layer.
  uint64_t bytes_per_token() const noexcept override;
  uint32_t last_dispatches() const noexcept override;  ///< dispatches recorded by the last step
  /// Steps that ran a recording made while the previous step ran (pipelined decode, with or without the cache).
  uint64_t pipelined_steps() const noexcept;
  double last_record_seconds() const noexcept override;
  double last_device_seconds() const noexcept override;
  step_host_seconds last_step_host() const noexcept override;
  const dsv4_gpu_profile& profile() const noexcept override;
  const dsv4_gpu_cache_stats& cache_stats() const noexcept override;

  struct impl;

 private:
  std::unique_ptr<impl> p_;
};

}  // namespace cmfx::driver
