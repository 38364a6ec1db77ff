// Host side of the expert-batched MoE: kernels::moe and the dispatches of its f32 and f16-tile paths (two passes, the
// expert-grouped tiles, moe_tc.comp), and the steps every path shares (moe_parts: the weighted sum, the pair lists,
// the SwiGLU quantisation), over the stacked experts that moe_upload.cpp puts on the device. The int8-activation
// paths (batch-1 rows, grouped int8, int8 tensor cores) are in kernels_moe_i8.cpp.
#include <bit>
#include <cstring>

#include "cmfx/formats/format_list.hpp"
#include "cmfx/kernels/moe.hpp"
#include "formats_gpu.hpp"
#include "kernels_moe_parts.hpp"

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

namespace moe_parts {

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
             view out, view slot_map, view add, bool ignore_slots) {
  const uint64_t d = m.dim, S = top_k + (m.shared ? 1 : 0);
  const uint32_t slots = ignore_slots ? 0 : m.slots;
  const detail::bound yb = e.bind(y, n * S * d * 4), ib = e.bind(ids, uint64_t(n) * top_k * 4),
                      ob = e.bind(out, n * d * 4);
  detail::bound sb{}, ab{};
  if (slots) sb = e.bind(slot_map, uint64_t(m.experts) * 4);
  if (add) ab = e.bind(add, n * d * 4);
  const uint32_t pc[8] = {uint32_t(d), yb.residual / 4, ob.residual / 4, ib.residual / 4, n, sb.residual / 4,
                          ab.residual / 4, 0};
  // binding 3 (the slot map) is declared only for a cached layer: any binding fills its place before `add`
  const detail::binding b[5] = {yb.b, ib.b, ob.b, slots ? sb.b : yb.b, ab.b};
  const uint32_t nb = add ? 5 : slots ? 4 : 3;
  uint32_t gx, gy;
  e.grid(ceil_div(n * d, detail::op_env::wg), gx, gy);
  const std::string defs = detail::def_u("MOE_TOPK", top_k) + "#define MOE_SHARED " + (m.shared ? "1" : "0") + "\n" +
                           detail::def_u("MOE_E", m.experts) +
                           (slots ? "#define MOE_SLOTS " + std::to_string(slots) + "\n" : std::string()) +
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

/// The uint32 words of the expert-grouped path's pair lists: counts [E + shared], lists [E + shared][n · top_k].
uint64_t grouped_list_words(const gpu_moe& m, uint32_t n, uint32_t top_k) {
  return (m.experts + (m.shared ? 1ull : 0ull)) * (uint64_t(n) * top_k + 1);
}

/// The (token, slot) pairs of every expert (shaders/moe_group.comp): counts [E + shared], then the lists, at lb.
void pair_lists(const detail::op_env& e, commands& c, const gpu_moe& m, uint32_t n, uint32_t top_k,
                const detail::bound& ib, const detail::bound& lb, const detail::bound* pass, bool pass_shared) {
  const uint32_t pc[6] = {n, ib.residual / 4, lb.residual / 4, uint32_t(m.experts), pass ? pass->residual / 4 : 0,
                          pass_shared ? 1u : 0u};
  const detail::binding b[3] = {ib.b, lb.b, pass ? pass->b : lb.b};
  const uint32_t nb = pass ? 3 : 2;
  const std::string defs = detail::def_u("MOE_TOPK", top_k) + "#define MOE_SHARED " + (m.shared ? "1" : "0") +
                           "\n" + (pass ? "#define MOE_PASS " + std::to_string(m.slots) + "\n" : std::string());
  uint32_t gx, gy;
  e.grid(m.experts + (m.shared ? 1 : 0), gx, gy);
  detail::dispatch(c.impl(), e.pipe("moe_group.comp", defs, detail::op_env::wg, nb, sizeof pc),
                   std::span<const detail::binding>(b, nb), pc, sizeof pc, gx, gy);
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
grouped_scratch grouped_layout(const gpu_moe& m, uint32_t n, uint32_t top_k) {
  const uint64_t d = m.dim, I = m.inter, S = top_k + (m.shared ? 1 : 0);
  grouped_scratch g;
  g.o_gu = (n * S * I * 4 + 15) / 16 * 16, g.o_y = (g.o_gu + n * S * 2 * I * 4 + 15) / 16 * 16,
  g.o_l = (g.o_y + n * S * d * 4 + 15) / 16 * 16;
  g.l_bytes = grouped_list_words(m, n, top_k) * 4;
  return g;
}
}  // namespace moe_parts

using namespace moe_parts;

namespace {

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
  if (ex.pass) {  // before the batch-1 path, which would sum (and NaN) instead of leaving rows for moe_pass_sum
    if (!m.slots || n < 2 || act != act_precision::i8 || ex.add || ex.side || ex.prepared)
      throw usage_error("moe: a pass (moe_extras::pass) needs an expert cache (slots), n >= 2, int8 activations and "
                        "no other extras");
    if (!moe_grouped_i8(*this, *p_, e, c, m, x, n, ids, weights, top_k, limit, h, out, slot_map, &ex))
      throw usage_error("moe: a pass (moe_extras::pass) needs the expert-grouped int8 path, which these formats, "
                        "shapes or this device do not take");
    return;
  }
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
