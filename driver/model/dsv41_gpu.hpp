#pragma once
// The DeepSeek-V4.1 graph on a Vulkan device (issue #9; dsv4-architecture.md §4; the CPU twin is dsv41_forward.cpp /
// dsv41_attention.cpp): every op of a token — Engram, the lagged mHC, CSA2 attention (KV sources compressing with
// ratio 2 or 1, index keys, indexers over the published keys, the two-level candidate pool, reuse layers), MoE and
// the head — recorded into one command buffer (one per layer after its routing with the expert cache) and submitted
// once; the host reads back only the logits or the greedy id.
//
// Semantics are the CPU graph's with its default options (qat_kv on: the window KV FP8 per 32, compressed KV FP4
// with E4M3 scales per 16, index q / keys FP4 with UE8M0 scales per 32 — kept on the device as f32 rows after the
// same quantisation, which the CPU shows bit-identical to its packed rows; qat_act off). A chunk at position 0 is a
// prefill, every later token a one-token decode step, with the official stale-index-key behaviour as an option
// (dsv41_options::stale_index_k): forward() of a prompt then decode equals dsv41_model::forward of the same calls.
// Engram's table rows are gathered and decoded on the host (24 rows per layer per token; the release's tables are
// ~100 GB each and stay in the mapped file) and uploaded with the token; the key/value projection and the gated add
// run on the device.
//
// Scope: one sequence; one token per submission, or a prefill chunk of prefill_chunk positions per submission (every
// op batched over its rows: dsv41_gpu_chunk.cpp); f32 activations except the experts (expert_act) and the decode's
// dense products (dense_act).
#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "cmfx/kernels/act_precision.hpp"
#include "cmfx/vk/gemm_precision.hpp"
#include "dsv41_forward.hpp"
#include "gpu_graph.hpp"
#include "prefill_experts.hpp"

namespace cmfx::gpu {
class device;
class kernels;
}  // namespace cmfx::gpu

