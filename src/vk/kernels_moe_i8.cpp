// Host side of kernels::moe's int8-activation paths (act_precision::i8, devices with integer dot products): batch 1
// through the row kernel (matvec_rows.comp MOE_ROWS, with its SwiGLU and sum tails), the expert-grouped chunks
// (moe_rows_g8.comp) and their int8 tensor-core variant (moe_i8_tc.comp), with moe_prepare and the tensor-core
// compile check. The steps they share with the other paths: kernels_moe_parts.hpp.
#include <spirv-tools/libspirv.hpp>

#include "cmfx/formats/format_list.hpp"
#include "cmfx/kernels/moe.hpp"
#include "formats_gpu.hpp"
#include "kernels_moe_parts.hpp"

namespace cmfx::gpu {

using detail::bind_planes;
using detail::mat_pc;

namespace moe_parts {

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
                                   I, r.dgu, r.rgu) ||
      !detail::rows_kernel_defines(p, m.down.w.fmt, m.down.w.scale_enc, S * d, I, true, pd.res0 % 16 == 0, d,
                                   r.ddn, r.rdn))
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
    return "#define MOE_TAIL 1\n" + detail::def_f("MOE_LIMIT", limit) + e.act_wide_defines() +
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
grouped_i8_plan plan_grouped_i8(const kernels& k, const kernels::impl& p, const detail::op_env& e, const gpu_moe& m,
                                uint32_t n, uint32_t top_k, view h) {
  grouped_i8_plan g;
  const gpu_matrix &wgu = m.gate_up.w, &wdn = m.down.w;
  if (!k.has_i8(wgu.fmt) || !k.has_i8(wdn.fmt) || !h) return g;
  const uint64_t d = m.dim, I = m.inter, S = top_k + (m.shared ? 1 : 0), np = uint64_t(n) * S;
  // The work split, from H200 sweeps (256 experts of 4096 × 2048, 512 tokens, ms per layer, run-to-run noise ~2 %
  // within one machine start): 8 rows per subgroup, tiles of 4 pairs, 1 chunk in flight, the tile's sums by a
  // butterfly of shuffles — q2tp 3.57, q4tp 3.68 (twenty-eighth session, docs/PERF.md; the twelfth session's 4 rows
  // and 2 chunks: 3.99 / 4.12; 4 rows and 1 chunk 3.74 / 3.84; f16 tiles 6.89; tiles of 8 pairs: 3.91 / 3.97, of 2:
  // 4.42 / 4.39, measured with the bit-planes formed once per row and chunk, which timed as built); MXFP4 (its
  // E2M1 table lookups once per row and chunk, chunk_operands) 4 rows, 1 chunk: 6.28 (2 rows: 6.95; f16 tiles
  // 5.31). Fewer rows per subgroup where a workgroup's rows must divide 2·I and d.
  const matvec_tuning& tu = detail::tuning_of(p);
  const bool mx = wgu.fmt == format::mxfp4;
  g.rpt = tu.moe_rows_per_team ? tu.moe_rows_per_team : mx ? 4 : 8;
  while (g.rpt > 1 && ((2 * I) % (e.teams * g.rpt) || d % (e.teams * g.rpt))) g.rpt /= 2;
  g.rpw = e.teams * g.rpt;
  if (d % 32 || I % 32 || (2 * I) % g.rpw || d % g.rpw) return g;
  g.gs = grouped_layout(m, n, top_k);
  g.hq_bytes = kernels::act_q8_bytes(I, uint32_t(np)), g.o_xq = (g.hq_bytes + 15) / 16 * 16,
  g.xq_bytes = kernels::act_q8_bytes(d, n);
  if (g.o_xq + g.xq_bytes > g.gs.o_gu || g.gs.o_l + g.gs.l_bytes > h.bytes || h.offset % 16) return g;
  // the int8 parts' bindings must start on 16 bytes
  if (e.bind(view(*h.buf, h.offset, g.hq_bytes), g.hq_bytes).residual % 16 ||
      e.bind(view(*h.buf, h.offset + g.o_xq, g.xq_bytes), g.xq_bytes).residual % 16)
    return g;
  g.ok = planes_fast(e, m);
  return g;
}

