// Host side of the expert-batched MoE: the dispatches of a MoE layer (batch-1 rows, the grouped int8 kernels, the
// tensor-core tiles) over the stacked experts that moe_upload.cpp puts on the device.
#include <bit>
#include <cstring>

#include <spirv-tools/libspirv.hpp>

#include "cmfx/formats/format_list.hpp"
#include "cmfx/kernels/moe.hpp"
#include "formats_gpu.hpp"
#include "kernels_ops.hpp"

namespace cmfx::gpu {

using detail::bind_planes;
using detail::mat_pc;

namespace {

/// Rows per workgroup: the largest power of two ≤ teams dividing `rows` (a block never straddles two experts).
uint32_t rows_per_wg(uint64_t rows, uint32_t teams) {
  uint32_t r = 1;
  while (r * 2 <= teams && rows % (r * 2) == 0) r *= 2;
  return r;
}

}  // namespace

namespace detail {
std::string moe_gemm_defines(format f, scale_encoding enc, uint32_t gm, uint32_t wg, uint32_t tk,
                             const std::string& coop_defs, uint32_t top_k, bool shared, uint64_t rows_e, bool x_token,
                             const std::string& slot_defs) {
  return "#define ROWS_PER_WG " + std::to_string(gm) + "\n#define GEMM_GM " + std::to_string(gm) +
         "\n#define GEMM_GN " + std::to_string(moe_gemm_pairs) + "\n#define GEMM_WG " + std::to_string(wg) +
         "\n#define GEMM_TK " + std::to_string(tk) + "\n" + coop_defs + "#define MOE_GEMM 1\n" +
         def_u("MOE_TOPK", top_k) + "#define MOE_SHARED " +
         (shared ? "1" : "0") + "\n" + def_u("MOE_ROWS", rows_e) + "#define MOE_X_TOKEN " + (x_token ? "1" : "0") +
         "\n" + slot_defs + tab_defines() + format_defines(f, enc);
}
}  // namespace detail

namespace {

/// The expert-cache defines (MOE_SLOTS, MOE_E) of a cached layer; empty for a resident one, whose shaders compile
/// as without a cache.
std::string slot_defines(const gpu_moe& m) {
  if (!m.slots) return {};
  return "#define MOE_SLOTS " + std::to_string(m.slots) + "\n" + detail::def_u("MOE_E", m.experts);
}

std::string moe_defines(const detail::op_env& e, const gpu_matrix& w, uint32_t rpw, uint32_t top_k, const gpu_moe& m,
                        float limit) {
  return "#define TEAMS " + std::to_string(e.teams) + "\n#define ROWS_PER_WG " + std::to_string(rpw) + "\n" +
         detail::def_u("MOE_TOPK", top_k) + "#define MOE_SHARED " + std::string(m.shared ? "1" : "0") + "\n" +
         detail::def_u("MOE_DIM", m.dim) + detail::def_u("MOE_INTER", m.inter) +  // not from the stack's rows: a
         // routed_only_scope leaves the shared expert in them
         detail::def_f("MOE_LIMIT", limit) + slot_defines(m) + detail::tab_defines() +
         format_defines(w.fmt, w.scale_enc);
}

/// out [n, d] = Σ of y [n·S, d] over each token's routed slots in ascending expert id, then the shared slot, then
/// `add` where given (shaders/moe_sum.comp); a bad id (or, cached, an expert outside the slots) makes the token's
/// row NaN.
void moe_sum(const detail::op_env& e, commands& c, const gpu_moe& m, uint32_t n, uint32_t top_k, view y, view ids,
             view out, view slot_map, view add = {}) {
  const uint64_t d = m.dim, S = top_k + (m.shared ? 1 : 0);
  const detail::bound yb = e.bind(y, n * S * d * 4), ib = e.bind(ids, uint64_t(n) * top_k * 4),
                      ob = e.bind(out, n * d * 4);
  detail::bound sb{}, ab{};
  if (m.slots) sb = e.bind(slot_map, uint64_t(m.experts) * 4);
  if (add) ab = e.bind(add, n * d * 4);
  const uint32_t pc[8] = {uint32_t(d), yb.residual / 4, ob.residual / 4, ib.residual / 4, n, sb.residual / 4,
                          ab.residual / 4, 0};
  // binding 3 (the slot map) is declared only for a cached layer: any binding fills its place before `add`
  const detail::binding b[5] = {yb.b, ib.b, ob.b, m.slots ? sb.b : yb.b, ab.b};
  const uint32_t nb = add ? 5 : m.slots ? 4 : 3;
  uint32_t gx, gy;
  e.grid(ceil_div(n * d, detail::op_env::wg), gx, gy);
  const std::string defs = detail::def_u("MOE_TOPK", top_k) + "#define MOE_SHARED " + (m.shared ? "1" : "0") + "\n" +
                           detail::def_u("MOE_E", m.experts) +
                           (m.slots ? "#define MOE_SLOTS " + std::to_string(m.slots) + "\n" : std::string()) +
                           "#define MOE_ADD " + (add ? "1" : "0") + "\n";
  detail::dispatch(c.impl(), e.pipe("moe_sum.comp", defs, detail::op_env::wg, nb, sizeof pc),
                   std::span<const detail::binding>(b, nb), pc, sizeof pc, gx, gy);
}

/// hq = int8(silu(min(g, L)) · clamp(u, −L, L) · w) for `pairs` (token, slot) pairs of gate/up rows gu [pairs, 2I]
/// (quantize_act.comp's ACT_SWIGLU mode: one dispatch, the f32 h never stored), packed for the down matrix's
/// format; the int8 paths of kernels::moe at batch 1 and grouped.
void swiglu_quantize(const detail::op_env& e, commands& c, const gpu_moe& m, uint32_t top_k, float limit,
                     uint64_t pairs, const detail::bound& gub, const detail::bound& hqb, const detail::bound& wb) {
  const uint64_t I = m.inter;
  const uint32_t pc[5] = {uint32_t(pairs), uint32_t(I / 32), gub.residual / 4, hqb.residual / 4, wb.residual / 4};
  const detail::binding b[3] = {gub.b, hqb.b, wb.b};
  uint32_t gx, gy;
  e.grid(ceil_div(pairs * (I / 32), detail::op_env::wg), gx, gy);
  const scale_encoding enc = m.down.w.fmt == format::mxfp4 ? scale_encoding::e8m0 : scale_encoding::none;
  const std::string defs = "#define ACT_SWIGLU 1\n" + detail::def_u("MOE_TOPK", top_k) + "#define MOE_SHARED " +
                           (m.shared ? "1" : "0") + "\n" + detail::def_f("MOE_LIMIT", limit) +
                           format_defines(m.down.w.fmt, enc);
  detail::dispatch(c.impl(), e.pipe("quantize_act.comp", defs, detail::op_env::wg, 3, sizeof pc), b, pc, sizeof pc,
                   gx, gy);
}

/// The batch-1 int8 path of one layer (shaders/matvec_rows.comp in its MOE_ROWS mode): its kernels' defines and
/// the parts of the scratch h = [h: S·I (unused here) | gate/up: S·2I | down: S·d | xq | hq] (S = slots); ok =
/// false where the path does not apply (no int8 kernel for a format, a row block that would straddle two experts,
/// a short or unaligned scratch, planes off the fast layout).
struct rows_i8_plan {
  bool ok = false;
  std::string dgu, ddn;  // row-kernel defines of gate/up and down
  uint32_t rgu = 0, rdn = 0;  // their rows per workgroup
  view guv, yv, xqv, hqv;
};

rows_i8_plan plan_rows_i8(kernels::impl& p, const detail::op_env& e, const gpu_moe& m, uint32_t top_k, view h) {
  rows_i8_plan r;
  const uint64_t d = m.dim, I = m.inter, S = top_k + (m.shared ? 1 : 0);
  detail::binding b[3];
  mat_pc pg{}, pd{};
  bind_planes(e, m.gate_up.w, b, pg, "moe");
  bind_planes(e, m.down.w, b, pd, "moe");
  if (!pg.fast || !pd.fast) return r;
  // the work split for the rows of one dispatch: every slot's expert at once
  if (!detail::rows_kernel_defines(p, m.gate_up.w.fmt, m.gate_up.w.scale_enc, S * 2 * I, d, true, pg.res0 % 16 == 0,
                                   r.dgu, r.rgu) ||
      !detail::rows_kernel_defines(p, m.down.w.fmt, m.down.w.scale_enc, S * d, I, true, pd.res0 % 16 == 0, r.ddn,
                                   r.rdn))
    return r;
  const uint64_t xq_bytes = kernels::act_q8_bytes(d), hq_bytes = kernels::act_q8_bytes(I, uint32_t(S));
  const uint64_t o_gu = S * I * 4, o_y = o_gu + S * 2 * I * 4, o_xq = (o_y + S * d * 4 + 15) / 16 * 16,
                 o_hq = (o_xq + xq_bytes + 15) / 16 * 16;
  // (each slot's quantised h starts on 16 bytes: act_q8_bytes pads every vector)
  if ((2 * I) % r.rgu || d % r.rdn || I % 32 || d % 32 || h.bytes < o_hq + hq_bytes || h.offset % 16) return r;
  auto part = [&](uint64_t off, uint64_t bytes) { return view(*h.buf, h.offset + off, bytes); };
  r.guv = part(o_gu, S * 2 * I * 4), r.yv = part(o_y, S * d * 4), r.xqv = part(o_xq, xq_bytes),
  r.hqv = part(o_hq, hq_bytes);
  if (e.bind(r.xqv, xq_bytes).residual % 16 || e.bind(r.hqv, hq_bytes).residual % 16) return r;
  r.ok = true;
  return r;
}

/// Batch 1 with int8 activations through the row kernel: quantise x (unless moe_prepare did) → gate/up rows of the
/// selected experts → SwiGLU · weight quantised to h (one dispatch: quantize_act.comp's ACT_SWIGLU mode) → down
/// rows → moe_sum (+ extras.add). Where they apply (matvec_tuning::moe_tails), the SwiGLU + quantisation runs in the
/// tails of the gate/up rows' workgroups and the sum (without extras.add) in those of the down rows
/// (matvec_rows.comp MOE_TAIL): two dependent dispatches instead of four. extras.side is recorded inside a
/// concurrent group with each of them, numbered in order.
/// Returns false, recording nothing, where plan_rows_i8 says the path does not apply; kernels::moe then takes its
/// two-pass f32 path.
bool moe_rows_i8(kernels& k, kernels::impl& p, const detail::op_env& e, commands& c, const gpu_moe& m, view x,
                 view ids, view weights, uint32_t top_k, float limit, view h, view out, view slot_map,
                 const moe_extras& ex) {
  const rows_i8_plan pl = plan_rows_i8(p, e, m, top_k, h);
  if (!pl.ok) return false;
  const uint64_t d = m.dim, I = m.inter, S = top_k + (m.shared ? 1 : 0);
  detail::binding bg[8], bd[8];
  mat_pc pg{}, pd{};
  bind_planes(e, m.gate_up.w, bg, pg, "moe");
  bind_planes(e, m.down.w, bd, pd, "moe");
  const uint64_t xq_bytes = pl.xqv.bytes, hq_bytes = pl.hqv.bytes;
  const detail::bound gub = e.bind(pl.guv, pl.guv.bytes), yb = e.bind(pl.yv, pl.yv.bytes),
                      xqb = e.bind(pl.xqv, xq_bytes), hqb = e.bind(pl.hqv, hq_bytes), ib = e.bind(ids, top_k * 4),
                      wb = e.bind(weights, top_k * 4), tb = e.bind(e.tables, e.tables.size());
  // the slot map (cached layers): binding 7 of the row kernel (the tables fill it otherwise, below the tails'
  // bindings), binding 3 of moe_sum; its offset in x_stride
  const uint32_t nb_rows = m.slots ? 8 : 7;
  detail::bound sb{};
  if (m.slots) sb = e.bind(slot_map, uint64_t(m.experts) * 4);
  auto moe_defs = [&](uint64_t rpe, uint64_t xstride) {
    return "#define MOE_ROWS 1\n" + detail::def_u("MOE_RPE", rpe) + detail::def_u("MOE_TOPK", top_k) +
           "#define MOE_SHARED " + std::string(m.shared ? "1" : "0") + "\n" + detail::def_u("MOE_E", m.experts) +
           detail::def_u("MOE_XSTRIDE", xstride) +
           (m.slots ? "#define MOE_SLOTS " + std::to_string(m.slots) + "\n" : std::string());
  };
  // stage s of the MoE with the caller's side work, without a barrier between them
  auto stage = [&](uint32_t s, auto&& record) {
    if (!ex.side) return record();
    c.begin_concurrent();
    record();
    ex.side(s);
    c.end_concurrent();
  };
  // The tails (matvec_rows.comp MOE_TAIL): the act tail packs h for the down matrix's format (act_target_defines
  // where it is not the gate/up format: the CMF q2tp file's q4tp w2) and needs a workgroup's rows inside one half
  // (gate or up) of a slot, covering whole blocks of 32 or a part of one; the sum tail cannot add extras.add (the
  // side work of the same stage may write it).
  const uint32_t tail_counters = detail::op_env::counter_slots / 4, wg_size = e.lanes * e.teams;
  const bool tails = detail::tuning_of(p).moe_tails != 1 && wg_size >= 32;
  const bool act_tail = tails && S * (I / 32) <= tail_counters &&
                        (pl.rgu >= 32 ? pl.rgu % 32 == 0 && I % pl.rgu == 0 : 32 % pl.rgu == 0);
  const bool sum_tail = tails && !ex.add && d / pl.rdn <= tail_counters;
  const detail::bound kb = detail::bind_range(e.info, *e.counters, 0, detail::op_env::counter_slots * 4ull);
  const detail::bound ob = e.bind(out, d * 4);
  struct tail_pc {
    mat_pc m;
    uint32_t cntoff, toff, woff, pad;
  };
  auto tail_defs = [&](int mode) {
    if (mode != 1) return "#define MOE_TAIL " + std::to_string(mode) + "\n";
    return "#define MOE_TAIL 1\n" + detail::def_f("MOE_LIMIT", limit) +
           (m.down.w.fmt != m.gate_up.w.fmt ? act_target_defines(m.down.w.fmt) : std::string());
  };
  uint32_t gx, gy, s_next = 0;
  if (!ex.prepared) k.quantize_act(c, m.gate_up.w.fmt, x, 1, d, pl.xqv);
  stage(s_next++, [&] {  // gate/up rows of every slot's expert → gu [S, 2I] (+ the act tail → hq)
    pg.rows = uint32_t(m.gate_up.w.rows), pg.cols = uint32_t(d), pg.n = 1, pg.r0 = 0;
    pg.xoff = xqb.residual / 4, pg.yoff = gub.residual / 4, pg.pad = ib.residual / 4;
    detail::binding b[11] = {bg[0], bg[1], bg[2], xqb.b, gub.b, tb.b, ib.b, m.slots ? sb.b : tb.b, kb.b, hqb.b, wb.b};
    pg.x_stride = sb.residual / 4;
    e.grid(S * (2 * I / pl.rgu), gx, gy);
    const tail_pc tp{pg, act_tail ? e.take_counters(uint32_t(S * (I / 32))) : 0u, hqb.residual / 4, wb.residual / 4, 0};
    const uint32_t nb = act_tail ? 11 : nb_rows, pcs = act_tail ? sizeof tp : sizeof pg;
    detail::dispatch(c.impl(),
                     e.pipe("matvec_rows.comp", pl.dgu + moe_defs(2 * I, 0) + (act_tail ? tail_defs(1) : ""), wg_size,
                            nb, pcs),
                     std::span<const detail::binding>(b, nb), &tp, pcs, gx, gy);
  });
  if (!act_tail) stage(s_next++, [&] { swiglu_quantize(e, c, m, top_k, limit, S, gub, hqb, wb); });  // per slot
  stage(s_next++, [&] {  // down rows of every slot's expert on its quantised h → y [S, d] (+ the sum tail → out)
    pd.rows = uint32_t(m.down.w.rows), pd.cols = uint32_t(I), pd.n = 1, pd.r0 = 0;
    pd.xoff = hqb.residual / 4, pd.yoff = yb.residual / 4, pd.pad = ib.residual / 4;
    detail::binding b[10] = {bd[0], bd[1], bd[2], hqb.b, yb.b, tb.b, ib.b, m.slots ? sb.b : tb.b, kb.b, ob.b};
    pd.x_stride = sb.residual / 4;
    e.grid(S * (d / pl.rdn), gx, gy);
    const tail_pc tp{pd, sum_tail ? e.take_counters(uint32_t(d / pl.rdn)) : 0u, ob.residual / 4, 0, 0};
    const uint32_t nb = sum_tail ? 10 : nb_rows, pcs = sum_tail ? sizeof tp : sizeof pd;
    detail::dispatch(c.impl(),
                     e.pipe("matvec_rows.comp", pl.ddn + moe_defs(d, kernels::act_q8_bytes(I) / 4) +
                                                    (sum_tail ? tail_defs(2) : ""),
                            wg_size, nb, pcs),
                     std::span<const detail::binding>(b, nb), &tp, pcs, gx, gy);
  });
  if (!sum_tail) stage(s_next++, [&] { moe_sum(e, c, m, 1, top_k, pl.yv, ids, out, slot_map, ex.add); });
  return true;
}

/// The uint32 words of the expert-grouped path's pair lists: counts [E + shared], lists [E + shared][n · top_k].
uint64_t grouped_list_words(const gpu_moe& m, uint32_t n, uint32_t top_k) {
  return (m.experts + (m.shared ? 1ull : 0ull)) * (uint64_t(n) * top_k + 1);
}

/// The (token, slot) pairs of every expert (shaders/moe_group.comp): counts [E + shared], then the lists, at lb.
void pair_lists(const detail::op_env& e, commands& c, const gpu_moe& m, uint32_t n, uint32_t top_k,
                const detail::bound& ib, const detail::bound& lb) {
  const uint32_t pc[4] = {n, ib.residual / 4, lb.residual / 4, uint32_t(m.experts)};
  const detail::binding b[2] = {ib.b, lb.b};
  const std::string defs = detail::def_u("MOE_TOPK", top_k) + "#define MOE_SHARED " + (m.shared ? "1" : "0") + "\n";
  uint32_t gx, gy;
  e.grid(m.experts + (m.shared ? 1 : 0), gx, gy);
  detail::dispatch(c.impl(), e.pipe("moe_group.comp", defs, detail::op_env::wg, 2, sizeof pc), b, pc, sizeof pc, gx,
                   gy);
}

/// Whether both expert matrices of m bind on the chunked fast path (formats.glsl's fetch).
bool planes_fast(const detail::op_env& e, const gpu_moe& m) {
  detail::binding bt[3];
  mat_pc pg{}, pd{};
  bind_planes(e, m.gate_up.w, bt, pg, "moe");
  bind_planes(e, m.down.w, bt, pd, "moe");
  return pg.fast && pd.fast;
}

/// The scratch h of the expert-grouped paths: [h [n·S, I] | gu [n·S, 2I] | y [n·S, d] | the pair lists], each part
/// on 16 bytes. (The int8 path keeps its quantised activations in h's part: hq [n·S] then xq [n].)
struct grouped_scratch {
  uint64_t o_gu = 0, o_y = 0, o_l = 0, l_bytes = 0;
};
grouped_scratch grouped_layout(const gpu_moe& m, uint32_t n, uint32_t top_k) {
  const uint64_t d = m.dim, I = m.inter, S = top_k + (m.shared ? 1 : 0);
  grouped_scratch g;
  g.o_gu = (n * S * I * 4 + 15) / 16 * 16, g.o_y = (g.o_gu + n * S * 2 * I * 4 + 15) / 16 * 16,
  g.o_l = (g.o_y + n * S * d * 4 + 15) / 16 * 16;
  g.l_bytes = grouped_list_words(m, n, top_k) * 4;
  return g;
}

/// moe_i8_tc.comp's split of one product of format f (q4tp / q2tp), rows_e rows per expert, cols columns: subgroups
/// per workgroup, 16-row tiles per subgroup, 32-column blocks per step, words per weight load (the largest that
/// divides a lane's words, the plane's first word res0 / 4 and a row's words); sg = 0 where it does not apply.
/// Preferred: 4 subgroups of 2 tiles, 4 blocks per step (the split measured on the H200, not swept: docs/PERF.md
/// "Eighteenth session"); fewer subgroups where shared memory is short.
struct i8tc_split {
  uint32_t sg = 0, rt = 0, kb = 0, vec = 0;
};
uint32_t ladder_value_words(format f) {
  uint32_t vb = 0;
  for_each_type(all_formats{}, [&]<class F>() {
    if constexpr (requires { F::code0_zero; })
      if (F::id == f) vb = F::value_bytes / 4;
  });
  return vb;
}
/// moe_i8_tc.comp's shared-memory layout (passed as defines): a decoded weight row of a 32-column block at a stride of
/// 12 words (48 bytes: 8 consecutive rows' 16-byte stores fall into distinct bank groups), a row's ladder at a
/// stride of rungs + 1 words (the lanes building them, one row each, hit distinct banks).
constexpr uint32_t i8t_row_words = 12, i8t_ladder_stride = ladder::rungs + 1;
uint64_t i8tc_shared_bytes(const i8tc_split& s, uint32_t tc) {
  const uint64_t areg = std::max<uint64_t>(uint64_t(s.rt) * s.kb * 16 * i8t_row_words, uint64_t(s.rt) * 256);
  return 4 * (s.sg * areg + uint64_t(s.sg) * s.rt * 16 * s.kb + uint64_t(s.sg) * s.rt * 16 * i8t_ladder_stride +
              (tc == 1 ? 256 : 0)) + 256;  // regions, scales, ladders, the index matrix; + formats.glsl's tables
}
/// The tile layout's defines shared by moe_i8_gather.comp and moe_i8_tc.comp.
std::string i8t_defines() { return detail::def_u("I8T_BLOCK_WORDS", kernels::moe_i8_tile_block_words); }
i8tc_split plan_i8tc(const detail::op_env& e, uint32_t tc, format f, uint64_t rows_e, uint64_t cols, uint32_t res0) {
  const uint32_t vw = ladder_value_words(f);
  if (vw == 0 || cols % 32 || rows_e % 16) return {};
  i8tc_split s{4, 2, 4, 4};
  while (s.sg > 1 && rows_e % (16 * s.rt * s.sg)) s.sg /= 2;
  while (s.rt > 1 && rows_e % (16 * s.rt * s.sg)) s.rt /= 2;
  const uint64_t B = cols / 32;
  while (B % s.kb) s.kb /= 2;
  const uint32_t hw = s.kb >= 2 ? s.kb * vw / 2 : vw / 2;
  while (s.vec > 1 && (hw % s.vec || (res0 / 4) % s.vec || (B * vw) % s.vec)) s.vec /= 2;
  while (s.sg > 1 && i8tc_shared_bytes(s, tc) > e.info.max_shared_memory) s.sg /= 2;
  if (res0 % 4 || i8tc_shared_bytes(s, tc) > e.info.max_shared_memory) return {};
  return s;  // (MOE_ROWS_E a multiple of 16·rt·sg: the shader's row blocks never straddle two experts)
}
std::string i8tc_defines(uint32_t tc, const i8tc_split& s, uint32_t top_k, bool shared, const std::string& slot_defs,
                         uint64_t rows_e, format f, scale_encoding enc) {
  return "#define TC " + std::to_string(tc) + "\n#define SG " + std::to_string(s.sg) + "\n#define RT " +
         std::to_string(s.rt) + "\n#define KB " + std::to_string(s.kb) + "\n#define VEC " + std::to_string(s.vec) +
         "\n" + detail::def_u("MOE_TOPK", top_k) + "#define MOE_SHARED " + (shared ? "1" : "0") + "\n" +
         detail::def_u("MOE_ROWS_E", rows_e) + detail::def_u("I8T_ROW_WORDS", i8t_row_words) +
         detail::def_u("I8T_LADDER_STRIDE", i8t_ladder_stride) + i8t_defines() + slot_defs + detail::tab_defines() +
         format_defines(f, enc);
}

/// Whether matvec_tuning::moe_i8_tc = 0 takes the int8 tensor cores where present: not yet — on the H200
/// moe_i8_tc.comp takes 5.50 ms against moe_rows_g8.comp's 3.96 (q2tp, 256 experts of 4096 × 2048, 512 tokens;
/// docs/PERF.md "Eighteenth session").
constexpr bool i8tc_default = false;
/// The int8 tensor-core mode of the expert-grouped int8 products here (matvec_tuning::moe_i8_tc): 1 = on the
/// tensor cores, 2 = emulated, 0 = moe_rows_g8.comp.
uint32_t i8tc_mode(const detail::op_env& e, const matvec_tuning& tu, const gpu_moe& m) {
  if (tu.moe_i8_tc == 1 || (tu.moe_i8_tc == 0 && !i8tc_default) || !e.info.subgroup_arithmetic) return 0;
  if (ladder_value_words(m.gate_up.w.fmt) == 0 || ladder_value_words(m.down.w.fmt) == 0) return 0;
  if (e.info.coop_i8 && e.lanes == 32) return 1;
  return tu.moe_i8_tc == 2 ? 2 : 0;
}

/// moe_i8_tc.comp's plan for a layer's n-token chunk with the grouped scratch h (16-byte aligned): the gathered
/// tiles at o_t (t_bytes), off[] at o_off, the splits of gate/up and down; tc = 0 where it does not run.
struct i8tc_layer {
  uint32_t tc = 0;
  uint64_t tiles = 0, o_t = 0, t_bytes = 0, o_off = 0;
  i8tc_split gu, dn;
};
i8tc_layer plan_i8tc_layer(const detail::op_env& e, const matvec_tuning& tu, const gpu_moe& m, uint32_t n,
                           uint32_t top_k, const view& h) {
  i8tc_layer L;
  const uint32_t tc = i8tc_mode(e, tu, m);
  if (n < 2 || tc == 0 || h.offset % 16) return L;
  const grouped_scratch gs = grouped_layout(m, n, top_k);
  const uint64_t ne = m.experts + (m.shared ? 1 : 0), d = m.dim, I = m.inter;
  L.tiles = kernels::moe_pair_tiles(m, n, top_k), L.o_t = (gs.o_l + gs.l_bytes + 15) / 16 * 16,
  L.t_bytes = L.tiles * kernels::moe_i8_tile_block_words * (std::max(d, I) / 32) * 4, L.o_off = L.o_t + L.t_bytes;
  if (L.o_off + (ne + 1) * 4 > h.bytes) return L;
  detail::binding bt[3];
  mat_pc pg{}, pd{};
  bind_planes(e, m.gate_up.w, bt, pg, "moe");
  bind_planes(e, m.down.w, bt, pd, "moe");
  L.gu = plan_i8tc(e, tc, m.gate_up.w.fmt, 2 * I, d, pg.res0), L.dn = plan_i8tc(e, tc, m.down.w.fmt, d, I, pd.res0);
  if (L.gu.sg && L.dn.sg) L.tc = tc;
  return L;
}

/// n >= 2 with int8 activations (the prefill chunks of `--act i8`): the pair lists, x quantised once per token
/// (quantize_act.comp), the gate/up rows of each expert for its pairs (shaders/moe_rows_g8.comp) → gu [n·S, 2I],
/// SwiGLU · weight quantised per pair (quantize_act.comp's ACT_SWIGLU mode, as at batch 1) → hq, the down rows
/// (moe_rows_g8.comp) → y [n·S, d], moe_sum. Numerics: those of the batch-1 int8 path, pair by pair (the CPU's
/// moe_forward with act_precision::i8). Returns false, recording nothing, where the path does not apply (no
/// int8 kernel for a format, rows or columns the kernels cannot split, a short or unaligned scratch).
bool moe_grouped_i8(kernels& k, const kernels::impl& p, const detail::op_env& e, commands& c, const gpu_moe& m, view x,
                    uint32_t n, view ids, view weights, uint32_t top_k, float limit, view h, view out,
                    view slot_map) {
  const gpu_matrix &wgu = m.gate_up.w, &wdn = m.down.w;
  if (!k.has_i8(wgu.fmt) || !k.has_i8(wdn.fmt)) return false;
  const uint64_t d = m.dim, I = m.inter, E = m.experts, S = top_k + (m.shared ? 1 : 0), np = uint64_t(n) * S;
  // The work split, from H200 sweeps (256 experts of 4096 × 2048, 512 tokens, ms per layer, run-to-run noise ~2 %
  // within one machine start): 8 rows per subgroup, tiles of 4 pairs, 1 chunk in flight, the tile's sums by a
  // butterfly of shuffles — q2tp 3.57, q4tp 3.68 (twenty-eighth session, docs/PERF.md; the twelfth session's 4 rows
  // and 2 chunks: 3.99 / 4.12; 4 rows and 1 chunk 3.74 / 3.84; f16 tiles 6.89; tiles of 8 pairs: 3.91 / 3.97, of 2:
  // 4.42 / 4.39, measured with the bit-planes formed once per row and chunk, which timed as built); MXFP4 (its
  // E2M1 table lookups once per row and chunk, chunk_operands) 4 rows, 1 chunk: 6.28 (2 rows: 6.95; f16 tiles
  // 5.31). Fewer rows per subgroup where a workgroup's rows must divide 2·I and d.
  const matvec_tuning& tu = detail::tuning_of(p);
  const bool mx = wgu.fmt == format::mxfp4;
  uint32_t rpt = tu.moe_rows_per_team ? tu.moe_rows_per_team : mx ? 4 : 8;
  while (rpt > 1 && ((2 * I) % (e.teams * rpt) || d % (e.teams * rpt))) rpt /= 2;
  const uint32_t rpw = e.teams * rpt;
  if (d % 32 || I % 32 || (2 * I) % rpw || d % rpw) return false;
  const grouped_scratch gs = grouped_layout(m, n, top_k);
  const uint64_t hq_bytes = kernels::act_q8_bytes(I, uint32_t(np)), o_xq = (hq_bytes + 15) / 16 * 16,
                 xq_bytes = kernels::act_q8_bytes(d, n);
  if (o_xq + xq_bytes > gs.o_gu || gs.o_l + gs.l_bytes > h.bytes || h.offset % 16) return false;
  auto part = [&](uint64_t off, uint64_t bytes) { return view(*h.buf, h.offset + off, bytes); };
  const view hqv = part(0, hq_bytes), xqv = part(o_xq, xq_bytes), guv = part(gs.o_gu, np * 2 * I * 4),
             yv = part(gs.o_y, np * d * 4), lv = part(gs.o_l, gs.l_bytes);
  const detail::bound ib = e.bind(ids, uint64_t(n) * top_k * 4), wb = e.bind(weights, uint64_t(n) * top_k * 4),
                      tb = e.bind(e.tables, e.tables.size()), lb = e.bind(lv, gs.l_bytes),
                      hqb = e.bind(hqv, hq_bytes), xqb = e.bind(xqv, xq_bytes), gub = e.bind(guv, guv.bytes),
                      yb = e.bind(yv, yv.bytes);
  if (hqb.residual % 16 || xqb.residual % 16) return false;
  const detail::bound sb = m.slots ? e.bind(slot_map, E * 4) : detail::bound{};
  if (!planes_fast(e, m)) return false;
  const uint32_t nb = tu.moe_pairs ? tu.moe_pairs : 4, unroll = tu.moe_unroll ? tu.moe_unroll : 1;
  const bool butterfly = e.info.subgroup_shuffle;
  const uint32_t nbind = m.slots ? 8 : 7;
  auto run = [&](const gpu_matrix& w, uint64_t rows_e, const detail::bound& in, const detail::bound& outb,
                 bool x_token) {
    detail::binding b[8];
    mat_pc pc{};
    bind_planes(e, w, b, pc, "moe");
    b[3] = in.b, b[4] = outb.b, b[5] = tb.b, b[6] = lb.b, b[7] = sb.b;
    pc.n = n, pc.xoff = in.residual / 4, pc.x_stride = lb.residual / 4, pc.yoff = outb.residual / 4,
    pc.pad = m.slots ? sb.residual / 4 : uint32_t(E);
    const std::string defs = "#define TEAMS " + std::to_string(e.teams) + "\n#define RPT " + std::to_string(rpt) +
                             "\n#define ROWS_PER_WG " + std::to_string(rpw) + "\n#define MOE_NB " + std::to_string(nb) +
                             "\n#define MOE_UNROLL " + std::to_string(unroll) +
                             "\n#define MOE_BUTTERFLY " + (butterfly ? "1" : "0") + "\n" +
                             detail::def_u("MOE_TOPK", top_k) + "#define MOE_SHARED " + (m.shared ? "1" : "0") +
                             "\n#define MOE_ROWS_E " + std::to_string(rows_e) + "\n#define MOE_X_TOKEN " +
                             (x_token ? "1" : "0") + "\n" + slot_defines(m) + detail::tab_defines() +
                             format_defines(w.fmt, w.scale_enc);
    uint32_t gx, gy;
    e.grid((E + (m.shared ? 1 : 0)) * (rows_e / rpw), gx, gy);
    detail::dispatch(c.impl(), e.pipe("moe_rows_g8.comp", defs, e.lanes * e.teams, nbind, sizeof pc),
                     std::span<const detail::binding>(b, nbind), &pc, sizeof pc, gx, gy);
  };
  // moe_i8_tc.comp (int8 tensor cores): each product behind a gather of its activations into 16-pair tiles
  const i8tc_layer L = plan_i8tc_layer(e, tu, m, n, top_k, h);
  const uint64_t ne = E + (m.shared ? 1 : 0), tiles = L.tiles;
  const uint32_t tc = L.tc;
  detail::bound tgb, ofb;
  if (tc) tgb = e.bind(part(L.o_t, L.t_bytes), L.t_bytes), ofb = e.bind(part(L.o_off, (ne + 1) * 4), (ne + 1) * 4);
  auto gather = [&](const gpu_matrix& w, const detail::bound& in, uint64_t cols, bool x_token) {
    const uint32_t pc[6] = {n, lb.residual / 4, in.residual / 4, uint32_t(cols / 32), tgb.residual / 4,
                            ofb.residual / 4};
    const detail::binding b[4] = {lb.b, in.b, tgb.b, ofb.b};
    const std::string defs = detail::def_u("TG_NE", ne) + detail::def_u("MOE_TOPK", top_k) + "#define MOE_SHARED " +
                             (m.shared ? "1" : "0") + "\n#define MOE_X_TOKEN " + (x_token ? "1" : "0") + "\n" +
                             i8t_defines() + format_defines(w.fmt, w.scale_enc);
    uint32_t gx, gy;
    e.grid(tiles, gx, gy);
    detail::dispatch(c.impl(), e.pipe("moe_i8_gather.comp", defs, detail::op_env::wg, 4, sizeof pc), b, pc,
                     sizeof pc, gx, gy);
  };
  auto run_tc = [&](const gpu_matrix& w, const i8tc_split& sp, uint64_t rows_e, const detail::bound& outb) {
    const uint32_t nbt = m.slots ? 9 : 8;
    detail::binding b[9];
    mat_pc pc{};
    bind_planes(e, w, b, pc, "moe");
    b[3] = tgb.b, b[4] = outb.b, b[5] = tb.b, b[6] = lb.b, b[7] = ofb.b, b[8] = sb.b;
    pc.n = n, pc.xoff = tgb.residual / 4, pc.x_stride = lb.residual / 4, pc.yoff = outb.residual / 4,
    pc.y_stride = ofb.residual / 4, pc.pad = m.slots ? sb.residual / 4 : uint32_t(E);
    uint32_t gx, gy;
    e.grid(rows_e / (16 * sp.rt * sp.sg) * tiles, gx, gy);
    const std::string defs = i8tc_defines(tc, sp, top_k, m.shared, slot_defines(m), rows_e, w.fmt, w.scale_enc);
    detail::dispatch(c.impl(), e.pipe("moe_i8_tc.comp", defs, sp.sg * e.lanes, nbt, sizeof pc),
                     std::span<const detail::binding>(b, nbt), &pc, sizeof pc, gx, gy);
  };
  const bool use_tc = tc != 0;
  pair_lists(e, c, m, n, top_k, ib, lb);
  k.quantize_act(c, wgu.fmt, x, n, d, xqv);
  if (use_tc) {
    gather(wgu, xqb, d, true);
    run_tc(wgu, L.gu, 2 * I, gub);  // gu [n·S, 2I]
  } else {
    run(wgu, 2 * I, xqb, gub, true);
  }
  swiglu_quantize(e, c, m, top_k, limit, np, gub, hqb, wb);  // per pair
  if (use_tc) {
    gather(wdn, hqb, I, false);
    run_tc(wdn, L.dn, d, yb);  // y [n·S, d]
  } else {
    run(wdn, d, hqb, yb, false);
  }
  moe_sum(e, c, m, n, top_k, yv, ids, out, slot_map);
  return true;
}

/// moe_tc.comp's layout for layer m (tiles: matvec_tuning::moe_tiles): its subgroups per workgroup, 0 where it does
/// not run (not asked for, no f16 GEMM mode, a format or shape it does not take, too little shared memory).
constexpr uint32_t tc_step = 64, tc_blocks = 2;  // moe_tc.comp's TK and TC_NT
uint32_t tc_subgroups(const detail::op_env& e, const gpu_moe& m, uint32_t tiles) {
  // Only where asked for (tiles 2): on the H200 (256 experts of 4096 × 2048, 512 tokens) gemm.comp's tiles are the
  // faster for every format measured — q2tp 6.90 against 8.94 ms here, q4tp 9.58 here, MXFP4 5.32 against 5.53
  // (docs/PERF.md "Fourteenth session").
  const uint32_t coop = e.gemm_coop;
  if (coop == 0 || tiles != 2 || !e.info.subgroup_arithmetic || (coop == 1 && e.lanes != 32) || 256 % e.lanes)
    return 0;
  const gpu_matrix &wgu = m.gate_up.w, &wdn = m.down.w;
  for (const format f : {wgu.fmt, wdn.fmt}) {
    if (f != format::q4tp && f != format::q2tp && f != format::mxfp4 && f != format::fp8_b128 &&
        f != format::fp8_b32)
      return 0;
    const uint32_t chunk = detail::gpu_traits(f).chunk;
    if (tc_step % chunk || (32 * (tc_step / chunk)) % e.lanes) return 0;
  }
  const uint64_t d = m.dim, I = m.inter;
  // subgroups per workgroup: 4 where the shared memory holds their tiles and ladders (the H200), else 2, 1
  auto fits = [&](uint32_t sg) {
    for (const format f : {wgu.fmt, wdn.fmt})
      if (uint64_t(sg) * 32 * (tc_step + 8) * 2 +
              (detail::gemm_ladder(f) ? uint64_t(sg) * 32 * ladder::rungs * 4 : 0) + 1280 >
          e.info.max_shared_memory)
        return false;
    return I % (16 * sg) == 0 && d % (32 * sg) == 0;
  };
  uint32_t sg = 4;
  while (sg > 1 && !fits(sg)) sg /= 2;
  return fits(sg) && d % tc_step == 0 && I % tc_step == 0 ? sg : 0;
}

/// The scratch of moe_tc.comp's path: [h | gu | y | lists | off[ne + 1] | xg: rows × d halves | hg: rows × I
/// halves], rows = the pairs with every expert's rounded up to 16 (kernels::moe_scratch_floats(..., true) counts them).
struct tc_scratch {
  uint64_t rows = 0, o_off = 0, o_xg = 0, o_hg = 0, end = 0;
};
tc_scratch tc_layout(const gpu_moe& m, uint32_t n, uint32_t top_k) {
  const grouped_scratch gs = grouped_layout(m, n, top_k);
  const uint64_t ne = m.experts + (m.shared ? 1 : 0), np = uint64_t(n) * (top_k + (m.shared ? 1 : 0));
  auto up16 = [](uint64_t v) { return (v + 15) / 16 * 16; };
  tc_scratch t;
  t.rows = np + 16 * ne, t.o_off = up16(gs.o_l + gs.l_bytes), t.o_xg = up16(t.o_off + (ne + 1) * 4);
  t.o_hg = up16(t.o_xg + t.rows * m.dim * 2), t.end = t.o_hg + t.rows * m.inter * 2;
  return t;
}

/// n >= 2 in the f16 GEMM modes with matvec_tuning::moe_tiles = 2: the expert-grouped products on f16 tiles split
/// by subgroups (docs/VULKAN.md "Expert tiles split by subgroups"; slower than gemm.comp's tiles on the H200, so
/// never the default). Five dispatches: the pair lists (moe_group.comp); every expert's pairs as f16 rows in expert
/// order, in blocks of 16 stored as 16 × 16 tiles (moe_tc_gather.comp); gate/up with SwiGLU · weight in the
/// epilogue → h as f16 rows in the same layout (moe_tc.comp, TC_GU 1); down → y [n·S, d] (TC_GU 0); moe_sum.
/// Scratch: tc_layout. Numerics: the f16 GEMM mode's (f16 weights and activations, f32 sums). Returns false, recording
/// nothing, where the path does not run (not asked for, a format or shape it does not take, too little shared
/// memory or scratch, x not 16-byte aligned).
bool moe_grouped_tc(const detail::op_env& e, commands& c, const gpu_moe& m, view x, uint32_t n, view ids,
                    view weights, uint32_t top_k, float limit, view h, view out, view slot_map, uint32_t tiles) {
  const uint32_t sg = tc_subgroups(e, m, tiles), coop = e.gemm_coop;
  const tc_scratch ts = tc_layout(m, n, top_k);
  if (sg == 0 || ts.end > h.bytes || h.offset % 16) return false;
  const gpu_matrix &wgu = m.gate_up.w, &wdn = m.down.w;
  const uint64_t d = m.dim, I = m.inter, E = m.experts, np = uint64_t(n) * (top_k + (m.shared ? 1 : 0)),
                 ne = E + (m.shared ? 1 : 0), rows = ts.rows;
  constexpr uint32_t tk = tc_step, nt = tc_blocks;
  const grouped_scratch gs = grouped_layout(m, n, top_k);
  const uint64_t o_off = ts.o_off, o_xg = ts.o_xg, o_hg = ts.o_hg;
  auto part = [&](uint64_t off, uint64_t bytes) { return view(*h.buf, h.offset + off, bytes); };
  const view offv = part(o_off, (ne + 1) * 4), xgv = part(o_xg, rows * d * 2), hgv = part(o_hg, rows * I * 2),
             yv = part(gs.o_y, np * d * 4), lv = part(gs.o_l, gs.l_bytes);
  const detail::bound ib = e.bind(ids, uint64_t(n) * top_k * 4), wb = e.bind(weights, uint64_t(n) * top_k * 4),
                      tb = e.bind(e.tables, e.tables.size()), lb = e.bind(lv, gs.l_bytes), xb = e.bind(x, n * d * 4),
                      ob = e.bind(offv, offv.bytes), gb = e.bind(xgv, xgv.bytes), hb = e.bind(hgv, hgv.bytes),
                      yb = e.bind(yv, yv.bytes);
  if (xb.residual % 16 || gb.residual % 16 || hb.residual % 16) return false;
  const detail::bound sb = m.slots ? e.bind(slot_map, E * 4) : detail::bound{};
  if (!planes_fast(e, m)) return false;
  uint32_t gx, gy;
  pair_lists(e, c, m, n, top_k, ib, lb);
  {  // every expert's pairs as f16 rows in blocks of 16
    const uint32_t pc[6] = {n, lb.residual / 4, xb.residual / 4, uint32_t(d), gb.residual / 4, ob.residual / 4};
    const detail::binding b[4] = {lb.b, xb.b, gb.b, ob.b};
    const std::string defs = detail::def_u("TG_NE", ne) + detail::def_u("MOE_TOPK", top_k) + "#define MOE_SHARED " +
                             (m.shared ? "1" : "0") + "\n";
    e.grid(rows / 16, gx, gy);
    detail::dispatch(c.impl(), e.pipe("moe_tc_gather.comp", defs, detail::op_env::wg, 4, sizeof pc), b, pc,
                     sizeof pc, gx, gy);
  }
  const uint32_t nbind = m.slots ? 10 : 9;
  auto run = [&](const gpu_matrix& w, bool gu, const detail::bound& in, const detail::bound& outb) {
    detail::binding b[10];
    mat_pc pc{};
    bind_planes(e, w, b, pc, "moe");
    b[3] = in.b, b[4] = outb.b, b[5] = tb.b, b[6] = lb.b, b[7] = ob.b, b[8] = wb.b;
    pc.n = n, pc.xoff = in.residual / 16, pc.x_stride = lb.residual / 4, pc.yoff = outb.residual / 4,
    pc.y_stride = ob.residual / 4, pc.e_off = wb.residual / 4, pc.pad = uint32_t(E);
    if (m.slots) b[9] = sb.b, pc.pad = sb.residual / 4;
    const uint64_t rows_e = gu ? I : d, nrb = rows_e / ((gu ? 16 : 32) * sg);
    const std::string defs = "#define TC_COOP " + std::to_string(coop) + "\n#define TC_GU " + (gu ? "1" : "0") +
                             "\n#define TC_SG " + std::to_string(sg) + "\n#define TC_NT " + std::to_string(nt) +
                             "\n#define TK " + std::to_string(tk) + "\n" + detail::def_u("MOE_TOPK", top_k) +
                             "#define MOE_SHARED " + (m.shared ? "1" : "0") + "\n" +
                             detail::def_u("MOE_ROWS", rows_e) + detail::def_u("MOE_I", I) + detail::def_f("MOE_LIMIT", limit) + slot_defines(m) +
                             detail::tab_defines() + format_defines(w.fmt, w.scale_enc);
    e.grid(E * nrb + (m.shared ? nrb * ceil_div(uint64_t(n), uint64_t(16 * nt)) : 0), gx, gy);
    detail::dispatch(c.impl(), e.pipe("moe_tc.comp", defs, sg * e.lanes, nbind, sizeof pc),
                     std::span<const detail::binding>(b, nbind), &pc, sizeof pc, gx, gy);
  };
  run(wgu, true, gb, hb);   // h (f16, expert order) = SwiGLU(gate, up) · w
  run(wdn, false, hb, yb);  // y [n·S, d]
  moe_sum(e, c, m, n, top_k, yv, ids, out, slot_map);
  return true;
}

/// n >= 2: the expert-grouped path (scratch h: [h [n·S, I] | y [n·S, d] | the pair lists]) (shaders/moe_group.comp, moe_up_g.comp, moe_down_g.comp, moe_sum.comp): the
/// (token, slot) pairs listed per expert, then one workgroup per (expert, row block) runs its pairs in tiles of
/// MOE_NB, so each expert's weights are read once per tile rather than once per pair (prefill). Returns false,
/// recording nothing, where the scratch is too short or the layout does not allow it; kernels::moe then takes
/// the per-pair path.
bool moe_grouped(const detail::op_env& e, commands& c, const gpu_moe& m, view x, uint32_t n, view ids, view weights,
                 uint32_t top_k, float limit, view h, view out, view slot_map) {
  const uint64_t d = m.dim, I = m.inter, E = m.experts, S = top_k + (m.shared ? 1 : 0), ne = E + (m.shared ? 1 : 0);
  const grouped_scratch gs = grouped_layout(m, n, top_k);
  const uint64_t o_gu = gs.o_gu, o_y = gs.o_y, o_l = gs.o_l, l_bytes = gs.l_bytes;
  if (o_l + l_bytes > h.bytes) return false;
  const view hv(*h.buf, h.offset, n * S * I * 4), guv(*h.buf, h.offset + o_gu, n * S * 2 * I * 4),
      yv(*h.buf, h.offset + o_y, n * S * d * 4), lv(*h.buf, h.offset + o_l, l_bytes);
  const detail::bound ib = e.bind(ids, uint64_t(n) * top_k * 4), wb = e.bind(weights, uint64_t(n) * top_k * 4),
                      tb = e.bind(e.tables, e.tables.size()), lb = e.bind(lv, l_bytes), xb = e.bind(x, n * d * 4),
                      hb = e.bind(hv, hv.bytes), yb = e.bind(yv, yv.bytes);
  const detail::bound sb = m.slots ? e.bind(slot_map, E * 4) : detail::bound{};
  const std::string nb_def = "#define MOE_NB 8\n";
  uint32_t gx, gy;
  // 1. the pairs of every expert
  pair_lists(e, c, m, n, top_k, ib, lb);
  const uint32_t nb = m.slots ? 9 : 8;
  // The tiled GEMM per expert (gemm.comp's MOE_GEMM mode): 64 or 128 rows × 16 pairs per tile, weights decoded
  // once per tile into shared memory. Where a layout does not allow it (rows per expert not a multiple of 64, columns not a
  // multiple of the step, too little shared memory): the row-per-team kernels below.
  // Tile rows: 128 (128 invocations) where the shared memory holds it (the H200's 48 KiB; the activation tile then
  // serves twice the rows), else 64 (64 invocations; lavapipe's 32 KiB). 16 pairs per tile: an expert has
  // ~n·top_k/E pairs (6 at 256 tokens of V4-Flash, 12 at 512).
  // f16 modes (kernels::set_gemm_precision): f16 tiles, 64 columns per step; with cooperative matrices one 16 × 16
  // block per subgroup (gm/16 subgroups), emulated 256 invocations. A layout either cannot take: the f32 tiles.
  uint32_t coop = e.gemm_coop;
  auto need = [&](uint32_t gm, uint32_t tk) {
    return detail::gemm_shared_bytes(gm, detail::moe_gemm_pairs, tk, coop);
  };
  auto wg_of = [&](uint32_t gm) { return detail::moe_gemm_wg(coop, gm, e.info.subgroup_size); };
  auto pick_gm = [&] {
    return need(128, detail::gemm_step(32, coop)) <= e.info.max_shared_memory && (2 * I) % 128 == 0 && d % 128 == 0
               ? 128u
               : 64u;
  };
  uint32_t gm = pick_gm();
  std::string cdefs;
  if (coop &&
      !detail::gemm_coop_defines(coop, gm, detail::moe_gemm_pairs, wg_of(gm), e.info.subgroup_size, cdefs)) {
    coop = 0;
    gm = pick_gm();
  }
  auto gemm_defs = [&](const gpu_matrix& w, uint64_t rows_e, bool x_token, std::string& defs) {
    const uint32_t chunk = detail::gpu_traits(w.fmt).chunk, tk = detail::gemm_step(chunk, coop);
    if (rows_e % gm || w.cols % tk || tk % chunk || need(gm, tk) > e.info.max_shared_memory || o_gu % 16) return false;
    defs = detail::moe_gemm_defines(w.fmt, w.scale_enc, gm, wg_of(gm), tk, cdefs, top_k, m.shared, rows_e, x_token,
                                    slot_defines(m));
    return true;
  };
  std::string dgu, ddn;
  {
    detail::binding bt[3];
    mat_pc pt{}, pd{};
    bind_planes(e, m.gate_up.w, bt, pt, "moe");
    bind_planes(e, m.down.w, bt, pd, "moe");
    const bool ok = pt.fast && pd.fast && xb.residual % 16 == 0 && hb.residual % 16 == 0 && d % 4 == 0 &&
                    gemm_defs(m.gate_up.w, 2 * I, true, dgu) && gemm_defs(m.down.w, d, false, ddn);
    if (ok) {
      const detail::bound gb = e.bind(guv, guv.bytes);
      const uint32_t nbg = m.slots ? 9 : 7;
      auto run_gemm = [&](const gpu_matrix& w, const std::string& defs, const detail::bound& in,
                          const detail::bound& outb, uint64_t rows_e) {
        detail::binding b[9];
        mat_pc pc{};
        bind_planes(e, w, b, pc, "moe");
        b[3] = in.b, b[4] = outb.b, b[5] = tb.b, b[6] = lb.b, b[7] = tb.b;
        pc.n = n, pc.xoff = in.residual / 4, pc.x_stride = lb.residual / 4, pc.yoff = outb.residual / 4,
        pc.pad = uint32_t(E);
        if (m.slots) b[8] = sb.b, pc.pad = sb.residual / 4;
        // routed tiles, then the shared expert's tiles of 16 pairs (gemm.comp's MOE_GEMM grid)
        const uint64_t nrb = rows_e / gm;
        e.grid(uint64_t(E) * nrb + (m.shared ? nrb * ceil_div(uint64_t(n), detail::moe_gemm_pairs) : 0), gx, gy);
        detail::dispatch(c.impl(), e.pipe("gemm.comp", defs, wg_of(gm), nbg, sizeof pc),
                         std::span<const detail::binding>(b, nbg), &pc, sizeof pc, gx, gy);
      };
      run_gemm(m.gate_up.w, dgu, xb, gb, 2 * I);  // gu [n·S, 2I]
      {                                            // h = silu(min(g, L)) · clamp(u) · w
        const uint32_t pc[5] = {uint32_t(I), gb.residual / 4, hb.residual / 4, wb.residual / 4, n};
        const detail::binding b[3] = {gb.b, wb.b, hb.b};
        e.grid(ceil_div(uint64_t(n) * S * I, detail::op_env::wg), gx, gy);
        const std::string defs = detail::def_u("MOE_TOPK", top_k) + "#define MOE_SHARED " +
                                 (m.shared ? "1" : "0") + "\n" + detail::def_f("MOE_LIMIT", limit);
        detail::dispatch(c.impl(), e.pipe("moe_act.comp", defs, detail::op_env::wg, 3, sizeof pc), b, pc, sizeof pc,
                         gx, gy);
      }
      run_gemm(m.down.w, ddn, hb, yb, d);  // y [n·S, d]
      moe_sum(e, c, m, n, top_k, yv, ids, out, slot_map);
      return true;
    }
  }
  // 2. gate/up + SwiGLU · weight → h, 3. down → y [n·S, d]: one row per team, the pairs in tiles of 8
  auto run_rows = [&](const gpu_matrix& w, const char* shader, uint64_t rows_e, const detail::bound& in,
                      const detail::bound& outb, const detail::binding& b7, uint32_t y_stride, uint64_t x_len) {
    detail::binding b[9];
    mat_pc pc{};
    bind_planes(e, w, b, pc, "moe");
    const uint32_t rpw = rows_per_wg(rows_e, e.teams);
    b[3] = in.b, b[4] = outb.b, b[5] = tb.b, b[6] = lb.b, b[7] = b7;
    pc.n = n, pc.xoff = in.residual / 4, pc.x_stride = lb.residual / 4, pc.yoff = outb.residual / 4,
    pc.y_stride = y_stride, pc.pad = uint32_t(E);
    if (m.slots) b[8] = sb.b, pc.pad = sb.residual / 4;
    const bool fast = pc.fast && pc.xoff % 4 == 0 && x_len % 4 == 0;
    e.grid(ne * (rows_e / rpw), gx, gy);
    detail::dispatch(c.impl(),
                     e.pipe(shader,
                            moe_defines(e, w, rpw, top_k, m, limit) + nb_def + "#define MOE_FAST " +
                                (fast ? "1" : "0") + "\n",
                            e.lanes * e.teams, nb, sizeof pc),
                     std::span<const detail::binding>(b, nb), &pc, sizeof pc, gx, gy);
  };
  run_rows(m.gate_up.w, "moe_up_g.comp", I, xb, hb, wb.b, wb.residual / 4, d);
  run_rows(m.down.w, "moe_down_g.comp", d, hb, yb, tb.b, 0, I);
  // 4. each token's slots in ascending expert id → out
  moe_sum(e, c, m, n, top_k, yv, ids, out, slot_map);
  return true;
}
}  // namespace

bool kernels::moe_runs_tc(const gpu_moe& m, uint32_t n, uint32_t top_k, view h) const {
  const detail::op_env e = detail::op_env_of(*p_);
  return n >= 2 && tc_subgroups(e, m, detail::tuning_of(*p_).moe_tiles) != 0 &&
         tc_layout(m, n, top_k).end <= h.bytes && h.offset % 16 == 0;
}

bool kernels::moe_runs_i8_tc(const gpu_moe& m, uint32_t n, uint32_t top_k, view h) const {
  return has_i8(m.gate_up.w.fmt) && has_i8(m.down.w.fmt) &&
         plan_i8tc_layer(detail::op_env_of(*p_), detail::tuning_of(*p_), m, n, top_k, h).tc != 0;
}

uint32_t kernels::compile_moe_i8_tc_variants() const {
  const detail::op_env e = detail::op_env_of(*p_);
  std::string common = e.common;
  auto set = [&](const std::string& name, const std::string& v) {
    const size_t a = common.find("#define " + name + " "), b = common.find('\n', a);
    if (a == std::string::npos) throw gpu_error("compile_moe_i8_tc_variants: no " + name + " in the preamble");
    common.replace(a, b - a, "#define " + name + " " + v);
  };
  set("LANES", "32"), set("REDUCE_SUBGROUP", "1"), set("HAS_STORAGE8", "1");
  device_info big = e.info;
  big.max_shared_memory = 48 * 1024;  // the H200's
  const detail::op_env e32{e.dev, big, common, 32, 4, e.tables};
  const device_options& o = e.dev.options();
  uint32_t n = 0;
  // V4-Flash's gate/up (4 blocks per step) and down, the cached layer's, and the toys' narrow shapes (1, 2 blocks)
  struct shape {
    uint64_t rows_e, cols;
    bool slots;
  };
  for (const format f : {format::q4tp, format::q2tp})
    for (const shape& sh : {shape{4096, 4096, false}, shape{4096, 2048, false}, shape{4096, 4096, true},
                            shape{4096, 2048, true}, shape{64, 64, false}, shape{64, 32, false}}) {
      const i8tc_split sp = plan_i8tc(e32, 1, f, sh.rows_e, sh.cols, 0);
      if (!sp.sg) throw gpu_error("compile_moe_i8_tc_variants: no split for " + std::to_string(sh.rows_e) + " x " +
                                  std::to_string(sh.cols));
      const std::string sd = sh.slots ? std::string("#define MOE_SLOTS 12\n") + detail::def_u("MOE_E", 256) : "";
      const std::vector<uint32_t> spv = detail::compile_glsl(
          o.shader_dir, "moe_i8_tc.comp", common + i8tc_defines(1, sp, 6, true, sd, sh.rows_e, f, scale_encoding::none),
          o.optimize_spirv);
      // validated too: glslang 11 once folded the product's int → float conversion into an invalid
      // OpSpecConstantOp, which the NVIDIA driver crashed on
      spvtools::SpirvTools tools(SPV_ENV_VULKAN_1_2);
      std::string log;
      tools.SetMessageConsumer([&](spv_message_level_t, const char*, const spv_position_t& p, const char* m) {
        log += "word " + std::to_string(p.index) + ": " + m + "\n";
      });
      if (!tools.Validate(spv))
        throw gpu_error("moe_i8_tc.comp (" + std::string(format_name(f)) + "): invalid SPIR-V: " + log);
      ++n;
    }
  return n;
}

bool kernels::moe_prepare(commands& c, const gpu_moe& m, view x, uint32_t top_k, view h) {
  if (m.experts == 0 || !m.gate_up.w.data || !m.down.w.data) throw usage_error("moe_prepare: empty layer");
  if (top_k == 0 || top_k > route_max_k)
    throw usage_error("moe_prepare: top_k must be in [1, " + std::to_string(route_max_k) + "]");
  const rows_i8_plan pl = plan_rows_i8(*p_, detail::op_env_of(*p_), m, top_k, h);
  if (!pl.ok) return false;
  detail::need_view(x, m.dim * 4, "moe_prepare", "x");
  quantize_act(c, m.gate_up.w.fmt, x, 1, m.dim, pl.xqv);
  return true;
}

void kernels::moe(commands& c, const gpu_moe& m, view x, uint32_t n, view ids, view weights, uint32_t top_k,
                  float limit, view h, view out, act_precision act, view slot_map, const moe_extras& ex) {
  if (m.experts == 0 || !m.gate_up.w.data || !m.down.w.data) throw usage_error("moe: empty layer");
  if (m.slots > 0 && !slot_map)
    throw usage_error("moe: the layer is an expert cache of " + std::to_string(m.slots) + " slots: pass its slot_map");
  if (m.slots == 0 && slot_map) throw usage_error("moe: a slot_map was given for a fully resident layer");
  const uint64_t stacked = uint64_t(m.slots ? m.slots : m.experts) + (m.shared ? 1 : 0);
  if (m.down.count != stacked || m.gate_up.count != 2 * stacked)
    throw usage_error("moe: the stacked matrices do not hold the layer's " + std::to_string(stacked) + " experts");
  if (m.slots) detail::need_view(slot_map, uint64_t(m.experts) * 4, "moe", "slot_map");
  if (top_k == 0 || top_k > route_max_k)
    throw usage_error("moe: top_k must be in [1, " + std::to_string(route_max_k) + "]");
  if (!(limit > 0.0f)) throw usage_error("moe: limit must be > 0 (moe.hpp clamps always)");
  if (n == 0) return;
  const detail::op_env e = detail::op_env_of(*p_);
  const uint64_t d = m.dim, I = m.inter, E = m.experts, pairs = uint64_t(n) * top_k;
  const uint64_t slots = uint64_t(n) * (top_k + (m.shared ? 1 : 0));  // (token, slot) pairs incl. the shared one
  if (uint64_t(n) * (top_k + 1) * std::max(d, I) > 0xFFFFFFFFull / 4) throw usage_error("moe: too many tokens");
  detail::need_view(x, n * d * 4, "moe", "x");
  detail::need_view(ids, pairs * 4, "moe", "ids");
  detail::need_view(weights, pairs * 4, "moe", "weights");
  detail::need_view(h, slots * I * 4, "moe", "h");
  detail::need_view(out, n * d * 4, "moe", "out");
  if (ex.add) detail::need_view(ex.add, n * d * 4, "moe", "extras.add");
  if (act == act_precision::i8 && n == 1 &&
      moe_rows_i8(*this, *p_, e, c, m, x, ids, weights, top_k, limit, h, out, slot_map, ex))
    return;
  if (ex.prepared) throw usage_error("moe: extras.prepared, but this call does not take the batch-1 int8 path");
  // Other paths: the side work first (its stages separated by barriers), the added vector last.
  if (ex.side)
    for (uint32_t s = 0; s < moe_stages; ++s) ex.side(s);
  if (n >= 2 && ((act == act_precision::i8 &&
                  moe_grouped_i8(*this, *p_, e, c, m, x, n, ids, weights, top_k, limit, h, out, slot_map)) ||
                 (act == act_precision::f32 && moe_grouped_tc(e, c, m, x, n, ids, weights, top_k, limit, h, out,
                                                              slot_map, detail::tuning_of(*p_).moe_tiles)) ||
                 moe_grouped(e, c, m, x, n, ids, weights, top_k, limit, h, out, slot_map))) {
    if (ex.add) add(c, ex.add, out, n * d);
    return;
  }
  const detail::bound ib = e.bind(ids, pairs * 4), wb = e.bind(weights, pairs * 4),
                      tb = e.bind(e.tables, e.tables.size());
  // cached layers: the slot map at binding 8, its offset in pc.pad (the routed count becomes the define MOE_E)
  const detail::bound sb = m.slots ? e.bind(slot_map, E * 4) : detail::bound{};
  const uint32_t nb = m.slots ? 9 : 8;
  // phase 1: gate/up + SwiGLU → h
  std::string sub_def;  // lanes per chunk of the matrix at hand (common/moe.glsl MOE_SUB)
  {
    const gpu_matrix& w = m.gate_up.w;
    sub_def = "#define MOE_SUB " + std::to_string(detail::f32_sub(*p_, w.fmt)) + "\n";
    detail::binding b[9];
    mat_pc pc{};
    bind_planes(e, w, b, pc, "moe");
    const uint32_t rpw = rows_per_wg(I, e.teams);
    const detail::bound xb = e.bind(x, n * d * 4), hb = e.bind(h, slots * I * 4);
    b[3] = xb.b, b[4] = hb.b, b[5] = tb.b, b[6] = ib.b, b[7] = wb.b;
    pc.n = n, pc.xoff = xb.residual / 4, pc.x_stride = ib.residual / 4, pc.yoff = hb.residual / 4,
    pc.y_stride = wb.residual / 4, pc.pad = uint32_t(E);
    if (m.slots) b[8] = sb.b, pc.pad = sb.residual / 4;  // E is the define MOE_E then
    uint32_t gx, gy;
    e.grid(slots * (I / rpw), gx, gy);
    detail::dispatch(
        c.impl(), e.pipe("moe_up.comp", moe_defines(e, w, rpw, top_k, m, limit) + sub_def, e.lanes * e.teams, nb, sizeof pc),
        std::span<const detail::binding>(b, nb), &pc, sizeof pc, gx, gy);
  }
  // phase 2: down + the weighted sum in ascending expert id → out
  {
    const gpu_matrix& w = m.down.w;
    sub_def = "#define MOE_SUB " + std::to_string(detail::f32_sub(*p_, w.fmt)) + "\n";
    detail::binding b[9];
    mat_pc pc{};
    bind_planes(e, w, b, pc, "moe");
    const uint32_t rpw = rows_per_wg(d, e.teams);
    const detail::bound hb = e.bind(h, slots * I * 4), ob = e.bind(out, n * d * 4);
    b[3] = hb.b, b[4] = ob.b, b[5] = tb.b, b[6] = ib.b, b[7] = wb.b;
    pc.n = n, pc.xoff = hb.residual / 4, pc.x_stride = ib.residual / 4, pc.yoff = ob.residual / 4, pc.pad = uint32_t(E);
    if (m.slots) b[8] = sb.b, pc.pad = sb.residual / 4;
    uint32_t gx, gy;
    e.grid(uint64_t(n) * (d / rpw), gx, gy);
    detail::dispatch(
        c.impl(), e.pipe("moe_down.comp", moe_defines(e, w, rpw, top_k, m, limit) + sub_def, e.lanes * e.teams, nb, sizeof pc),
        std::span<const detail::binding>(b, nb), &pc, sizeof pc, gx, gy);
  }
  if (ex.add) add(c, ex.add, out, n * d);
}

}  // namespace cmfx::gpu