namespace cmfx::driver {

struct dsv41_gpu_options {
  uint64_t max_ctx = 4096;  ///< positions the device state holds
  /// Routed and shared experts' activations: f32 (the parity reference) or i8 (as dsv4_gpu_options::expert_act).
  act_precision expert_act = act_precision::f32;
  /// The decode steps' dense products (projections, wo_a / wo_b, the Engram and index-key projections, a shared
  /// expert kept apart, the head) whose format has an int8 kernel: int8 inputs by the CPU graph's rule
  /// (dsv41_options::matmul_act = i8) — as dsv4_gpu_options::dense_act (gpu_dense_i8.hpp). The router stays f32.
  act_precision dense_act = act_precision::f32;
  /// as dsv4_gpu_options::fold_o_q8 (o's int8 copy by the attention's combine): on as for V4 since the forty-seventh
  /// session (+1.3 % decode on an H100, docs/PERF.md)
  bool fold_o_q8 = true;
  /// as dsv4_gpu_options::fuse_route (the router's logits and the routing in one dispatch): on as for V4 since the
  /// forty-seventh session (+1.4 % decode on an H100, docs/PERF.md)
  bool fuse_route = true;
  /// Device bytes the model may take; 0 = no limit. When the routed experts do not fit: the expert cache
  /// (gpu_expert_cache.hpp), as dsv4_gpu_options::vram_budget.
  uint64_t vram_budget = 0;
  bool budget_keeps_chunks = false;  ///< as dsv4_gpu_options::budget_keeps_chunks
  uint32_t copy_threads = 8;  ///< host threads copying streamed experts (expert cache only; and computing them)
  cold_experts cold = cold_experts::copy;  ///< as dsv4_gpu_options::cold
  double cold_margin = 1.0;                ///< as dsv4_gpu_options::cold_margin
  bool cache_spin_waits = true;            ///< as dsv4_gpu_options::cache_spin_waits
  uint64_t cache_cpu_chunk = 64;           ///< as dsv4_gpu_options::cache_cpu_chunk
  bool cache_pass_overlap = false;         ///< as dsv4_gpu_options::cache_pass_overlap
  bool cache_transfer_copies = false;      ///< as dsv4_gpu_options::cache_transfer_copies
  uint64_t cache_pass_group_bytes = uint64_t(32) << 20;  ///< as dsv4_gpu_options::cache_pass_group_bytes
  uint64_t cache_prefetch_bytes = 0;                     ///< as dsv4_gpu_options::cache_prefetch_bytes
  double cache_prefetch_min_uses = 4.0;                  ///< as dsv4_gpu_options::cache_prefetch_min_uses
  bool cache_prefetch_d2d_compute = true;                ///< as dsv4_gpu_options::cache_prefetch_d2d_compute
  bool cache_cached_staging = false;                     ///< as dsv4_gpu_options::cache_cached_staging
  bool cache_stream_pack = false;                        ///< as dsv4_gpu_options::cache_stream_pack
  /// The official shared-runtime quirk (dsv41_options::stale_index_k): on = official (default).
  bool stale_index_k = true;
  /// The quantisations that are the V4.1 cache format (dsv41_options::qat_kv): on = official (default); off is a
  /// test option (unquantised f32 rows, compared with the CPU graph's qat_kv = false without FP4 rounding flips).
  bool qat_kv = true;
  /// Record ahead: the next position's command buffer while the device runs this one; a prompt's next prefill
  /// chunk (its inputs staged, its commands recorded) while the device runs this chunk (chunk_pipeline.hpp).
  bool pipeline = true;
  /// Positions per prefill chunk (forward() of several ids that are a prefill — or anywhere without stale_index_k):
  /// each chunk is one recording with every op batched over its rows (dsv41_gpu_chunk.cpp). 0 or 1: token by token.
  /// The chunk's scratch is allocated by the first chunk (under a vram_budget at construction, as V4's); with the
  /// expert cache the chunks run each layer's experts in passes where they can (dsv4_gpu_options::prefill_chunk).
  uint32_t prefill_chunk = 512;
  /// The prefill chunks' tiled GEMMs, as dsv4_gpu_options::gemm (f16 on the tensor cores where the device has them;
  /// f32: the parity reference). Decode steps are not affected.
  gpu::gemm_precision gemm = gpu::gemm_precision::f16;
  /// The prefill chunks' experts' activation precision, as dsv4_gpu_options::prefill_experts.
  prefill_expert_mode prefill_experts = prefill_expert_mode::fastest;
  /// Prefill chunks: a shared expert stacked with the routed ones (the CMF layout, `--shared-expert routed`) runs
  /// apart as three tiled GEMMs on copies of its matrices, as dsv4_gpu_options::prefill_shared_apart (not under a
  /// vram_budget). Decode steps keep it stacked.
  bool prefill_shared_apart = true;
  /// Greedy decode chained on the device (decode_greedy_each): the embedding on the device, each step gathering its
  /// token's row from the previous step's argmax, submitted in two parts — layer 0 while the previous step still
  /// runs, the rest once the host has staged the token's Engram rows (the tables stay on the host). Not with the
  /// expert cache, nor past vram_budget; where the device memory runs out, steps run one at a time.
  bool device_embedding = true;
  bool profile = false;  ///< timestamps between the phases of every layer
  std::vector<uint32_t> profile_layers;
};

class dsv41_gpu_model final : public gpu_graph {
 public:
  /// Uploads every weight of `w` (kept alive by the model: the embedding and the Engram tables stay on the host).
  dsv41_gpu_model(const dsv41_weights& w, gpu::device& dev, gpu::kernels& k, const dsv41_gpu_options& o = {});
  ~dsv41_gpu_model() override;
  dsv41_gpu_model(const dsv41_gpu_model&) = delete;
  dsv41_gpu_model& operator=(const dsv41_gpu_model&) = delete;

