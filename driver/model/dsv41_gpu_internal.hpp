#pragma once
// Device-side pieces of the V4.1 GPU graph (not a public interface): the uploaded weights of every layer, the
// per-sequence device state and the scratch one token needs. dsv41_gpu_weights.cpp uploads, dsv41_gpu.cpp records.
#include <memory>
#include <span>
#include <vector>

#include "cmfx/core/thread_pool.hpp"
#include "cmfx/vk/kernels.hpp"
#include "dsv41_gpu.hpp"
#include "dsv41_internal.hpp"
#include "chunk_pipeline.hpp"
#include "gpu_chooser.hpp"
#include "gpu_dense_i8.hpp"
#include "gpu_expert_cache.hpp"
#include "gpu_recording.hpp"
#include "prefill_mark.hpp"

namespace cmfx::driver {

struct dsv41_gpu_layer {
  gpu::buffer attn_norm, ffn_norm, q_norm, kv_norm, sink;
  gpu::buffer hc_attn_fn, hc_attn_base, hc_attn_scale, hc_ffn_fn, hc_ffn_base, hc_ffn_scale;
  gpu::gpu_matrix wq_a, wq_b, wkv, wo_a, wo_b;
  // KV sources: compressor (ratio 2: wkv + wgate; ratio 1: wkv), its norm, the index-key projection and norm.
  gpu::gpu_matrix comp_wkv, comp_wgate, ix_wk;
  gpu::buffer comp_norm, ix_k_norm;
  // Index sources.
  gpu::gpu_matrix ix_wq_b, ix_wp;
  // Engram layers.
  gpu::gpu_matrix eg_wkv;
  gpu::buffer eg_qk;  // q_weight ⊙ k_weight [hc·dim]
  gpu::gpu_matrix gate;
  gpu::buffer gate_bias;
  gpu::gpu_moe moe;
  bool shared_apart = false;  // the shared expert's formats differ from the routed experts': matmul path
  bool shared_apart_chunks = false;  // stacked, but apart in prefill chunks (dsv41_gpu_options::prefill_shared_apart)
  gpu::gpu_matrix sh_gate, sh_up, sh_down;  // with shared_apart or shared_apart_chunks
  // state
  gpu::buffer ring;             // [window, head_dim] window KV (FP8-quantised) by position mod window
  gpu::buffer pend_kv, pend_sc; // KV sources with ratio 2: [ratio, head_dim] rows of the open group
  gpu::buffer entries, keys;    // KV sources: [ent_cap, head_dim] compressed KV, [ent_cap, index_head_dim] keys
  gpu::buffer idx;              // index sources: int32 [window | index_topk] attention slots
  gpu::buffer route_idx, route_w;
};

/// The scratch of one prefill chunk of up to C positions (dsv41_gpu_chunk.cpp; allocated by the first chunk). The
/// chunk's window KV and ratio-2 pending rows are staged linearly (kvs: the W positions before the chunk, then its
/// own; cps / css: the open group's rows before the chunk, then its own), so the decode's rings keep their layout.
struct dsv41_gpu_chunk_bufs {
  uint32_t C = 0;
  gpu::buffer X, Xn, partials, coeff_a, coeff_f, fold0, u, qr, q, o, z, attn_out, kvs, cps, css, iq, iw, score,
      picks, cand_blk, cand_idx, rlogits, ridx, rw, moe_h, moe_out, sh_g, sh_u, sh_out, eg_kv, attn_x;
  gpu::buffer tokens, idx_swa, idx_win;
  std::vector<gpu::buffer> counts;  // per ratio r (index r): uint32 [C] entries finished at each row, (p + 1) / r
  std::vector<gpu::buffer> win;     // per ratio r > 1: uint32 [groups, 2] each closing group's first staged row
  std::vector<gpu::buffer> idx;     // per index source layer: int32 [C, W + index_topk] each row's attention slots
  std::vector<gpu::buffer> eg_E;    // per Engram layer: the rows' decoded table rows [C, embed_dim]
  uint64_t bytes = 0;               // device bytes of these buffers
};


struct dsv41_gpu_model::impl {
  dsv41_config cfg;
  dsv4_matrix embed;  // host view (decoded per token)
  std::vector<const dsv41_layer_w*> host_layers;  // Engram tables (host gathers) — into the kept-alive weights
  std::shared_ptr<const void> keep_alive;
  dsv41_engram engram;
  gpu::device& dev;
  gpu::kernels& k;
  dsv41_gpu_options opt;
  uint64_t pos = 0;
  // Shared runtime / Engram history (dsv41_state's host part): the compressed ids so far, the end of the official
  // prefill (prefill_mark: positions below its end are prefill positions) and the last index-key publisher.
  std::vector<uint32_t> cids;
  prefill_mark official_prefill;
  int last_owner = -1;