bool moe_grouped_i8(kernels& k, const kernels::impl& p, const detail::op_env& e, commands& c, const gpu_moe& m, view x,
                    uint32_t n, view ids, view weights, uint32_t top_k, float limit, view h, view out,
                    view slot_map, const moe_extras* pass) {
  const grouped_i8_plan g = plan_grouped_i8(k, p, e, m, n, top_k, h);
  if (!g.ok) return false;
  const gpu_matrix &wgu = m.gate_up.w, &wdn = m.down.w;
  const uint64_t d = m.dim, I = m.inter, E = m.experts, S = top_k + (m.shared ? 1 : 0), np = uint64_t(n) * S;
  const matvec_tuning& tu = detail::tuning_of(p);
  const uint32_t rpt = g.rpt, rpw = g.rpw;
  const grouped_scratch gs = g.gs;
  const uint64_t hq_bytes = g.hq_bytes, o_xq = g.o_xq, xq_bytes = g.xq_bytes;
  auto part = [&](uint64_t off, uint64_t bytes) { return view(*h.buf, h.offset + off, bytes); };
  const view hqv = part(0, hq_bytes), xqv = part(o_xq, xq_bytes), guv = part(gs.o_gu, np * 2 * I * 4),
             yv = part(gs.o_y, np * d * 4), lv = part(gs.o_l, gs.l_bytes);
  const detail::bound ib = e.bind(ids, uint64_t(n) * top_k * 4), wb = e.bind(weights, uint64_t(n) * top_k * 4),
                      tb = e.bind(e.tables, e.tables.size()), lb = e.bind(lv, gs.l_bytes),
                      hqb = e.bind(hqv, hq_bytes), xqb = e.bind(xqv, xq_bytes), gub = e.bind(guv, guv.bytes),
                      yb = e.bind(yv, yv.bytes);
  const detail::bound sb = m.slots ? e.bind(slot_map, E * 4) : detail::bound{};
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
  if (pass) {
    pair_lists(e, c, m, n, top_k, ib, lb, &sb, pass->pass_shared);
  } else {
    pair_lists(e, c, m, n, top_k, ib, lb);
  }
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
  if (!pass) moe_sum(e, c, m, n, top_k, yv, ids, out, slot_map);
  return true;
}
}  // namespace moe_parts

using namespace moe_parts;

void kernels::moe_pass_sum(commands& c, const gpu_moe& m, uint32_t n, view ids, uint32_t top_k, view h, view out) {
  if (!m.slots) throw usage_error("moe_pass_sum: the layer is not an expert cache (its passes need slots)");
  if (top_k == 0 || top_k > route_max_k)
    throw usage_error("moe_pass_sum: top_k must be in [1, " + std::to_string(route_max_k) + "]");
  if (n == 0) return;
  const uint64_t d = m.dim, np = uint64_t(n) * (top_k + (m.shared ? 1 : 0));
  detail::need_view(ids, uint64_t(n) * top_k * 4, "moe_pass_sum", "ids");
  detail::need_view(out, uint64_t(n) * d * 4, "moe_pass_sum", "out");
  const grouped_scratch gs = grouped_layout(m, n, top_k);
  if (!h || gs.o_y + np * d * 4 > h.bytes)
    throw usage_error("moe_pass_sum: h is smaller than the passes' scratch (moe_scratch_floats)");
  const detail::op_env e = detail::op_env_of(*p_);
  moe_sum(e, c, m, n, top_k, view(*h.buf, h.offset + gs.o_y, np * d * 4), ids, out, view(), {}, true);
}

bool kernels::moe_takes_pass(const gpu_moe& m, uint32_t n, uint32_t top_k, view h) const {
  return m.slots > 0 && n >= 2 && plan_grouped_i8(*this, *p_, detail::op_env_of(*p_), m, n, top_k, h).ok;
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

}  // namespace cmfx::gpu
