#pragma once
// Shared pieces of the V4.1 forward pass (not a public interface).
#include <span>
#include <vector>

#include "cmfx/core/thread_pool.hpp"
#include "cmfx/kv/packed_kv.hpp"
#include "cmfx/kernels/cpu_kernels.hpp"
#include "cmfx/kernels/moe.hpp"
#include "act_gemm.hpp"
#include "cmfx/ops/rope.hpp"
#include "cmfx/ops/topk.hpp"
#include "dsv41_engram.hpp"
#include "cpu_profile.hpp"
#include "dsv41_forward.hpp"

namespace cmfx::driver {

/// Index keys per decoded tile (the indexer streams the packed keys through it).
inline constexpr uint32_t dsv41_key_tile = 64;
/// Tokens that share each decoded key tile (their score rows are held together: group × entries floats).
inline constexpr uint32_t dsv41_index_token_group = 8;
/// Tokens whose picked compressed rows are decoded at a time (each into its own index_topk-row scratch).
inline constexpr uint32_t dsv41_attn_token_tile = 16;

/// Per token of a chunk: state, position, chunk row and position of its segment's first token, and which layer last
/// published index keys before this token's step (the official shared runtime, for stale_index_k).
struct dsv41_token_ctx {
  std::vector<dsv41_state*> st;
  std::vector<uint64_t> pos, first, p0;
  std::vector<uint8_t> prefill;  // the position lies below its state's prefill_end (the official prefill)
  std::vector<int> prev_owner;
};

/// Per-chunk shared runtime: the top-k of each index source and the candidate pool of the candidate source. The
/// model keeps one between calls (impl::shared_rt): the rows only grow and keep their capacity, and a call rewrites
/// every row of its tokens before reading it (an index source runs before the layers that read its picks, the
/// candidate source before the layers that read its pool).
struct dsv41_shared {
  std::vector<std::vector<std::vector<uint32_t>>> picks;  // [layer][token]
  std::vector<std::vector<uint8_t>> candidates;           // [token] mask over the candidate source's entries
  std::vector<float> candidate_margin;  // [token] (traced) selection_margin of the candidate block pick
};

/// The indexer's buffers of the CPU attention, kept by the model between calls so that a decode step allocates none
/// of them: the queries, head weights and key layers of a chunk's tokens (they only grow: a decode reuses what a
/// prefill grew), and per pool worker one decoded key tile (sized with the model; worker w only touches its own).
struct dsv41_index_scratch {
  std::vector<float> iq, iw;              // [token][index head][index_head_dim], [token][index head]
  std::vector<int> kfrom;                 // [token] the layer whose index keys the token scores
  std::vector<std::vector<float>> ktile;  // [pool.size()] dsv41_key_tile × index_head_dim floats
  dsv41_index_scratch(unsigned workers, size_t ihd)
      : ktile(workers, std::vector<float>(size_t(dsv41_key_tile) * ihd)) {}
};

/// dsv41_candidate_blocks's buffers, for a caller that keeps them between calls.
struct dsv41_block_scratch {
  std::vector<float> blk;         // [blocks] block maxima
  std::vector<topk_entry> topk;   // [blocks]
  std::vector<uint32_t> pick;     // [min(topk_blocks, blocks)]
};

/// One pool worker's buffers in the attention and Engram (worker w of a pool.run touches only its own). Aligned to a
/// cache line so that two workers' vector headers (keys.push_back writes one per key) never share a line.
struct alignas(64) dsv41_attn_worker {
  std::vector<const float*> keys;  // the rows one (token, head) attends to: window, then picked entries
  std::vector<float> logit;        // [keys]
  std::vector<double> acc;         // [head_dim]
  std::vector<float> scores;       // [group tokens][entries] the indexer's scores of a token group
  std::vector<topk_entry> topk;    // [entries]
  dsv41_block_scratch blocks;      // the candidate pool's block pick
  std::vector<int64_t> rows;       // [Engram cols] one token's table rows
};

/// The forward pass's other buffers, kept by the model between calls so that a decode step allocates none of them:
/// each only grows (model_common.hpp's grown), so a decode reuses what a prefill or the first decode step grew.
struct dsv41_scratch {
  // run: the token context, the hc stream (x, xn swap per sublayer), the pre-mixes (pre, next_pre and the
  // attention's copy), the sublayer input / output, the mHC coefficients, hc_pre_pool's scratch, the head rows
  dsv41_token_ctx tc;
  std::vector<float> x, xn, pre, next_pre, attn_pre, u, o, post, C, h;
  std::vector<double> mix;
  std::vector<uint64_t> rows_at;
  // moe_ffn: router logits, routing, per-token scores and top-k entries, the QAT copy of the input
  std::vector<float> logits, wts, s, xq;
  std::vector<uint32_t> idx;
  std::vector<topk_entry> route;
  // engram_add: the table rows and their kv projection
  std::vector<float> eg_e, eg_kv;
  // attention: cos/sin [token][rope_dim], the projections, the heads' output, the grouped wo_a output, the decoded
  // picks of a token tile; full mode's compressor: inputs, latents, the tokens closing groups, a pooled group, the
  // index keys and a group's cos/sin
  std::vector<double> cs, gcs;
  std::vector<float> qr, q, kv, heads, z;
  std::vector<std::span<const float>> sel;
  std::vector<float> ca, csc, lat, pooled, keys;
  std::vector<uint64_t> owner_token;
  std::vector<dsv41_attn_worker> wk;  // [pool.size()]
  explicit dsv41_scratch(unsigned workers) : wk(workers) {}
};

struct dsv41_model::impl {
  dsv41_weights w;
  dsv41_options opt;
  thread_pool pool;
  const cpu_kernel_table& kern;
  rope_table rope_swa, rope_comp;
  dsv41_engram engram;
  moe_scratch moe;
  act_scratch act;  // int8 activations (opt.matmul_act == i8)
  std::vector<float> qat_buf;
  cpu_profile* prof = nullptr;  // set_profile: phases timed while attached
  std::vector<packed_fp4_scratch<kv_main_codec>> kv_scratch;  // dsv41_attn_token_tile × index_topk decoded rows
  dsv41_index_scratch ix_scratch;  // the indexer's queries, weights, key layers and per-worker key tiles
  // Per-call buffers; one forward at a time per model (the pool runs one job at a time, like moe and act above).
  dsv41_scratch scr;
  dsv41_shared shared_rt;  // run's shared runtime (attention's `sh`)

