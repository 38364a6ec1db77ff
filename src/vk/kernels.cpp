// Host side of the GPU kernels: the uploads, the matrix products (variant choice, pipeline keys, bindings, push
// constants, dispatch geometry) and what the other kernel files reach through kernels_ops.hpp; kernels::impl is in
// kernels_impl.hpp, the norms / rope / softmax / top-k / element-wise kernels in kernels_prims.cpp.
// No Vulkan header here: pipelines and dispatches go through internal.hpp.
#include "kernels_impl.hpp"

namespace cmfx::gpu {

// ------------------------------------------------------------------ uploads

gpu_matrix upload_matrix(device& dev, format f, const matrix_view& v) {
  gpu_matrix m;
  m.fmt = f;
  m.rows = v.rows;
  m.cols = v.cols;
  m.scale_enc = v.scale_enc;
  uint64_t want_data = 0, want_scale = 0;
  bool ok = false;
  if (!visit_format(f, [&]<class F>() {
        ok = F::shape_ok(v.rows, v.cols);
        want_data = F::data_bytes(v.rows, v.cols);
        want_scale = F::scale_bytes(v.rows, v.cols) * (v.scale_enc == scale_encoding::f32 ? 4 : 1);
      }))
    throw usage_error("upload_matrix: unknown format");
  if (!ok) throw usage_error("upload_matrix: " + std::string(format_name(f)) + " cannot hold " +
                             std::to_string(v.rows) + "x" + std::to_string(v.cols));
  if (v.data_bytes != want_data) throw usage_error("upload_matrix: payload size does not match the format");
  if (want_scale && (v.scale_bytes != want_scale || v.scale_enc == scale_encoding::none))
    throw usage_error("upload_matrix: scale tensor size or encoding does not match the format");
  m.data = dev.alloc(v.data_bytes);
  dev.upload(m.data, v.data, v.data_bytes);
  if (want_scale) {
    m.scale = dev.alloc(v.scale_bytes);
    dev.upload(m.scale, v.scale, v.scale_bytes);
  }
  return m;
}

// ------------------------------------------------------------------ kernels

kernels::kernels(device& dev) : p_(std::make_unique<impl>(dev)) {}
kernels::~kernels() = default;

std::string kernels::describe() const {
  std::ostringstream s;
  s << "lanes " << p_->lanes << ", teams/workgroup " << p_->teams << ", reductions "
    << (p_->info.subgroup_arithmetic ? "subgroup" : "shared memory") << ", 8-bit storage "
    << (p_->info.storage8 ? "yes" : "no") << ", 16-bit storage " << (p_->info.storage16 ? "yes" : "no")
    << ", f64 accumulators "
    << (p_->info.float64 ? (p_->info.subgroup_arithmetic && p_->info.subgroup_shuffle ? "yes (sums by shuffles)" : "yes")
                         : "no")
    << ", batch-1 row kernel "
    << (p_->info.subgroup_arithmetic && !p_->tune.legacy ? "yes" : "no") << ", int8 dot products "
    << (p_->info.int_dot ? (p_->info.int_dot_fast ? "accelerated" : "emulated") : "no") << ", tiled GEMMs "
    << (p_->gemm_coop() == 1 ? "f16 tensor cores" : p_->gemm_coop() == 2 ? "f16 emulated" : "f32");
  return s.str();
}

pipeline_stats kernels::stats() const {
  const detail::compile_counters k = detail::counters(p_->dev.impl());
  return pipeline_stats{k.pipelines, k.compiled, k.spirv_disk_hits, k.compile_seconds, k.nontemporal_loads};
}

void kernels::set_binding_limit(uint64_t bytes) { p_->binding_limit = bytes; }

void kernels::set_gemm_precision(gemm_precision p) {
  if (p == gemm_precision::f16_emulated && !p_->info.float16)
    throw usage_error("gemm precision f16_emulated: the device has no shaderFloat16");
  p_->gemm_prec = p;
}

uint32_t kernels::compile_gemm_variants(gemm_precision p, uint32_t subgroup) const {
  const uint32_t coop = p == gemm_precision::f16 ? 1 : p == gemm_precision::f16_emulated ? 2 : 0;
  const device_options& o = p_->dev.options();
  uint32_t n = 0;
  for_each_type(all_formats{}, [&]<class F>() {
    const uint32_t tk = detail::gemm_step(detail::gpu_traits(F::id).chunk, coop);
    scale_encoding enc = scale_encoding::none;
    if constexpr (requires { typename F::scale_elem; }) enc = scale_encoding::e8m0;
    std::string cd;
    // the tiles of a device with 48 KiB of shared memory (the H200)
    const uint32_t gn = coop ? 128 : 64, dm = coop && !detail::gemm_ladder(F::id) ? 128 : impl::gemm_rows;
    if (!detail::gemm_coop_defines(coop, dm, gn, 256, subgroup, cd))
      throw gpu_error("compile_gemm_variants: no dense GEMM tile split for subgroup " + std::to_string(subgroup));
    (void)detail::compile_glsl(o.shader_dir, "gemm.comp", p_->common + detail::gemm_defines(F::id, enc, tk, dm, gn, cd),
                               o.optimize_spirv);
    ++n;
    if (detail::gemm_wt2_fits(coop, dm, gn, 256, subgroup)) {  // matvec_tuning::gemm_warp_tile 2
      (void)detail::compile_glsl(o.shader_dir, "gemm.comp",
                                 p_->common + detail::gemm_defines(F::id, enc, tk, dm, gn, cd + "#define GEMM_WT2 1\n"),
                                 o.optimize_spirv);
      ++n;
    }
    const uint32_t gm = 128, wg = detail::moe_gemm_wg(coop, gm, subgroup);
    if (!detail::gemm_coop_defines(coop, gm, detail::moe_gemm_pairs, wg, subgroup, cd))
      throw gpu_error("compile_gemm_variants: no expert GEMM tile split for subgroup " + std::to_string(subgroup));
    for (const bool x_token : {true, false})
      for (const bool slots : {false, true}) {
        const std::string sd = slots ? std::string("#define MOE_SLOTS 12\n") + detail::def_u("MOE_E", 256) : "";
        (void)detail::compile_glsl(o.shader_dir, "gemm.comp",
                                   p_->common + detail::moe_gemm_defines(F::id, enc, gm, wg, tk, cd, 6,
                                                                         true, x_token ? 4096 : 2048, x_token, sd),
                                   o.optimize_spirv);
        ++n;
      }
  });
  return n;
}

gemm_precision kernels::gemm_precision_requested() const { return p_->gemm_prec; }

gemm_precision kernels::gemm_precision_used() const {
  switch (p_->gemm_coop()) {
    case 1: return gemm_precision::f16;
    case 2: return gemm_precision::f16_emulated;
    default: return gemm_precision::f32;
  }
}

void kernels::set_tuning(const matvec_tuning& t) {
  auto pow2 = [](uint32_t v) { return (v & (v - 1)) == 0; };
  if (!pow2(t.split) || !pow2(t.unroll) || t.unroll > 8 || !pow2(t.rows_per_team) ||
      t.rows_per_team > (t.x_source == 3 ? 16u : 4u) || t.x_source > 3 || t.xreg_batches > 64 || !pow2(t.sub) ||
      t.sub > 4 || !pow2(t.moe_rows_per_team) || t.moe_rows_per_team > 8 ||
      !pow2(t.moe_pairs) || t.moe_pairs == 1 || t.moe_pairs > 16 || t.moe_unroll > 2 || t.moe_tiles > 2 || t.moe_i8_tc > 2 ||
      t.hc_tokens > 64 || t.gemm_warp_tile > 2 || !pow2(t.moe_b1_batches) || t.moe_b1_batches > 8)
    throw usage_error("matvec tuning out of range");
  p_->tune = t;
}

void kernels::prepare(format f, uint64_t rows, uint64_t cols) {
  const bool ext = f == format::mxfp4 || f == format::fp8_b128 || f == format::fp8_b32;
  const scale_encoding enc = ext ? scale_encoding::e8m0 : scale_encoding::none;
  p_->matrix_pipe(false, f, enc, 1, p_->choose(rows, cols, 1, f));
  p_->matrix_pipe(false, f, enc, gemm_tile, p_->choose(rows, cols, gemm_tile, f));
  p_->matrix_pipe(true, f, enc, 1, matvec_tuning{1, 1});
  if (p_->rows_kernel(f)) p_->rows_pipe(f, enc, p_->choose_rows(rows, cols, f, false), false);
  if (p_->i8_kernel(f)) p_->rows_pipe(f, enc, p_->choose_rows(rows, cols, f, true), true);
}

void kernels::matmul(commands& c, const gpu_matrix& w, view x, uint32_t n, view y, act_precision act,
                     uint32_t min_groups) {
  p_->check_matrix(w, "matmul");
  if (n == 0) return;
  detail::need_view(x, uint64_t(n) * w.cols * 4, "matmul", "x");
  detail::need_view(y, uint64_t(n) * w.rows * 4, "matmul", "y");
  if (act == act_precision::i8 && n == 1 && p_->i8_kernel(w.fmt)) {
    if (c.in_concurrent())
      throw usage_error("matmul with int8 activations shares one scratch: not inside begin_concurrent (use "
                        "quantize_act + matvec_q8)");
    const buffer& s = p_->scratch_for(act_q8_bytes(w.cols));
    quantize_act(c, w.fmt, x, 1, w.cols, s);
    matvec_q8(c, w, s, y);
    return;
  }
  if (p_->gemm_ok(w, n, x, w.cols, 0)) {
    p_->run_matrix(c, w, x, 0, n, 0, y, false, false, false, 0, ~uint64_t(0), 0, 0, min_groups);
    return;
  }
  for (uint32_t t0 = 0; t0 < n; t0 += gemm_tile) {
    const uint32_t nt = std::min(gemm_tile, n - t0);
    p_->run_matrix(c, w, x, t0, nt, n == 1 ? 1 : gemm_tile, y, false, false);
  }
}

namespace {
/// matmul_rows' checks of the row range: inside the matrix, starting on a scale tile of its format.
void check_row_range(const gpu_matrix& w, uint64_t r0, uint64_t r1) {
  if (r0 >= r1 || r1 > w.rows)
    throw usage_error("matmul_rows: rows [" + std::to_string(r0) + ", " + std::to_string(r1) + ") outside the " +
                      std::to_string(w.rows) + "-row matrix");
  uint32_t block_rows = 1;
  visit_format(w.fmt, [&]<class F>() { block_rows = F::block_rows; });
  if (r0 % block_rows)
    throw usage_error("matmul_rows: row " + std::to_string(r0) + " does not start a " + std::to_string(block_rows) +
                      "-row scale tile of " + std::string(format_name(w.fmt)));
}
}  // namespace

void kernels::matmul_rows(commands& c, const gpu_matrix& w, uint64_t r0, uint64_t r1, view x, view y) {
  p_->check_matrix(w, "matmul_rows");
  check_row_range(w, r0, r1);
  detail::need_view(x, w.cols * 4, "matmul_rows", "x");
  detail::need_view(y, (r1 - r0) * 4, "matmul_rows", "y");
  p_->run_matrix(c, w, x, 0, 1, 1, y, false, false, false, r0, r1);
}

void kernels::matmul_rows(commands& c, const gpu_matrix& w, uint64_t r0, uint64_t r1, view x, uint32_t n,
                          uint64_t x_stride, view y, uint64_t y_stride) {
  if (n <= 1) {
    if (n == 1) matmul_rows(c, w, r0, r1, x, y);
    return;
  }
  p_->check_matrix(w, "matmul_rows");
  check_row_range(w, r0, r1);
  if (x_stride < w.cols || x_stride % 4 || y_stride < r1 - r0)
    throw usage_error("matmul_rows: x stride must be >= cols and a multiple of 4, y stride >= the rows");
  detail::need_view(x, ((n - 1) * x_stride + w.cols) * 4, "matmul_rows", "x");
  detail::need_view(y, ((n - 1) * y_stride + (r1 - r0)) * 4, "matmul_rows", "y");
  if (p_->gemm_ok(w, n, x, x_stride, r0)) {
    p_->run_matrix(c, w, x, 0, n, 0, y, false, false, false, r0, r1, x_stride, y_stride);
    return;
  }
  for (uint32_t t0 = 0; t0 < n; t0 += gemm_tile)
    p_->run_matrix(c, w, x, t0, std::min(gemm_tile, n - t0), gemm_tile, y, false, false, false, r0, r1, x_stride,
                   y_stride);
}

void kernels::quantize_act(commands& c, format f, view x, uint32_t n, uint64_t cols, view out) {
  if (!p_->i8_kernel(f)) throw usage_error("quantize_act: no int8-activation kernel for this format or device");
  if (cols == 0 || cols % 32 || n == 0) throw usage_error("quantize_act: cols must be a positive multiple of 32");
  detail::need_view(x, uint64_t(n) * cols * 4, "quantize_act", "x");
  detail::need_view(out, act_q8_bytes(cols, n), "quantize_act", "out");
  const bound xb = bind_range(p_->info, x, 0, uint64_t(n) * cols * 4);
  const bound ob = bind_range(p_->info, out, 0, act_q8_bytes(cols, n));
  struct {
    uint32_t n, blocks, xoff, ooff;
  } pc{n, u32(cols / 32, "blocks"), xb.residual / 4, ob.residual / 4};
  const scale_encoding enc = (f == format::mxfp4) ? scale_encoding::e8m0 : scale_encoding::none;
  const binding b[2] = {xb.b, ob.b};
  // 32 invocations per block (quantize_act.comp ACT_WIDE), its butterflies through shuffles where the subgroups
  // hold whole blocks
  const std::string defs = format_defines(f, enc) + "#define ACT_WIDE 1\n" + detail::op_env_of(*p_).act_wide_defines();
  uint32_t gx, gy;
  p_->grid(ceil_div(uint64_t(n) * (cols / 32), impl::wg_rows / 32), gx, gy);
  detail::dispatch(c.impl(), p_->pipe("quantize_act.comp", defs, impl::wg_rows, 2, sizeof pc), b, &pc, sizeof pc, gx,
                   gy);
}

void kernels::matvec_q8(commands& c, const gpu_matrix& w, view xq, view y) {
  p_->check_matrix(w, "matvec_q8");
  detail::need_view(xq, act_q8_bytes(w.cols), "matvec_q8", "xq");
  detail::need_view(y, w.rows * 4, "matvec_q8", "y");
  p_->run_matrix(c, w, xq, 0, 1, 1, y, false, false, true);
}

void kernels::matvec_q8_rows(commands& c, const gpu_matrix& w, uint64_t r0, uint64_t r1, view xq, view y) {
  p_->check_matrix(w, "matvec_q8_rows");
  check_row_range(w, r0, r1);
  detail::need_view(xq, act_q8_bytes(w.cols), "matvec_q8_rows", "xq");
  detail::need_view(y, (r1 - r0) * 4, "matvec_q8_rows", "y");
  p_->run_matrix(c, w, xq, 0, 1, 1, y, false, false, true, r0, r1);
}

bool kernels::has_i8(format f) const { return p_->i8_kernel(f); }

void kernels::matmul_generic(commands& c, const gpu_matrix& w, view x, uint32_t n, view y) {
  p_->check_matrix(w, "matmul");
  if (n == 0) return;
  detail::need_view(x, uint64_t(n) * w.cols * 4, "matmul", "x");
  detail::need_view(y, uint64_t(n) * w.rows * 4, "matmul", "y");
  for (uint32_t t0 = 0; t0 < n; t0 += gemm_tile)
    p_->run_matrix(c, w, x, t0, std::min(gemm_tile, n - t0), n == 1 ? 1 : gemm_tile, y, false, true);
}

void kernels::dequant(commands& c, const gpu_matrix& w, view out, bool generic) {
  p_->check_matrix(w, "dequant");
  detail::need_view(out, w.rows * w.cols * 4, "dequant", "out");
  p_->run_matrix(c, w, view(), 0, 1, 1, out, true, generic);
}

void kernels::embed_rows(commands& c, const gpu_matrix& w, view ids, uint32_t n, uint32_t copies, view out) {
  p_->check_matrix(w, "embed_rows");
  if (n == 0) return;
  if (copies == 0) throw usage_error("embed_rows: copies must be > 0");
  detail::need_view(ids, uint64_t(n) * 4, "embed_rows", "ids");
  detail::need_view(out, uint64_t(n) * copies * w.cols * 4, "embed_rows", "out");
  binding b[6];
  mat_pc pc{};
  detail::bind_planes(detail::op_env_of(*p_), w, b, pc, "embed_rows");
  const bound ib = bind_range(p_->info, ids, 0, uint64_t(n) * 4), ob = bind_range(p_->info, out, 0, uint64_t(n) * copies * w.cols * 4);
  b[3] = ib.b, b[4] = ob.b, b[5] = bind_range(p_->info, p_->tables, 0, p_->tables.size()).b;
  pc.n = n, pc.xoff = ib.residual / 4, pc.x_stride = copies, pc.yoff = ob.residual / 4;
  pc.fast = pc.fast && pc.yoff % 4 == 0;
  const std::array<uint32_t, 2> key{uint32_t(w.fmt), uint32_t(w.scale_enc)};
  auto it = p_->gather_pipes.find(key);
  if (it == p_->gather_pipes.end()) {
    std::ostringstream d;
    d << "#define TEAMS " << p_->teams << "\n#define ROWS_PER_WG " << p_->teams << "\n#define DQ_GATHER 1\n"
      << detail::tab_defines() << format_defines(w.fmt, w.scale_enc);
    it = p_->gather_pipes.emplace(key, p_->pipe("dequant.comp", d.str(), p_->lanes * p_->teams, 6, sizeof(mat_pc))).first;
  }
  uint32_t gx, gy;
  p_->grid(ceil_div(n, p_->teams), gx, gy);
  detail::dispatch(c.impl(), it->second, b, &pc, sizeof pc, gx, gy);
}

}  // namespace cmfx::gpu

