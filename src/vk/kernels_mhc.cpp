// Host side of the mHC kernels (shaders/mhc_block.comp, mhc_finish.comp). A sublayer boundary is two dispatches:
// hc_post (expansion of the previous sublayer's output + the partial mixes of the next sublayer's projection)
// and hc_pre_finish (Sinkhorn coefficients + collapse); the first mix of a chain is hc_mix.
#include "cmfx/ops/mhc.hpp"
#include "kernels_ops.hpp"

namespace cmfx::gpu {

namespace {

// Columns of d per mhc_block workgroup (HC_BLOCK, also its size).
constexpr uint32_t block = 256;
// mhc_block.comp's tail runs common/mhc_finish.glsl with HC_COLS and the wg_sum split of mhc_finish.comp's workgroup
static_assert(block == detail::op_env::wg, "the fused finish must see mhc_finish.comp's workgroup shape");

uint32_t nblk(const kernels::hc_shape& sh) { return (sh.d + block - 1) / block; }
uint32_t acc_bytes(const detail::op_env& e) { return e.info.float64 ? 8 : 4; }

void check(const kernels::hc_shape& sh, const char* op) {
  if (sh.hc == 0 || sh.hc > hc_max)
    throw usage_error(std::string(op) + ": hc must be in [1, " + std::to_string(hc_max) + "]");
  if (sh.d == 0) throw usage_error(std::string(op) + ": d must be > 0");
}

/// Workgroups a mix's rows are split over per column block (mhc_block.comp HC_RSPLIT): V4's 25 rows in 5 groups.
constexpr uint32_t row_groups = 5;

/// hc_rows: the mix rows + 1 (the sum of squares), 1 without a mix — a compile-time constant of the shader, so
/// that its per-row accumulators live in registers; rsplit: the row groups.
std::string defines(uint32_t hc, bool post, uint32_t hc_rows, uint32_t rsplit) {
  return detail::def_u("HC_MAX", hc_max) + detail::def_u("HC_N", hc) + detail::def_u("HC_BLOCK", block) + detail::def_u("HC_ROWS", hc_rows) +
         detail::def_u("HC_RSPLIT", rsplit) + detail::def_u("HC_RPG", (hc_rows + rsplit - 1) / rsplit) +
         "#define HC_POST " + (post ? "1" : "0") + "\n";
}

struct block_pc {
  uint32_t tokens, hc, d, nblk, rows, has_mix, xoff, ooff, coff, outoff, fnoff, poff, cstride;
  uint32_t cntoff, iters, boff, soff, yoff, nwoff;  // the tail (HC_TAIL)
  uint32_t aoff;                                    // o_add (HC_ADD)
  float norm_eps, hc_eps, head_scale, rms_eps;
  uint32_t foldoff, fstride, cooff, qoff;           // the tail's fold (HC_FOLD 1), coefficient output (HC_COUT), y_q8 (HC_Q8)
};
struct finish_pc {
  uint32_t tokens, hc, d, nblk, rows, iters, xoff, poff, boff, soff, coff, yoff;
  float norm_eps, hc_eps, head_scale;
  uint32_t cstride;
  float rms_eps;  // with a norm weight: the RMSNorm of y (its eps: hc_shape::norm_eps)
  uint32_t nwoff, pad0, pad1;
};
static_assert(sizeof(block_pc) == 112 && sizeof(finish_pc) == 80);

/// Bytes of a fold operand: `tokens` rows of fold_stride floats, the last one hc floats.
uint64_t fold_bytes(const kernels::hc_shape& sh, uint32_t tokens, uint32_t fold_stride) {
  return (uint64_t(tokens - 1) * fold_stride + sh.hc) * 4;
}

/// Whether the Sinkhorn of hc_pre_finish runs in one subgroup (every lane of it a C entry: hc·hc ≤ the smallest
/// subgroup size the device may use, with subgroup shuffles).
bool sinkhorn_in_subgroup(const detail::op_env& e, const kernels::hc_shape& sh) {
  const uint32_t min_sg = e.info.min_subgroup_size ? e.info.min_subgroup_size : e.info.subgroup_size;
  return e.info.subgroup_arithmetic && e.info.subgroup_shuffle && sh.hc * sh.hc <= min_sg;
}

/// The defines of common/mhc_finish.glsl (mhc_finish.comp and mhc_block.comp's tail) for a workgroup of wg.
std::string finish_defines(const detail::op_env& e, const kernels::hc_shape& sh, uint32_t wg, bool head, bool norm,
                           int fold_mode, int part) {
  return detail::def_u("HC_MAX", hc_max) + detail::def_u("HC_N", sh.hc) + detail::def_u("HC_COLS", (sh.d + wg - 1) / wg) +
         detail::def_u("HC_NBLK", nblk(sh)) +
         "#define HC_HEAD " + (head ? "1" : "0") + "\n#define HC_NORM " + (norm ? "1" : "0") + "\n#define HC_FOLD " +
         std::to_string(fold_mode) + "\n#define HC_SG " + (sinkhorn_in_subgroup(e, sh) ? "1" : "0") +
         "\n#define HC_PART " + std::to_string(part) + "\n";
}

/// hc_mix / hc_post (post), with a mix when fn is given; fin: + the finish of the mix in the last workgroup of each
/// token (HC_TAIL; needs the mix).
void run_block(detail::op_env e, commands& c, const kernels::hc_shape& sh, bool post, view X, view o, view coeff,
               view out, view fn, uint32_t rows, view partials, uint32_t tokens,
               const kernels::hc_finish_args* fin = nullptr, view o_add = {}, uint32_t tok = 1) {
  if (fin) tok = 1;  // the tail counts one token per workgroup
  tok = std::max<uint32_t>(1, std::min(tok, tokens));
  const uint64_t xbytes = uint64_t(tokens) * sh.hc * sh.d * 4;
  const uint64_t pbytes = uint64_t(tokens) * nblk(sh) * (rows + 1) * acc_bytes(e);
  const uint64_t cbytes = uint64_t(tokens) * kernels::hc_coeff_floats(sh.hc) * 4;
  const char* op = fin ? "hc_post_finish" : post ? "hc_post" : "hc_mix";
  detail::need_view(X, xbytes, op, "X");
  if (o_add && !post) throw usage_error(std::string(op) + ": o_add without o");
  if (post) {
    detail::need_view(o, uint64_t(tokens) * sh.d * 4, op, "o");
    if (o_add) detail::need_view(o_add, uint64_t(tokens) * sh.d * 4, op, "o_add");
    detail::need_view(coeff, cbytes, op, "coeff");
    detail::need_view(out, xbytes, op, "out");
  }
  const bool mix = bool(fn);
  if (mix) {
    if (rows == 0 || rows > (2 + hc_max) * hc_max) throw usage_error(std::string(op) + ": mix rows out of range");
    detail::need_view(fn, uint64_t(rows) * sh.hc * sh.d * 4, op, "fn");
    detail::need_view(partials, pbytes, op, "partials");
  }
  if (fin) {
    if (!mix) throw usage_error("hc_post_finish: the next mix (fn) is missing");
    const uint32_t want = fin->head ? sh.hc : (2 + sh.hc) * sh.hc;
    if (rows != want)
      throw usage_error("hc_post_finish: " + std::to_string(rows) + " mix rows, the finish needs " + std::to_string(want));
    detail::need_view(coeff, cbytes, op, "coeff");
    detail::need_view(fin->base, uint64_t(rows) * 4, op, "base");
    if (!fin->head) detail::need_view(fin->scale, 12, op, "scale");
    detail::need_view(fin->y, uint64_t(tokens) * sh.d * 4, op, "y");
    if (fin->norm) detail::need_view(fin->norm, uint64_t(sh.d) * 4, op, "norm");
    if (fin->coeff_out) detail::need_view(fin->coeff_out, cbytes, op, "coeff_out");
    if (fin->fold) detail::need_view(fin->fold, fold_bytes(sh, tokens, fin->fold_stride), op, "fold");
  }
  const detail::bound xb = e.bind(X, xbytes), ob = e.bind(post ? o : view(), uint64_t(tokens) * sh.d * 4),
                      cb = e.bind(post || fin ? coeff : view(), cbytes), outb = e.bind(post ? out : view(), xbytes),
                      fb = e.bind(mix ? fn : view(), uint64_t(rows) * sh.hc * sh.d * 4),
                      pb = e.bind(mix ? partials : view(), pbytes);
  if (pb.residual % acc_bytes(e)) throw usage_error(std::string(op) + ": partials offset not a multiple of 8");
  block_pc pc{};
  pc.tokens = tokens, pc.hc = sh.hc, pc.d = sh.d, pc.nblk = nblk(sh), pc.rows = mix ? rows : 0;
  pc.has_mix = mix ? 1u : 0u, pc.xoff = xb.residual / 4, pc.ooff = ob.residual / 4, pc.coff = cb.residual / 4;
  pc.outoff = outb.residual / 4, pc.fnoff = fb.residual / 4, pc.poff = pb.residual / acc_bytes(e);
  pc.cstride = kernels::hc_coeff_floats(sh.hc);
  detail::binding b[14] = {xb.b, ob.b, cb.b, outb.b, fb.b, pb.b};
  uint32_t nbind = 6;
  const uint32_t rsplit = mix ? std::min(row_groups, rows + 1) : 1;
  std::string defs = defines(sh.hc, post, mix ? rows + 1 : 1, rsplit);
  if (tok > 1) defs += "#define HC_TOK " + std::to_string(tok) + "\n";  // (no u suffix: #if compares it)
  if (fin) {
    const detail::bound bb = e.bind(fin->base, uint64_t(rows) * 4), sb = e.bind(fin->head ? view() : fin->scale, 12),
                        yb = e.bind(fin->y, uint64_t(tokens) * sh.d * 4), nb = e.bind(fin->norm, uint64_t(sh.d) * 4),
                        kb = detail::bind_range(e.info, *e.counters, 0, detail::op_env::counter_slots * 4ull);
    b[6] = bb.b, b[7] = sb.b, b[8] = yb.b, b[9] = nb.b, b[10] = kb.b;
    nbind = 11;
    pc.cntoff = e.take_counters(tokens), pc.iters = sh.iters, pc.boff = bb.residual / 4, pc.soff = sb.residual / 4;
    pc.yoff = yb.residual / 4, pc.nwoff = nb.residual / 4;
    pc.norm_eps = sh.norm_eps, pc.hc_eps = sh.hc_eps, pc.head_scale = fin->head_scale, pc.rms_eps = sh.norm_eps;
    defs += "#define HC_TAIL 1\n" + finish_defines(e, sh, block, fin->head, bool(fin->norm), fin->fold ? 1 : 0,
                                                    fin->head || fin->sinkhorn ? 0 : 1);
  }
  if (o_add) {  // after the tail's bindings
    const detail::bound ab = e.bind(o_add, uint64_t(tokens) * sh.d * 4);
    b[nbind++] = ab.b;
    pc.aoff = ab.residual / 4;
    defs += "#define HC_ADD 1\n";
  }
  if (fin && fin->y_q8) {  // binding 12 (11: o_add or unused); HC_COUT takes 12 (usage_error in hc_post_finish)
    const detail::bound qb = e.bind(fin->y_q8, kernels::act_q8_bytes(sh.d, tokens));
    if (nbind == 11) b[nbind++] = e.bind(view(), 4).b;
    b[12] = qb.b;
    nbind = 13;
    pc.qoff = qb.residual / 4;
    defs += "#define HC_Q8 1\n" + act_target_defines(fin->y_q8_fmt);
  }
  if (fin && (fin->fold || fin->coeff_out)) {  // bindings 12 and 13 (11: o_add or unused)
    const uint64_t fbytes = fold_bytes(sh, tokens, fin->fold_stride);
    const detail::bound ob2 = e.bind(fin->coeff_out, cbytes), fdb = e.bind(fin->fold, fbytes);
    if (nbind == 11) b[nbind++] = e.bind(view(), 4).b;
    b[12] = ob2.b, b[13] = fdb.b;
    nbind = 14;
    pc.cooff = ob2.residual / 4, pc.foldoff = fdb.residual / 4, pc.fstride = fin->fold_stride;
    if (fin->coeff_out) defs += "#define HC_COUT 1\n";
  }
  uint32_t gx, gy;
  e.grid(uint64_t((tokens + tok - 1) / tok) * nblk(sh) * rsplit, gx, gy);
  detail::dispatch(c.impl(), e.pipe("mhc_block.comp", defs, block, nbind, sizeof pc),
                   std::span<const detail::binding>(b, nbind), &pc, sizeof pc, gx, gy);
}

/// Tokens per mhc_block.comp workgroup of a multi-token hc_mix / hc_post (HC_TOK): matvec_tuning::hc_tokens, else 8
/// (timed on the H200: a 512-token boundary 218 -> 170 us; docs/VULKAN.md "mHC blocks of several tokens").
uint32_t block_tokens(const kernels::impl& p) {
  const uint32_t t = detail::tuning_of(p).hc_tokens;
  return t ? std::min<uint32_t>(t, 64) : 8;
}

/// fold_mode: 0 none, 1 the collapse with the weights of `fold` (coefficients as usual), 2 the collapse alone.
/// part (mhc_finish.comp HC_PART): 0 everything, 1 all but the Sinkhorn, 2 the Sinkhorn alone (X, y unused).
void run_finish(detail::op_env e, commands& c, const kernels::hc_shape& sh, bool head, view partials, view X, view base,
                view scale, float head_scale, uint32_t tokens, view coeff, view y, view norm, int fold_mode = 0,
                view fold = {}, uint32_t fold_stride = 0, int part = 0) {
  const char* op = part == 2 ? "hc_sinkhorn" : fold_mode == 2 ? "hc_fold" : head ? "hc_head_finish" : "hc_pre_finish";
  const bool coeffs = fold_mode != 2;
  const uint32_t rows = head ? sh.hc : (2 + sh.hc) * sh.hc;
  const uint64_t xbytes = uint64_t(tokens) * sh.hc * sh.d * 4;
  const uint64_t pbytes = uint64_t(tokens) * nblk(sh) * (rows + 1) * acc_bytes(e);
  const uint64_t cbytes = uint64_t(tokens) * kernels::hc_coeff_floats(sh.hc) * 4;
  if (coeffs) {
    detail::need_view(partials, pbytes, op, "partials");
    detail::need_view(base, uint64_t(rows) * 4, op, "base");
    if (!head) detail::need_view(scale, 12, op, "scale");
    detail::need_view(coeff, cbytes, op, "coeff");
  }
  if (part == 2) X = y = coeff, norm = {};  // unread: bound to a valid buffer
  if (part != 2) {
    detail::need_view(X, xbytes, op, "X");
    detail::need_view(y, uint64_t(tokens) * sh.d * 4, op, "y");
  }
  if (norm) detail::need_view(norm, uint64_t(sh.d) * 4, op, "norm");
  const uint64_t fbytes = fold_mode ? fold_bytes(sh, tokens, fold_stride) : 0;
  if (fold_mode) {
    if (fold_stride < sh.hc && tokens > 1) throw usage_error(std::string(op) + ": fold_stride < hc");
    detail::need_view(fold, fbytes, op, "fold");
  }
  const detail::bound nb = e.bind(norm, uint64_t(sh.d) * 4), fdb = e.bind(fold_mode ? fold : view(), fbytes);
  const uint64_t xb_bytes = part == 2 ? 4 : xbytes, yb_bytes = part == 2 ? 4 : uint64_t(tokens) * sh.d * 4;
  const detail::bound pb = e.bind(coeffs ? partials : view(), pbytes), xb = e.bind(X, xb_bytes),
                      bb = e.bind(coeffs ? base : view(), uint64_t(rows) * 4),
                      sb = e.bind(head || !coeffs ? view() : scale, 12), cb = e.bind(coeffs ? coeff : view(), cbytes),
                      yb = e.bind(y, yb_bytes);
  if (pb.residual % acc_bytes(e)) throw usage_error(std::string(op) + ": partials offset not a multiple of 8");
  finish_pc pc{tokens,
               sh.hc,
               sh.d,
               nblk(sh),
               rows,
               sh.iters,
               xb.residual / 4,
               pb.residual / acc_bytes(e),
               bb.residual / 4,
               sb.residual / 4,
               cb.residual / 4,
               yb.residual / 4,
               sh.norm_eps,
               sh.hc_eps,
               head_scale,
               kernels::hc_coeff_floats(sh.hc),
               sh.norm_eps,
               nb.residual / 4,
               fdb.residual / 4,
               fold_stride};
  const detail::binding b[8] = {pb.b, xb.b, bb.b, sb.b, cb.b, yb.b, nb.b, fdb.b};
  const uint32_t wg = detail::op_env::wg;
  const std::string defs = finish_defines(e, sh, wg, head, bool(norm), fold_mode, part);
  const uint32_t nbind = fold_mode ? 8 : norm ? 7 : 6;
  uint32_t gx, gy;
  e.grid(tokens, gx, gy);
  detail::dispatch(c.impl(), e.pipe("mhc_finish.comp", defs, wg, nbind, sizeof pc),
                   std::span<const detail::binding>(b, nbind), &pc, sizeof pc, gx, gy);
}

}  // namespace

uint64_t kernels::hc_partials_bytes(const hc_shape& sh, uint32_t tokens, uint32_t mix_rows) const {
  return uint64_t(tokens) * nblk(sh) * (mix_rows + 1) * acc_bytes(detail::op_env_of(*p_));
}

void kernels::hc_mix(commands& c, const hc_shape& sh, view X, view fn, uint32_t mix_rows, uint32_t tokens,
                     view partials) {
  check(sh, "hc_mix");
  if (tokens == 0) return;
  if (!fn) throw usage_error("hc_mix: fn missing");
  run_block(detail::op_env_of(*p_), c, sh, false, X, view(), view(), view(), fn, mix_rows, partials, tokens, nullptr,
            view(), block_tokens(*p_));
}

void kernels::hc_pre_finish(commands& c, const hc_shape& sh, view partials, view X, view base, view scale,
                            uint32_t tokens, view coeff, view y, view norm, bool sinkhorn) {
  check(sh, "hc_pre_finish");
  if (tokens == 0) return;
  run_finish(detail::op_env_of(*p_), c, sh, false, partials, X, base, scale, 0.0f, tokens, coeff, y, norm, 0, {}, 0,
             sinkhorn ? 0 : 1);
}

void kernels::hc_sinkhorn(commands& c, const hc_shape& sh, view partials, view base, view scale, uint32_t tokens,
                          view coeff) {
  check(sh, "hc_sinkhorn");
  if (tokens == 0) return;
  run_finish(detail::op_env_of(*p_), c, sh, false, partials, view(), base, scale, 0.0f, tokens, coeff, view(), view(),
             0, {}, 0, 2);
}

void kernels::hc_pre_finish_fold(commands& c, const hc_shape& sh, view partials, view X, view base, view scale,
                                 uint32_t tokens, view coeff, view fold, uint32_t fold_stride, view y, view norm,
                                 bool sinkhorn) {
  check(sh, "hc_pre_finish_fold");
  if (tokens == 0) return;
  if (!fold) throw usage_error("hc_pre_finish_fold: fold missing");
  run_finish(detail::op_env_of(*p_), c, sh, false, partials, X, base, scale, 0.0f, tokens, coeff, y, norm, 1, fold,
             fold_stride, sinkhorn ? 0 : 1);
}

void kernels::hc_fold(commands& c, const hc_shape& sh, view X, view fold, uint32_t fold_stride, uint32_t tokens,
                      view y, view norm) {
  check(sh, "hc_fold");
  if (tokens == 0) return;
  if (!fold) throw usage_error("hc_fold: fold missing");
  run_finish(detail::op_env_of(*p_), c, sh, false, view(), X, view(), view(), 0.0f, tokens, view(), y, norm, 2, fold,
             fold_stride);
}

void kernels::hc_head_finish(commands& c, const hc_shape& sh, view partials, view X, view base, float scale,
                             uint32_t tokens, view coeff, view y, view norm) {
  check(sh, "hc_head_finish");
  if (tokens == 0) return;
  run_finish(detail::op_env_of(*p_), c, sh, true, partials, X, base, view(), scale, tokens, coeff, y, norm);
}

void kernels::hc_post(commands& c, const hc_shape& sh, view o, view X, view coeff, uint32_t tokens, view out,
                      view next_fn, uint32_t next_rows, view next_partials, view o_add) {
  check(sh, "hc_post");
  if (tokens == 0) return;
  if (out.buf == X.buf && out.offset < X.offset + X.bytes && X.offset < out.offset + out.bytes)
    throw usage_error("hc_post: out overlaps X");
  run_block(detail::op_env_of(*p_), c, sh, true, X, o, coeff, out, next_fn, next_rows, next_partials, tokens, nullptr,
            o_add, block_tokens(*p_));
}

void kernels::hc_post_finish(commands& c, const hc_shape& sh, view o, view X, view coeff, uint32_t tokens, view out,
                             view next_fn, uint32_t next_rows, view next_partials, const hc_finish_args& fin,
                             view o_add) {
  check(sh, "hc_post_finish");
  if (tokens == 0) return;
  const bool post = bool(o);
  if (post && out.buf == X.buf && out.offset < X.offset + X.bytes && X.offset < out.offset + out.bytes)
    throw usage_error("hc_post_finish: out overlaps X");
  const uint32_t want = fin.head ? sh.hc : (2 + sh.hc) * sh.hc;
  if (next_rows != want)
    throw usage_error("hc_post_finish: " + std::to_string(next_rows) + " mix rows, the finish needs " + std::to_string(want));
  if (fin.fold && fin.head) throw usage_error("hc_post_finish: a fold with the head's finish");
  // (hc_pre_finish_fold's rule: the fold must not be the coefficients the finish writes, so it writes elsewhere)
  if (fin.fold && !fin.coeff_out) throw usage_error("hc_post_finish: a fold needs coeff_out");
  if (fin.fold && fin.fold_stride < sh.hc && tokens > 1) throw usage_error("hc_post_finish: fold_stride < hc");
  const auto overlaps = [](view a, view b) {
    return a.buf == b.buf && a.offset < b.offset + b.bytes && b.offset < a.offset + a.bytes;
  };
  if (fin.coeff_out && overlaps(fin.coeff_out, coeff)) throw usage_error("hc_post_finish: coeff_out overlaps coeff");
  if (fin.coeff_out && fin.fold && overlaps(fin.coeff_out, fin.fold))
    throw usage_error("hc_post_finish: coeff_out overlaps fold");
  if (fin.y_q8) {
    if (!fin.norm || sh.d % 32) throw usage_error("hc_post_finish: y_q8 needs the norm and d a multiple of 32");
    if (fin.coeff_out) throw usage_error("hc_post_finish: y_q8 with coeff_out (no binding left)");
    if (!has_i8(fin.y_q8_fmt)) throw usage_error("hc_post_finish: y_q8: no int8-activation kernel for its format");
    detail::need_view(fin.y_q8, act_q8_bytes(sh.d, tokens), "hc_post_finish", "y_q8");
  }
  const detail::op_env e = detail::op_env_of(*p_);
  if (tokens > detail::op_env::counter_slots / 4) {  // more tokens than counters: the two dispatches
    if (c.in_concurrent())
      throw usage_error("hc_post_finish: " + std::to_string(tokens) +
                        " tokens are two dependent dispatches: not inside begin_concurrent");
    run_block(e, c, sh, post, X, o, coeff, out, next_fn, next_rows, next_partials, tokens, nullptr, o_add,
              block_tokens(*p_));
    c.barrier();
    run_finish(e, c, sh, fin.head, next_partials, post ? out : X, fin.base, fin.scale, fin.head_scale, tokens,
               fin.coeff_out ? fin.coeff_out : coeff, fin.y, fin.norm, fin.fold ? 1 : 0, fin.fold, fin.fold_stride,
               fin.head || fin.sinkhorn ? 0 : 1);
    if (fin.y_q8) {
      c.barrier();
      quantize_act(c, fin.y_q8_fmt, fin.y, tokens, sh.d, fin.y_q8);
    }
    return;
  }
  run_block(e, c, sh, post, X, o, coeff, out, next_fn, next_rows, next_partials, tokens, &fin, o_add);
}

}  // namespace cmfx::gpu