  impl(dsv41_weights weights, const dsv41_options& o);
  const dsv41_config& c() const noexcept { return w.cfg; }
  const rope_table& rope_for(uint32_t l) const noexcept { return w.cfg.plan[l].ratio ? rope_comp : rope_swa; }
  void linear(const dsv4_matrix& m, const float* X, uint64_t n, float* Y);
  std::vector<float> run(std::span<const uint32_t> ids, std::span<const dsv41_segment> segs, dsv41_logits want,
                         dsv41_trace* trace);
  void attention(uint32_t l, const float* u, uint64_t n, const dsv41_token_ctx& tc, dsv41_shared& sh, float* out,
                 dsv41_trace* trace);
  void moe_ffn(uint32_t l, const float* u, uint64_t n, float* out, dsv41_trace* trace);
  void engram_add(uint32_t l, float* X, uint64_t n, const dsv41_token_ctx& tc);
  /// The layer whose index keys token i scores at index-source layer l.
  int keys_layer(uint32_t l, uint64_t i, const dsv41_token_ctx& tc) const;
};

/// The rope table of ratio-0 layers (compressed = false: 10000, no YaRN) or of ratio > 0 layers (160000 + YaRN).
rope_config dsv41_rope_config(const dsv41_config& c, bool compressed);
/// Largest KV-source layer that publishes index keys on a decode step at position t (a group closes), or −1.
int dsv41_decode_publisher(const dsv41_config& c, uint64_t t);
/// Largest KV-source layer that publishes on a prefill of `len` tokens (it compresses at least one group), or −1.
int dsv41_prefill_publisher(const dsv41_config& c, uint64_t len);
/// The layer whose index keys index-source layer l scores for the token at position t (stale: the official
/// shared-runtime quirk; prefill: the token belongs to a chunk that started at position 0; prev_owner: the last
/// publisher of the previous call, −1 none).
int dsv41_keys_layer(const dsv41_config& c, bool stale, uint32_t l, uint64_t t, bool prefill, int prev_owner);
/// Engram's config, layout, token map and q ⊙ k of every Engram layer; checks each table against the layout.
dsv41_engram dsv41_make_engram(const dsv41_weights& w);

/// FP4 E2M1 fake-quant with an E4M3 scale per block (V4.1 compressed KV, §8): s = e4m3(max(amax, 6·2^−9)/6),
/// x ← e2m1(clamp(x/s, ±6))·s. The division is in f32 as in the official kernel.
void dsv41_fp4_e4m3_quant(std::span<float> x, uint32_t block);
/// Two-level top-k, level one (official select_candidate_blocks): blocks of `bs` scores (ne entries), block score =
/// max, the block of the newest entry pinned, the best `topk_blocks` kept (−inf blocks dropped) → mask[ne].
/// The candidate pool's block pick; `margin` (optional) gets the selection_margin (ops/topk.hpp) of the blocks
/// competing beside the pinned newest one.
/// `scratch` (optional): the caller's buffers, reused (else local ones).
void dsv41_candidate_blocks(std::span<const float> score, uint32_t topk_blocks, uint32_t bs, std::vector<uint8_t>& mask,
                            float* margin = nullptr, dsv41_block_scratch* scratch = nullptr);

}  // namespace cmfx::driver