  std::vector<dsv41_gpu_layer> layers;
  gpu::gpu_matrix head;
  gpu::buffer norm;
  uint64_t weight_bytes = 0, token_bytes = 0, state_bytes = 0;
  uint64_t ent_cap = 0;  // compressed rows every KV source can hold (= max_ctx: ratio 1 writes one per position)

  gpu::buffer cs_swa, cs_comp;  // cos/sin [max_ctx, rope_dim] of the two rope tables (f32)
  // Prefill chunks (dsv41_gpu_chunk.cpp): the compressed rope table at the groups' positions j·r per ratio r > 1 of
  // a KV source (cs_ent[r]: [max_ctx / r, rope_dim]; ratio 1 reads cs_comp), the chunk scratch, the last prompt's
  // chunk statistics.
  std::vector<gpu::buffer> cs_ent;
  std::unique_ptr<dsv41_gpu_chunk_bufs> ch;
  gpu_prefill_stats chunk_stats;
  gpu_chunk_profile chunk_prof;  // profiling: device seconds per chunk op
  std::unique_ptr<chunk_inputs> chunk_in;  // the chunks' host-made inputs (allocated with ch)
  chunk_in_flight chunk_flight;  // a pipelined chunk the device may still run (after ch: destroyed first)
  /// Whether n ids at the current position may run in prefill chunks: prefill_chunk > 1 (≥ 3 under the expert
  /// cache, whose experts then run in passes), n > 1, the scratch not dropped (chunks_off), and the ids a prefill (or
  /// no stale_index_k: then every row scores its layer's static key source).
  bool chunks_ids(uint64_t n) const;
  /// How many of n ids at the current position may run as prefill rows: all of them without stale_index_k, else
  /// those below official_prefill.end (a call at position 0 has marked its own ids first: mark_call).
  uint64_t prefill_rows(uint64_t n) const;
  /// A call of n ids at position 0 is (at least) a prefill.
  void mark_call(uint64_t n) { official_prefill.mark_call(pos, n); }
  void alloc_chunk();
  bool chunks_off = false;  // the chunk scratch dropped under a vram_budget (place_experts): prompts token by token
  /// Positions pos .. pos + n − 1 as one recording (n ≤ prefill_chunk): want_logits the last row's into `logits`,
  /// all_logits every row's [n, vocab]; trace: per row, as run()'s. Without all_logits, trace or profiling the
  /// chunk is left running (chunk_flight: the next chunk is recorded meanwhile); the caller then waits for it
  /// (chunk_flight.finish) before the device is used otherwise — run_chunks does.
  void run_chunk(std::span<const uint32_t> toks, bool want_logits, gpu::buffer* all_logits, dsv41_trace* trace);
  /// ids in chunks of prefill_chunk, the last row's logits into `logits` if want_logits; returns once they ran.
  void run_chunks(std::span<const uint32_t> ids, bool want_logits, dsv41_trace* trace);
  /// run_chunk with every row's logits read back [n, vocab].
  std::vector<float> chunk_rows(std::span<const uint32_t> toks, dsv41_trace* trace);
  // per-token parameters
  gpu::buffer swa_idx, win2, fold0;  // fold0: the one-hot pre-mix before layer 0
  std::vector<gpu::buffer> eg_E;     // per Engram layer: the token's decoded table rows [cols · engram_head_dim]
  // scratch
  gpu::buffer X, Xn, partials, coeff_a, coeff_f, u, qr, q, o, z, attn_out, iq, iw, score, cand_blk, cand_idx,
      rlogits, moe_h, moe_out, sh_g, sh_u, sh_out, eg_kv, logits, best, attn_x;
  // host-visible u32: the step's chosen id (logits_mode ≥ 2), copied there by the step's recording and read after its
  // fence — no download (a second submission and fence wait) per decode step
  gpu::buffer best_host;
  std::unique_ptr<gpu_expert_cache> experts;
  // int8 copies of the dense products' inputs (dense_act = i8): u, qr, o by wo_a group, z, a closing compressed
  // entry (ix_wk), the Engram row (eg_wkv)
  gpu_act_q8_slots q_u, q_qr, q_o, q_z, q_ent, q_eg;