  const dsv41_config& config() const noexcept;
  uint32_t vocab() const noexcept override { return config().vocab; }
  uint32_t experts() const noexcept override { return config().experts; }
  uint32_t layer_count() const noexcept override { return config().layers; }
  uint64_t pos() const noexcept override;
  void reset() noexcept override;
  void save_snapshot() override;
  void restore_snapshot() override;
  void bench_seek(uint64_t pos) override;
  void set_profile(bool on, std::vector<uint32_t> layers = {}) override;
  std::vector<uint32_t> kind_layers() const override;

  /// ids at positions pos()…: positions below prefill_end() (a chunk at position 0 marks its own) are prefill
  /// positions (as dsv41_model::forward), later tokens decode steps. The last token's logits when `last`. trace: per
  /// token, as dsv41_model::forward's.
  std::vector<float> forward(std::span<const uint32_t> ids, bool last) override { return run(ids, last, nullptr); }
  /// As forward (a chunk at position 0 is a prefill), with every token's logits [n, vocab].
  std::vector<float> forward_all(std::span<const uint32_t> ids) override;
  /// As forward, with a trace (per token, as dsv41_model::forward's). Where the ids may run in prefill chunks
  /// (chunks_ids), they do.
  std::vector<float> run(std::span<const uint32_t> ids, bool last, dsv41_trace* trace);
  bool prefill_chunked() const override;
  /// dsv41_state::mark_prefill on the device's sequence: positions [0, end) one official prefill, if the sequence
  /// holds only prefill positions so far (false, and no change, after a decode step).
  bool mark_prefill(uint64_t end) noexcept override;
  uint64_t prefill_end() const noexcept;
  uint64_t reuse_limit(bool snapshot) const noexcept override;
  gpu_prefill_stats last_prefill() const override;
  std::string prefill_profile() const override;
  /// Tests: ids (≤ prefill_chunk of them, a prefill or stale_index_k off) as one prefill chunk, with every row's
  /// logits [n, vocab]; trace (optional): appends every row's selections, as run() does.
  std::vector<float> forward_chunk_rows(std::span<const uint32_t> ids, dsv41_trace* trace = nullptr);
  uint32_t step_greedy(uint32_t token) override;
  /// Greedy decode chained on the device where it can (chains_decode: device_embedding, no expert cache, no
  /// profile, a decode position), else step by step.
  uint64_t decode_greedy_each(uint32_t first, uint64_t max, const std::function<bool(uint32_t)>& on_token) override;
  bool chains_decode() const noexcept override;
  /// Tokens chosen on the device step by step (gpu_graph::decode_sampled_each; V4.1 chains its greedy steps only).
  bool samples_on_device() const noexcept override;
  uint64_t decode_sampled_each(uint32_t first, uint64_t max, const device_sampling& ds,
                               const std::function<bool(uint32_t)>& on_token) override;

  /// Tests: rows [first, first + count) of layer l's device state — what 0: window ring (by slot), 1: compressed
  /// entries, 2: index keys (KV sources) — as f32.
  std::vector<float> state_rows(uint32_t l, int what, uint64_t first, uint64_t count) const;
  /// Tests: steps that ran the recording made ahead while the previous step ran (pipeline).
  uint64_t pipelined_steps() const noexcept;

  uint64_t weight_bytes() const noexcept override;
  uint64_t state_bytes() const noexcept override;
  uint64_t bytes_per_token() const noexcept override;
  uint32_t last_dispatches() const noexcept override;
  double last_record_seconds() const noexcept override;
  double last_device_seconds() const noexcept override;
  step_host_seconds last_step_host() const noexcept override;
  uint64_t max_ctx() const noexcept override;
  const gpu_graph_profile& profile() const noexcept override;
  const gpu_expert_cache_stats& cache_stats() const noexcept override;

  struct impl;

 private:
  static void run_steps(impl& m, std::span<const uint32_t> ids, bool last, dsv41_trace* trace);
  std::unique_ptr<impl> p_;
};

}  // namespace cmfx::driver
