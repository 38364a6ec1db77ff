// Host side of the attention kernels: sparse attention with sink over gathered KV rows (shaders/attn_sparse.comp,
// split over keys at decode and combined by shaders/attn_combine.comp), the compressor's pooling + RMSNorm
// (shaders/attn_pool.comp) and the lightning indexer's scores (shaders/attn_index.comp). docs/VULKAN.md
// "Attention kernels" gives contracts and tolerances.
#include "kernels_ops.hpp"

namespace cmfx::gpu {

namespace {

// Work split of attn_sparse.comp: ATT_HB heads share one workgroup (each key row read once for all of them);
// ATT_KT keys per tile. q of the block (ATT_HB · head_dim floats), the tile's partial dots (ATT_HB · 256) and
// logits stay within the 16 KiB of shared memory every accepted device has for head_dim ≤ attn_max_head_dim.
constexpr uint32_t attn_heads_per_wg = 4;
constexpr uint32_t attn_keys_per_tile = 16;
// Split over keys (flash decoding): when rows × head blocks is below attn_split_target_wgs, each row's key slots
// are cut into up to ceil(target / (rows × head blocks)) splits of whole tiles (at least attn_min_split_tiles
// each), so that a decode step (1 row × 16 head blocks) still fills a large GPU (132 SMs × a few resident
// workgroups) and no workgroup streams hundreds of keys serially. One tile is the floor: a split's fixed cost
// (q of its heads, its partial o written and read back) is about one tile's key reads; the target bounds the
// scratch and the combine's reads (≤ 32 splits of 64 heads × 512 at decode: 4.2 MB).
constexpr uint64_t attn_split_target_wgs = 512;
constexpr uint32_t attn_min_split_tiles = 1;
// attn_index.comp: index heads whose q rows are staged in shared memory at a time (8 KiB).
constexpr uint32_t index_q_floats = 2048;

// How one sparse_attention dispatch is cut: nhb head blocks; per row `splits` splits of `split_tiles` tiles
// (the last may be shorter); max_splits bounds splits for every key count of the shape (the scratch size).
struct attn_plan {
  uint32_t nhb = 1, max_splits = 1, splits = 1, split_tiles = 1;
};

/// attn_index.comp's variant for `rows` query rows and n keys of `heads` × head_dim: invocations per key (IX_HS)
/// and heads of q staged at once (IX_QB). 16 invocations per key, the q rows staged index_q_floats at a time; for one
/// row and up to 2048 keys (a decode step at short and middle context) up to 64 invocations per key with every
/// head's q staged at once where the shared memory holds it: 4x the workgroups and a quarter of each invocation's
/// chain of dependent FMAs. Many rows (a prefill chunk) keep 16 keys per workgroup: each workgroup stages its row's
/// whole q, so 4 keys per workgroup would read q 4x as often (H200 prefill, 512 rows × 128 entries: 11.6 ms
/// over the 43 layers with 4).
constexpr uint32_t index_small_n = 2048;
constexpr uint32_t index_pc_words = 12;  // attn_index.comp's ix_pc
std::string index_defines(const detail::op_env& e, uint32_t rows, uint32_t heads, uint32_t head_dim, uint32_t n,
                          uint32_t& hsplit) {
  const uint32_t wg = detail::op_env::wg;
  hsplit = 16;
  uint32_t qheads = std::max<uint32_t>(1, index_q_floats / head_dim);
  if (n <= index_small_n && rows == 1) {
    // attn_index.comp's shared memory: q_s [IX_QB · (head_dim + 1)] and w_s [IX_QB] floats, part_s [WG] ACC
    const uint64_t fixed = uint64_t(wg) * (e.info.float64 ? 8 : 4) + 1024;
    const uint64_t room = e.info.max_shared_memory > fixed ? e.info.max_shared_memory - fixed : 0;
    qheads = std::max<uint32_t>(qheads, uint32_t(std::min<uint64_t>(heads, room / ((uint64_t(head_dim) + 2) * 4))));
    while (hsplit * 2 <= 64 && hsplit * 2 <= qheads && hsplit < heads) hsplit *= 2;
  }
  return detail::def_u("IX_HD", head_dim) + detail::def_u("IX_QB", qheads) + detail::def_u("IX_HS", hsplit);
}

attn_plan plan_of(const kernels::attn_shape& sh) {
  attn_plan p;
  p.nhb = (sh.heads + attn_heads_per_wg - 1) / attn_heads_per_wg;
  const uint64_t base = std::max<uint64_t>(uint64_t(sh.rows) * p.nhb, 1);
  p.max_splits = base >= attn_split_target_wgs ? 1 : uint32_t((attn_split_target_wgs + base - 1) / base);
  const uint32_t tiles = (sh.keys + attn_keys_per_tile - 1) / attn_keys_per_tile;
  p.splits = std::clamp<uint32_t>(tiles / attn_min_split_tiles, 1, p.max_splits);
  p.split_tiles = std::max<uint32_t>((tiles + p.splits - 1) / p.splits, 1);
  p.splits = std::max<uint32_t>((tiles + p.split_tiles - 1) / p.split_tiles, 1);  // no empty split
  return p;
}

// attn_tc.comp (f16 tiles, two passes over the keys; the f16 modes of kernels::set_gemm_precision): shapes of more
// than one row (prefill chunks; never split over keys), head_dim a multiple of 64 up to 512; on the tensor cores
// (mode 1) with subgroups of 32 (8 per workgroup). Its shared memory (the shader's HB, KT, HDP, PP): a key tile of
// 16 rows × (head_dim + 8) halves (mode 2: and q of the 32 heads), p of 32 × 24 halves, 32 × 16 logits, the 4 × 2
// 16 × 16 logit partials (mode 1), key ids and the per-head max and denominator.
constexpr uint32_t attn_tc_heads = 32;
uint64_t attn_tc_shared_bytes(uint32_t head_dim, uint32_t mode) {
  const uint64_t row = (uint64_t(head_dim) + 8) * 2, keys = 16 * row, q = mode == 2 ? attn_tc_heads * row : 0;
  const uint64_t p = attn_tc_heads * 24 * 2, lg = attn_tc_heads * 16 * 4,
                 partials = mode == 1 ? 4 * attn_tc_heads * 16 * 4 : 0;
  return keys + q + p + lg + partials + 16 * 4 + 2 * attn_tc_heads * 4;
}
uint32_t attn_tc_mode(const detail::op_env& e, const kernels::attn_shape& sh) {
  if (!e.gemm_coop || sh.rows < 2 || sh.head_dim % 64 || sh.head_dim > 512) return 0;
  if (e.gemm_coop == 1 && e.info.subgroup_size != 32) return 0;
  return attn_tc_shared_bytes(sh.head_dim, e.gemm_coop) <= e.info.max_shared_memory ? e.gemm_coop : 0;
}

}  // namespace

uint64_t kernels::attn_scratch_floats(const attn_shape& sh) {
  const attn_plan p = plan_of(sh);
  // per (row, head, split): head_dim accumulator floats, then (max, denominator) after all accumulators
  return p.max_splits > 1 ? uint64_t(p.max_splits) * sh.rows * sh.heads * (uint64_t(sh.head_dim) + 2) : 0;
}

bool kernels::attn_f16_tiles(const attn_shape& sh) const { return attn_tc_mode(detail::op_env_of(*p_), sh) != 0; }

bool kernels::sparse_attention(commands& c, const attn_shape& sh, view q, view kv_a, view kv_b, view idx, view sinks,
                               view o, view scratch, view inv_rope_cs, const attn_q8_out* q8) {
  const char* op = "sparse_attention";
  if (sh.head_dim == 0 || sh.head_dim > attn_max_head_dim)
    throw usage_error(std::string(op) + ": head_dim must be in [1, " + std::to_string(attn_max_head_dim) + "]");
  if (sh.heads == 0) throw usage_error(std::string(op) + ": heads must be > 0");
  if (uint64_t(sh.kv_a_rows) + sh.kv_b_rows > 0x7FFFFFFFull)
    throw usage_error(std::string(op) + ": more KV rows than an int32 index can name");
  if (q8) {
    const uint64_t total = uint64_t(sh.rows) * sh.heads * sh.head_dim;
    if (!has_i8(q8->f)) throw usage_error(std::string(op) + ": q8 output: no int8-activation kernel for its format");
    if (q8->vec_cols == 0 || q8->vec_cols % 32 || total % q8->vec_cols)
      throw usage_error(std::string(op) + ": q8 output: vec_cols must be a multiple of 32 dividing rows · heads · "
                        "head_dim");
    detail::need_view(q8->q, act_q8_bytes(q8->vec_cols, uint32_t(total / q8->vec_cols)), op, "q8");
  }
  if (sh.rows == 0) return false;
  const detail::op_env e = detail::op_env_of(*p_);
  const attn_plan pl = plan_of(sh);
  const uint64_t hd = sh.head_dim, qb = uint64_t(sh.rows) * sh.heads * hd * 4, ab = uint64_t(sh.kv_a_rows) * hd * 4,
                 bb = uint64_t(sh.kv_b_rows) * hd * 4, ib = uint64_t(sh.rows) * sh.keys * 4,
                 xb = attn_scratch_floats(sh) * 4;
  detail::need_view(q, qb, op, "q");
  if (sh.kv_a_rows) detail::need_view(kv_a, ab, op, "kv_a");
  if (sh.kv_b_rows) detail::need_view(kv_b, bb, op, "kv_b");
  if (sh.keys) detail::need_view(idx, ib, op, "idx");
  if (sinks) detail::need_view(sinks, uint64_t(sh.heads) * 4, op, "sinks");
  detail::need_view(o, qb, op, "o");
  if (xb) detail::need_view(scratch, xb, op, "scratch");  // the shape's bound, whatever this call's split count
  const uint32_t ir = sh.inv_rope_dim;
  const uint64_t csb = uint64_t(sh.rows) * ir * 4;
  if (ir) {
    if (ir % 2 || ir > sh.head_dim) throw usage_error(std::string(op) + ": inv_rope_dim must be even, <= head_dim");
    detail::need_view(inv_rope_cs, csb, op, "inv_rope_cs");
  }
  const detail::bound b_cs = e.bind(ir ? inv_rope_cs : view(), ir ? csb : 4);
  const uint32_t tc = attn_tc_mode(e, sh);
  if ((sh.q_norm_rope || sh.q_rope) && (!ir || tc))
    throw usage_error(std::string(op) + ": q_norm_rope / q_rope need inv_rope_dim > 0 and a shape not on f16 tiles");
  if (sh.q_norm_rope && sh.q_rope) throw usage_error(std::string(op) + ": q_norm_rope and q_rope exclude each other");
  const bool split = pl.splits > 1 && !tc;
  if (split && c.in_concurrent())
    throw usage_error(std::string(op) + ": a split shape is two dependent dispatches: not inside begin_concurrent");
  const detail::bound b_q = e.bind(q, qb), b_a = e.bind(sh.kv_a_rows ? kv_a : view(), ab),
                      b_b = e.bind(sh.kv_b_rows ? kv_b : view(), bb), b_i = e.bind(sh.keys ? idx : view(), ib),
                      b_s = e.bind(sinks, uint64_t(sh.heads) * 4), b_o = e.bind(o, qb),
                      b_x = e.bind(split ? scratch : view(), xb);
  struct {
    uint32_t rows, heads, keys, ka, kb, nhb, qoff, aoff, boff, ioff, soff, has_sink, ooff;
    float scale;
    uint32_t splits, split_keys, xoff, csoff;
    float q_eps;
  } pc{sh.rows,          sh.heads,          sh.keys,           sh.kv_a_rows,     sh.kv_b_rows,
       pl.nhb,           b_q.residual / 4,  b_a.residual / 4,  b_b.residual / 4, b_i.residual / 4,
       b_s.residual / 4, sinks ? 1u : 0u,   b_o.residual / 4,  sh.scale,         pl.splits,
       pl.split_tiles * attn_keys_per_tile, b_x.residual / 4,  b_cs.residual / 4, sh.q_norm_eps};
  const uint32_t wg = detail::op_env::wg, opt = (sh.head_dim + wg - 1) / wg;
  const std::string ir_def = "#define ATT_IROPE " + std::to_string(ir) + "\n";  // used in #if: no u suffix
  uint32_t gx, gy;
  if (tc) {
    pc.nhb = (sh.heads + attn_tc_heads - 1) / attn_tc_heads;
    const std::string defs = detail::def_u("ATT_HD", sh.head_dim) + "#define ATT_QN " +
                             std::to_string(sh.head_dim / 64) + "\n#define ATT_COOP " + std::to_string(tc) + "\n" +
                             ir_def;
    const detail::binding b[8] = {b_q.b, b_a.b, b_b.b, b_i.b, b_s.b, b_o.b, b_x.b, b_cs.b};
    const uint32_t nb = ir ? 8 : 6;
    e.grid(uint64_t(sh.rows) * pc.nhb, gx, gy);
    detail::dispatch(c.impl(), e.pipe("attn_tc.comp", defs, wg, nb, sizeof pc), std::span<const detail::binding>(b, nb),
                     &pc, sizeof pc, gx, gy);
    return false;
  }
  const std::string defs = detail::def_u("ATT_HD", sh.head_dim) + detail::def_u("ATT_HB", attn_heads_per_wg) +
                           detail::def_u("ATT_KT", attn_keys_per_tile) + detail::def_u("ATT_OPT", opt) + ir_def +
                           "#define ATT_QPREP " + (sh.q_norm_rope ? "1\n" : sh.q_rope ? "2\n" : "0\n");
  const detail::binding b[8] = {b_q.b, b_a.b, b_b.b, b_i.b, b_s.b, b_o.b, b_x.b, b_cs.b};
  const uint32_t nb = ir ? 8 : 7;
  e.grid(uint64_t(sh.rows) * pl.nhb * pl.splits, gx, gy);
  detail::dispatch(c.impl(), e.pipe("attn_sparse.comp", defs, wg, nb, sizeof pc),
                   std::span<const detail::binding>(b, nb), &pc, sizeof pc, gx, gy);
  if (!split) return false;
  if (q8 && sh.head_dim % 32) q8 = nullptr;  // a block of 32 would span two heads' workgroups: the caller quantises
  // Combine the splits of each (row, head) with the sink (shaders/attn_combine.comp), with q8 also o's int8 copy
  // (ATT_Q8: binding 4, two more push words).
  const uint64_t total = uint64_t(sh.rows) * sh.heads * sh.head_dim;
  const detail::bound b_q8 = q8 ? e.bind(q8->q, act_q8_bytes(q8->vec_cols, uint32_t(total / q8->vec_cols)))
                                : detail::bound{};
  const uint32_t cpc[12] = {sh.rows,          sh.heads,        pl.splits, b_x.residual / 4, b_s.residual / 4,
                            sinks ? 1u : 0u,  b_o.residual / 4, b_cs.residual / 4,
                            q8 ? b_q8.residual / 4 : 0u, q8 ? q8->vec_cols : 0u, 0u, 0u};
  const detail::binding cb[5] = {b_x.b, b_s.b, b_o.b, b_cs.b, b_q8.b};
  const uint32_t ncb = q8 ? 5 : ir ? 4 : 3, pcb = q8 ? 48 : 32;
  std::string cdefs = detail::def_u("ATT_HD", sh.head_dim) + detail::def_u("ATT_OPT", opt) +
                      detail::def_u("ATT_MAXS", pl.max_splits) + "#define ATT_STAGE_ALL " +
                     (pl.max_splits <= 32 ? "1" : "0") + "\n" + ir_def;
  if (q8) {
    cdefs += "#define ATT_Q8 1\n" + act_target_defines(q8->f);
    cdefs += e.act_wide_defines();
  }
  e.grid(uint64_t(sh.rows) * sh.heads, gx, gy);
  detail::dispatch(c.impl(), e.pipe("attn_combine.comp", cdefs, wg, ncb, pcb), std::span<const detail::binding>(cb, ncb),
                   cpc, pcb, gx, gy);
  return bool(q8);
}

void kernels::compress_pool(commands& c, const pool_shape& sh, view a, view s, view win, view norm, view out,
                            view cs, view ape) {
  const char* op = "compress_pool";
  if (sh.width == 0 || sh.width > pool_max_width)
    throw usage_error(std::string(op) + ": width must be in [1, " + std::to_string(pool_max_width) + "]");
  if (sh.ratio == 0) throw usage_error(std::string(op) + ": ratio must be > 0");
  if (sh.row_floats < (sh.overlap ? 2ull : 1ull) * sh.width)
    throw usage_error(std::string(op) + ": row_floats " + std::to_string(sh.row_floats) + " < " +
                      (sh.overlap ? "2 * " : "") + "width");
  if (sh.rope_dim % 2 || sh.rope_dim > sh.width)
    throw usage_error(std::string(op) + ": rope_dim must be even and <= width");
  if (sh.entries == 0) return;
  const detail::op_env e = detail::op_env_of(*p_);
  const uint64_t csb = sh.rope_dim ? (uint64_t(sh.entries - 1) * sh.cs_stride + sh.rope_dim) * 4 : 4;
  if (sh.rope_dim) detail::need_view(cs, csb, op, "cs");
  const uint64_t apb = uint64_t(sh.ratio) * sh.row_floats * 4;
  if (ape) detail::need_view(ape, apb, op, "ape");
  // Rows reachable through win are the caller's; the views must at least hold one window.
  const uint64_t rb = uint64_t(sh.ratio) * sh.row_floats * 4, wb = uint64_t(sh.entries) * 8,
                 ob = uint64_t(sh.entries) * sh.width * 4;
  detail::need_view(a, rb, op, "a");
  detail::need_view(s, rb, op, "s");
  detail::need_view(win, wb, op, "win");
  if (norm) detail::need_view(norm, uint64_t(sh.width) * 4, op, "norm");
  detail::need_view(out, ob, op, "out");
  const detail::bound b_a = e.bind(a, a.bytes), b_s = e.bind(s, s.bytes), b_w = e.bind(win, wb),
                      b_n = e.bind(norm, uint64_t(sh.width) * 4), b_o = e.bind(out, ob),
                      b_c = e.bind(sh.rope_dim ? cs : view(), csb), b_p = e.bind(ape, apb);
  struct {
    uint32_t entries, ratio, width, rf, overlap, aoff, soff, woff, has_norm, noff, ooff;
    float eps;
    uint32_t rope_dim, csoff, cs_stride, apoff;
  } pc{sh.entries,      sh.ratio,         sh.width,         sh.row_floats,
       sh.overlap ? 1u : 0u, b_a.residual / 4, b_s.residual / 4, b_w.residual / 4,
       norm ? 1u : 0u,  b_n.residual / 4, b_o.residual / 4, sh.eps,
       sh.rope_dim,     b_c.residual / 4, sh.cs_stride,     b_p.residual / 4};
  const uint32_t wg = detail::op_env::wg, nb = ape ? 7 : sh.rope_dim ? 6 : 5;
  const detail::binding b[7] = {b_a.b, b_s.b, b_w.b, b_n.b, b_o.b, b_c.b, b_p.b};
  const std::string defs = detail::def_u("POOL_PT", (pool_max_width + wg - 1) / wg) + "#define POOL_ROPE " +
                           (sh.rope_dim ? "1\n" : "0\n") + "#define POOL_APE " + (ape ? "1\n" : "0\n");
  uint32_t gx, gy;
  e.grid(sh.entries, gx, gy);
  detail::dispatch(c.impl(), e.pipe("attn_pool.comp", defs, wg, nb, sizeof pc),
                   std::span<const detail::binding>(b, nb), &pc, sizeof pc, gx, gy);
}

void kernels::index_score(commands& c, const index_shape& sh, view q, view keys, view w, view counts, view score) {
  const char* op = "index_score";
  if (sh.head_dim == 0 || sh.head_dim > index_max_head_dim)
    throw usage_error(std::string(op) + ": head_dim must be in [1, " + std::to_string(index_max_head_dim) + "]");
  if (sh.heads == 0) throw usage_error(std::string(op) + ": heads must be > 0");
  if (sh.rows == 0 || sh.n == 0) return;
  const detail::op_env e = detail::op_env_of(*p_);
  const uint64_t qb = uint64_t(sh.rows) * sh.heads * sh.head_dim * 4, kb = uint64_t(sh.n) * sh.head_dim * 4,
                 wb = uint64_t(sh.rows) * sh.heads * 4, cb = uint64_t(sh.rows) * 4, ob = uint64_t(sh.rows) * sh.n * 4;
  detail::need_view(q, qb, op, "q");
  detail::need_view(keys, kb, op, "keys");
  detail::need_view(w, wb, op, "w");
  if (counts) detail::need_view(counts, cb, op, "counts");
  detail::need_view(score, ob, op, "score");
  const detail::bound b_q = e.bind(q, qb), b_k = e.bind(keys, kb), b_w = e.bind(w, wb), b_c = e.bind(counts, cb),
                      b_o = e.bind(score, ob);
  const uint32_t wg = detail::op_env::wg;
  uint32_t hsplit = 0;
  const std::string defs = index_defines(e, sh.rows, sh.heads, sh.head_dim, sh.n, hsplit);
  const uint32_t tiles = (sh.n + wg / hsplit - 1) / (wg / hsplit);
  const uint32_t pc[index_pc_words] = {sh.rows,          sh.heads,         sh.n,
                           tiles,            b_q.residual / 4, b_k.residual / 4,
                           b_w.residual / 4, b_c.residual / 4, counts ? 1u : 0u,
                           b_o.residual / 4, 0,                0};
  const detail::binding b[5] = {b_q.b, b_k.b, b_w.b, b_c.b, b_o.b};
  uint32_t gx, gy;
  e.grid(uint64_t(sh.rows) * tiles, gx, gy);
  detail::dispatch(c.impl(), e.pipe("attn_index.comp", defs, wg, 5, sizeof pc), b, pc, sizeof pc, gx, gy);
}

void kernels::prepare_index_score(uint32_t heads, uint32_t head_dim, uint32_t max_n) {
  if (head_dim == 0 || head_dim > index_max_head_dim || heads == 0) return;  // index_score refuses these
  const detail::op_env e = detail::op_env_of(*p_);
  uint32_t hsplit = 0;
  for (const uint32_t n : {1u, index_small_n + 1})
    if (n <= std::max(max_n, 1u)) (void)e.pipe("attn_index.comp", index_defines(e, 1, heads, head_dim, n, hsplit),
                                               detail::op_env::wg, 5, index_pc_words * 4);
  // many rows (prefill chunks): the long-list variant whatever the key count
  (void)e.pipe("attn_index.comp", index_defines(e, 2, heads, head_dim, 1, hsplit), detail::op_env::wg, 5,
               index_pc_words * 4);
}

}  // namespace cmfx::gpu