  gpu_graph_profile prof;
  uint32_t dispatches = 0;
  double record_s = 0;
  double device_s = 0;  // the last step's device time (gpu_recording::device_seconds)
  gpu_graph::step_host_seconds host_s;  // the last step run by itself (run())
  std::vector<const gpu::buffer*> state_buffers();
  std::vector<gpu::buffer> snap;
  uint64_t snap_pos = 0;
  prefill_mark snap_prefill;
  std::vector<uint32_t> snap_cids;
  int snap_owner = -1;
  bool has_snap = false;
  std::shared_ptr<gpu_recording> next;
  /// Choosing on the device (decode_sampled_each: logits_mode 3 draws, 2 the argmax; logprobs after either).
  gpu_chooser chooser;
  uint64_t pipelined = 0;  // steps that ran a recording made while the previous step ran
  /// Every id < vocab and the chunk within max_ctx (usage_error otherwise).
  void check_chunk(std::span<const uint32_t> ids) const;

  impl(const dsv41_weights& w, gpu::device& d, gpu::kernels& kk, const dsv41_gpu_options& o);
  void upload_weights(const dsv41_weights& w);  // dsv41_gpu_weights.cpp
  void alloc_state();                           // dsv41_gpu_weights.cpp
  /// Runs one token (prefill: part of the chunk that started at position 0); logits_mode 0 none, 1 logits, 2 argmax,
  /// 3 drawn on the device (chooser);
  /// next_mode: the next step's mode for its recording made ahead (−1: the same).
  void run(uint32_t token, int logits_mode, bool prefill, dsv41_trace* trace, int next_mode = -1);
  /// The token-independent work of position t (keys layers from prefill / prev_owner).
  std::shared_ptr<gpu_recording> record(uint64_t t, int logits_mode, bool prefill, int prev_owner);
  /// The same, a layer per step (record_task): what run() records ahead inside the expert cache's waits.
  record_task record_steps(uint64_t t, int logits_mode, bool prefill, int prev_owner, bool fed = false,
                           int chain_slot = -1);
  /// The id the last step with logits_mode ≥ 2 chose (argmax or draw), from best_host.
  uint32_t chosen_id();
  /// Position t's Engram rows from the history cids (which holds t's own id): one row [cols · head_dim] per Engram
  /// layer, consecutive in out.
  void engram_rows(uint64_t t, float* out) const;

  // Greedy decode chained on the device (dsv41_gpu_options::device_embedding): the embedding, the chosen ids (one
  // ring slot per step in flight) and the Engram rows the host stages per step for its part B.
  gpu::gpu_matrix embed_dev;
  gpu::buffer ids_ring, eg_stage;
  static constexpr uint32_t ring_slots = 4;
  uint64_t eg_floats = 0;  // one step's Engram rows, every Engram layer (engram_rows)
  /// The chained recording of decode position t (record_steps with chain_slot ≥ 0): fed = its token is the previous
  /// step's argmax (the embedding gathered on the device); its Engram rows are copied from eg_stage slot
  /// chain_slot at the start of segs[0] (part B, cut before the first Engram layer), its argmax to ids_ring there.
  /// logits_mode: 2 (greedy: decode_greedy_each) or chooser.mode() (decode_sampled_each: drawn on the device); lp
  /// (with chooser.logprobs()): each step's logprobs, read from the chooser's ring slot of its step before on_token
  /// sees its id.
  uint64_t decode_chained(uint32_t first, uint64_t max, const std::function<bool(uint32_t)>& on_token,
                          int logits_mode = 2, step_logprobs* lp = nullptr);
};

}  // namespace cmfx::driver