// The layer-primitive kernels (kernels_route.cpp, kernels_mhc.cpp, kernels_quant.cpp, kernels_moe.cpp) reach the
// device, the variant preamble and the tables through this (kernels_ops.hpp).
namespace cmfx::gpu::detail {
op_env op_env_of(kernels::impl& p) {
  return op_env{p.dev, p.info, p.common, p.lanes, p.teams, p.tables, p.gemm_coop(), &p.counters, &p.counter_next};
}

const matvec_tuning& tuning_of(const kernels::impl& p) { return p.tune; }

uint32_t f32_sub(const kernels::impl& p, format f) {
  return std::min(p.tune.sub ? p.tune.sub : kernels::impl::default_sub(f), kernels::impl::max_sub(f));
}

bool rows_kernel_defines(kernels::impl& p, format f, scale_encoding enc, uint64_t rows, uint64_t cols, bool i8,
                         bool pairs_ok, uint64_t block_rows, std::string& defs, uint32_t& rows_per_wg) {
  if (i8 ? !p.i8_kernel(f) : !p.rows_kernel(f)) return false;
  // (the batch-1 MoE's dispatches, its only caller: matvec_tuning::moe_b1_* in place of the general choices;
  // unset, the int8 MoE takes q2tp chunk pairs, 2 chunks in flight per lane and 4 batches of rows per workgroup)
  matvec_tuning base = p.tune;
  if (base.moe_b1_rows_per_team) base.rows_per_team = base.moe_b1_rows_per_team;
  base.pairs = base.moe_b1_pairs ? base.moe_b1_pairs : i8 ? 2 : base.pairs;
  base.unroll = base.moe_b1_unroll ? base.moe_b1_unroll : i8 ? 2 : base.unroll;
  matvec_tuning t = p.choose_rows(rows, cols, f, i8, false, &base);
  if (!pairs_ok) t.pairs = 1;  // (same split: it only counts units)
  const uint32_t batch_rows = p.teams / t.split * t.rows_per_team;
  // (kernels::set_tuning checks moe_b1_batches) the default: 4, fewer where a workgroup's rows would not divide
  // block_rows
  uint32_t batches = !i8 ? 1 : base.moe_b1_batches ? base.moe_b1_batches : 4;
  if (i8 && !base.moe_b1_batches)
    while (batches > 1 && block_rows % (uint64_t(batch_rows) * batches)) batches /= 2;
  defs = p.rows_defs(f, enc, t, i8, batches);
  rows_per_wg = batch_rows * batches;
  return true;
}
}  // namespace cmfx::gpu::detail
