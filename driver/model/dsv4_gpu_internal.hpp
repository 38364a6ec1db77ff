#pragma once
// Device-side pieces of the V4 GPU graph (not a public interface): the uploaded weights of every layer, the
// per-sequence device state and the scratch one token needs. dsv4_gpu_weights.cpp uploads, dsv4_gpu.cpp records.
#include <memory>
#include <vector>

#include "cmfx/core/thread_pool.hpp"
#include "cmfx/vk/kernels.hpp"
#include "cmfx/ops/rope.hpp"
#include "dsv4_gpu.hpp"
#include "chunk_pipeline.hpp"
#include "gpu_chooser.hpp"
#include "gpu_dense_i8.hpp"
#include "gpu_recording.hpp"

namespace cmfx::driver {

/// One compressor on the device: weights and its state (the pending-window rows and the finished entries).
struct dsv4_gpu_comp {
  uint32_t ratio = 0, width = 0, cw = 0;  // cw = coff · width
  uint32_t cap = 0;                       // window ring rows: 2·ratio with overlap, else ratio
  bool overlap = false;
  gpu::gpu_matrix wkv, wgate;             // [cw, dim]
  gpu::buffer ape, norm;                  // [ratio, cw], [width]
  gpu::buffer kv, score;                  // [cap, cw]; score without ape (compress_pool adds it as it reads)
  gpu::buffer entries;                    // [max_entries, width]
  uint64_t max_entries = 0;
};

struct dsv4_gpu_layer {
  dsv4_layer_kind kind;
  gpu::buffer attn_norm, ffn_norm, q_norm, kv_norm, sink;
  gpu::buffer hc_attn_fn, hc_attn_base, hc_attn_scale, hc_ffn_fn, hc_ffn_base, hc_ffn_scale;
  gpu::gpu_matrix wq_a, wq_b, wkv, wo_a, wo_b;
  dsv4_gpu_comp comp, ix;
  gpu::gpu_matrix ix_wq_b, ix_wp;
  gpu::gpu_matrix gate;
  gpu::buffer gate_bias, tid2eid;
  gpu::gpu_moe moe;
  bool shared_apart = false;  // the shared expert's formats differ from the routed experts': matmul path
  bool shared_apart_chunks = false;  // stacked, but apart in prefill chunks (dsv4_gpu_options::prefill_shared_apart)
  gpu::gpu_matrix sh_gate, sh_up, sh_down;  // with shared_apart or shared_apart_chunks
  // state
  gpu::buffer ring;            // [window, head_dim] window KV by position mod window
  gpu::buffer idx;             // int32 [keys_cap]: [window slots | compressed slots] (ratio > 0 layers)
  uint32_t keys_cap = 0;
  gpu::buffer route_idx, route_w;  // [top_k]
};

class record_task;  // gpu_recording.hpp: a recording made a layer at a time
struct gpu_recording;  // gpu_recording.hpp: one token's command buffer, recorded ahead
/// The scratch of one chunk of up to C positions (allocated on the first chunk).
struct dsv4_gpu_chunk_bufs {
  uint32_t C = 0;
  gpu::buffer X, Xn, partials, coeff, u, qr, q, o, z, attn_out, kvc, ckv, csc, ikv, isc, iq, iw, score, picks,
      rlogits, ridx, rw, moe_h, moe_out, sh_g, sh_u, sh_out, attn_x;
  gpu::buffer tokens, counts, idx_swa, idx_csa, idx_hca, win4, win128;
  uint64_t hca_keys_cap = 0;
  uint64_t bytes = 0;  // device bytes of these buffers
};


struct dsv4_gpu_model::impl {
  dsv4_config cfg;
  dsv4_matrix embed;                      // host view (decoded per token)
  /// The embedding on the device (decode_greedy: a step reads its token from the previous step's argmax); empty
  /// with the expert cache or where it does not fit one binding / the budget (then decode_greedy steps one by one).
  gpu::gpu_matrix embed_dev;
  gpu::buffer ids_ring;  // host-visible [ring_slots] u32: the chained steps' argmax (or sampled) ids
  /// Choosing on the device (decode_sampled_each: logits_mode 3 draws, 2 the argmax; logprobs after either): the
  /// setting of the current call, its buffers.
  gpu_chooser chooser;
  static constexpr uint32_t ring_slots = 4;
  std::shared_ptr<const void> keep_alive;
  gpu::device& dev;
  gpu::kernels& k;
  dsv4_gpu_options opt;
  uint64_t pos = 0;

  std::vector<dsv4_gpu_layer> layers;
  gpu::gpu_matrix head;
  gpu::buffer norm, hc_head_fn, hc_head_base;
  float hc_head_scale = 1.0f;
  uint64_t weight_bytes = 0, token_bytes = 0, state_bytes = 0;

  // position tables: cos/sin [max_ctx, rope_dim] of the two rope tables (f32); the compressed entries' (entry j
  // of ratio r at position j·r: [max_ctx / r, rope_dim]) for the prefill chunks
  gpu::buffer cs_swa, cs_comp, cs_ent4, cs_ent128;
  uint64_t ring_rows = 0;  // window ring rows: window + prefill_chunk (positions p at row p % ring_rows)
  // per-token parameters
  gpu::buffer swa_idx, token, win4, win128;
  // scratch
  gpu::buffer X, Xn, partials, coeff, u, qr, q, o, z, attn_out, iq, iw, score, rlogits, moe_h, moe_out, sh_g,
      sh_u, sh_out, logits, best;
  // the FFN sites' coefficients (coeff: the attention sites'): each boundary reads one site's and its finish writes
  // the other's (kernels::hc_finish_args::coeff_out), never the buffer its own workgroups read; with fold_u_q8 (whose
  // int8 copy takes coeff_out's binding) both sites share coeff, rewritten in place as before
  gpu::buffer coeff_f;
  // host-visible u32: a step's chosen id (logits_mode ≥ 2, not chained), copied there by its recording and read after
  // its fence — no download (a second submission and fence wait) per step
  gpu::buffer best_host;
  gpu::buffer attn_x;  // sparse_attention's split scratch (kernels::attn_scratch_floats of one row)
  // int8 copies of the dense products' inputs (dense_act = i8): u, qr, o by wo_a group, z
  gpu_act_q8_slots q_u, q_qr, q_o, q_z;

