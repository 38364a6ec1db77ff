#pragma once
// Shared pieces of the forward pass (not a public interface): the execution context and the sublayers.
#include <vector>

#include "cmfx/core/thread_pool.hpp"
#include "cmfx/kernels/cpu_kernels.hpp"
#include "cmfx/kernels/moe.hpp"
#include "act_gemm.hpp"
#include "cmfx/ops/rope.hpp"
#include "cmfx/ops/topk.hpp"
#include "cpu_profile.hpp"
#include "dsv4_forward.hpp"

namespace cmfx::driver {

/// Where each token of a chunk belongs: its sequence state, its position, and the chunk row where its sequence's
/// part of the chunk starts (tokens of one sequence are contiguous and in position order).
struct dsv4_token_ctx {
  std::vector<dsv4_state*> st;    // [n]
  std::vector<uint64_t> pos;      // [n] absolute position
  std::vector<uint64_t> first;    // [n] chunk row of the segment's first token
  std::vector<uint64_t> p0;       // [n] position of the segment's first token
};

/// One pool worker's buffers in the attention (worker w of a pool.run touches only its own). Aligned to a cache line
/// so that two workers' vector headers (keys.push_back writes one per key) never share a line.
struct alignas(64) dsv4_attn_worker {
  std::vector<const float*> keys;  // the rows one (token, head) attends to: window, then picked entries
  std::vector<float> logit;        // [keys]
  std::vector<double> acc;         // [head_dim]
  std::vector<float> score;        // [entries] one token's indexer scores
  std::vector<topk_entry> topk;    // [entries]
  std::vector<float> head_pre;     // [hc] hc_head's pre-weights (forward_batch's head)
};

/// The forward pass's buffers, kept by the model between calls so that a decode step allocates none of them: each
/// only grows (model_common.hpp's grown), so a decode reuses what a prefill or the first decode step grew.
struct dsv4_scratch {
  // forward_batch: the token context, the hc stream (x, xn swap per sublayer), the sublayer input / output, the
  // mHC coefficients, hc_pre_pool's scratch, the head rows
  dsv4_token_ctx tc;
  std::vector<float> x, xn, u, o, prew, post, C, h;
  std::vector<double> mix;
  std::vector<uint64_t> rows_at;
  // moe_ffn: router logits, routing, per-token scores and top-k entries, the QAT copy of the input
  std::vector<float> logits, wts, s, xq;
  std::vector<uint32_t> idx;
  std::vector<topk_entry> route;
  // attention: cos/sin [token][rope_dim], the projections, compressor inputs, indexer query and weights, the heads'
  // output, the grouped wo_a output, entries per token, picks per token (inner vectors reused)
  std::vector<double> cs;
  std::vector<float> qr, q, kv, ca, csc, ica, ics, iq, iw, heads, z;
  std::vector<uint64_t> n_entries;
  std::vector<std::vector<uint32_t>> picks;
  std::vector<dsv4_attn_worker> wk;  // [pool.size()]
  explicit dsv4_scratch(unsigned workers) : wk(workers) {}
};

struct dsv4_model::impl {
  dsv4_weights w;
  dsv4_options opt;
  thread_pool pool;
  const cpu_kernel_table& kern;
  rope_table rope_swa, rope_comp;  // ratio-0 layers; ratio > 0 layers (theta 160000 + YaRN)
  moe_scratch moe;
  act_scratch act;  // int8 activations (opt.matmul_act == i8)
  std::vector<float> qat_buf;
  cpu_profile* prof = nullptr;  // set_profile: phases timed while attached
  // Per-call buffers; one forward at a time per model (the pool runs one job at a time, like moe and act above).
  dsv4_scratch scr;

  impl(dsv4_weights weights, const dsv4_options& o);
  const dsv4_config& c() const noexcept { return w.cfg; }
  const rope_table& rope_for(uint32_t layer) const noexcept { return w.cfg.kinds[layer].ratio ? rope_comp : rope_swa; }

  /// Y[n, rows] = X[n, cols] · Wᵀ (with the QAT act-quant of the input when enabled and the matrix is FP8/FP4).
  void linear(const dsv4_matrix& m, const float* X, uint64_t n, float* Y);

  /// Attention sublayer: u [n, dim] (normed), token i of sequence tc.st[i] at position tc.pos[i]; out [n, dim].
  /// Writes the window rings and the compressor states of `layer` of every sequence in the chunk.
  void attention(uint32_t layer, const float* u, uint64_t n, const dsv4_token_ctx& tc, float* out, dsv4_trace* trace);
  /// MoE sublayer: u [n, dim]; ids are the chunk's token ids (hash routing); out [n, dim].
  void moe_ffn(uint32_t layer, const float* u, const uint32_t* ids, uint64_t n, float* out, dsv4_trace* trace);
};

/// One token into a compressor (dsv4-architecture.md §3.3 "Compressor"): stores (a, s + ape) for position t; when
/// the window closes ((t+1) mod r == 0), pools it (overlap: previous window's first half ++ this window's second
/// half), RMS-normalises, rotates the rope tail at the window's first position and appends the entry. `post`
/// selects the QAT step after the rotation (0 none, 1 FP8 nope dims, 2 Hadamard + FP4). Returns true on a new entry.
bool dsv4_compressor_step(const dsv4_compressor_w& w, dsv4_comp_state& s, uint64_t t, const float* a, const float* sc,
                          const rope_table& rope, float eps, int post);

}  // namespace cmfx::driver