  /// The routed experts: resident, or the expert cache when they do not fit vram_budget (made by upload_weights,
  /// placed after alloc_state).
  std::unique_ptr<gpu_expert_cache> experts;

  dsv4_gpu_profile prof;
  uint32_t dispatches = 0;
  double record_s = 0;
  double device_s = 0;  // the last step's device time (gpu_recording::device_seconds)
  gpu_graph::step_host_seconds host_s;  // the last step run by itself (run())
  /// The sequence state's buffers (for snapshots and seeks), and the snapshot's copies of them.
  std::vector<const gpu::buffer*> state_buffers();
  std::vector<gpu::buffer> snap;
  uint64_t snap_pos = 0;
  bool has_snap = false;
  /// The next position's recording, made while the device ran the current one (pipelined decode).
  std::shared_ptr<gpu_recording> next;
  uint64_t pipelined = 0;  // steps that ran a recording made while the previous step ran

  std::unique_ptr<dsv4_gpu_chunk_bufs> ch;  // allocated by the first chunk
  bool chunks_off = false;                   // the chunk scratch dropped under a vram_budget (place_experts)
  gpu_chunk_profile chunk_prof;  // profiling: device seconds per chunk op
  gpu_prefill_stats chunk_stats;  // the chunks of the current / last forward (reset by prefill, forward_chunk_rows)
  std::unique_ptr<chunk_inputs> chunk_in;  // the chunks' host-made inputs (allocated with ch)
  chunk_in_flight chunk_flight;  // a pipelined chunk the device may still run (after ch: destroyed first)

  impl(const dsv4_weights& w, gpu::device& d, gpu::kernels& kk, const dsv4_gpu_options& o);
  void upload_weights(const dsv4_weights& w);  // dsv4_gpu_weights.cpp
  void alloc_state();                          // dsv4_gpu_weights.cpp
  /// Runs one token; returns after it ran. logits_mode: 0 none, 1 logits, 2 argmax, 3 sampled on the device.
  void run(uint32_t token, int logits_mode, dsv4_trace* trace);
  /// The token-independent work of position t (everything but the embedding and the token id). fed: the token is
  /// the previous step's argmax (`best`), looked up on the device; ring_slot ≥ 0: the chosen id (logits_mode ≥ 2)
  /// also copied to ids_ring[ring_slot], else to best_host (chosen_id()).
  std::shared_ptr<gpu_recording> record(uint64_t t, int logits_mode, bool fed = false, int ring_slot = -1);
  /// The same, a layer per step (record_task): what run() records ahead inside the expert cache's waits.
  record_task record_steps(uint64_t t, int logits_mode, bool fed = false, int ring_slot = -1);
  /// The id the last step run() ran with logits_mode ≥ 2 chose (argmax or draw), from best_host.
  uint32_t chosen_id();
  /// Decode chained on the device (decode_greedy_each: logits_mode 2; decode_sampled_each: chooser.mode()); lp
  /// (with chooser.logprobs()): each step's logprobs, decoded there before on_token sees its id.
  uint64_t decode_chained(uint32_t first, uint64_t max, const std::function<bool(uint32_t)>& on_token,
                          int logits_mode = 2, step_logprobs* lp = nullptr);
  /// The host's part of a step: the embedding of `tok` in every hc copy of X and its id (recorded into `pre`).
  void record_token(gpu::commands& pre, uint32_t tok);
  // dsv4_gpu_chunk.cpp
  void alloc_chunk();
  /// Positions pos .. pos + n − 1 as one recording (n ≤ prefill_chunk); want_logits: the last row's into
  /// `logits`; all_logits (optional): every row's [n, vocab].
  /// trace (optional): every row's routed experts and indexer picks appended (copied per layer, read after).
  /// Without all_logits, trace or profiling the chunk is left running (chunk_flight: the next chunk is recorded
  /// meanwhile); the caller then waits for it (chunk_flight.finish) before the device is used otherwise — prefill
  /// does; else it returns after the chunk ran.
  void run_chunk(std::span<const uint32_t> toks, bool want_logits, gpu::buffer* all_logits,
                 dsv4_trace* trace = nullptr);
  /// ids in chunks of prefill_chunk (want_logits: the last row's into `logits`); returns once they ran.
  void prefill(std::span<const uint32_t> ids, bool want_logits);
  /// Whether prompts can run in chunks: prefill_chunk > 1 (≥ 3 under the expert cache, whose experts then run in
  /// passes), the scratch not dropped (chunks_off), and every layer one of V4's kinds (window only, ratio 4 with the
  /// indexer, ratio 128 without) — the shapes the chunk recording handles.
  bool chunkable() const;
  /// Every id < vocab and pos + n within max_ctx, checked before any position of a multi-position call runs.
  void check_ids(std::span<const uint32_t> ids) const;
};

}  // namespace cmfx::driver
