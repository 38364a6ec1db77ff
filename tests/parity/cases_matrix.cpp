// Weight-format cases: dequant (bit-exact vs F::decode_row, chunked and element paths), matvec and small-batch
// GEMM (vs ref::gemm in float64) for every format of all_formats, aligned and ragged shapes, the forced
// element-wise path, row slicing under a small binding limit, and f32 scale tensors.
#include <bit>
#include <tuple>

#include "cmfx/kernels/act_q8.hpp"
#include "cmfx/ref/gemm_ref.hpp"
#include "harness.hpp"

namespace cmfx::parity {

namespace {

struct host_matrix {
  encoded_matrix e;
  matrix_view v;
};

template <class F>
host_matrix make_matrix(rng& r, uint64_t rows, uint64_t cols, bool f32_scales = false) {
  const std::vector<float> w = r.normal(rows * cols, 0.05f);
  host_matrix m;
  m.e = F::encode(w.data(), rows, cols);
  scale_encoding enc = m.e.scale.empty() ? scale_encoding::none : scale_encoding::e8m0;
  if (f32_scales && !m.e.scale.empty()) {  // the DeepSeek-V3 style f32 scale tensor, same values
    std::vector<uint8_t> s(m.e.scale.size() * 4);
    for (size_t i = 0; i < m.e.scale.size(); ++i) {
      const float f = ue8m0::decode(m.e.scale[i]);
      std::memcpy(s.data() + 4 * i, &f, 4);
    }
    m.e.scale = std::move(s);
    enc = scale_encoding::f32;
  }
  m.v = matrix_view{m.e.data.data(), m.e.data.size(), m.e.scale.empty() ? nullptr : m.e.scale.data(),
                    m.e.scale.size(), enc, rows, cols};
  return m;
}

/// kernels::embed_rows: n ids (a repeat, the last row, one id past the rows) gathered with `copies` copies each;
/// every value bit-exact against F::decode_row, the bad id's rows NaN.
template <class F>
std::string embed_case(suite& s, uint64_t seed, uint64_t rows, uint64_t cols, uint32_t copies, std::string& info) {
  rng r(seed);
  const host_matrix m = make_matrix<F>(r, rows, cols);
  const gpu::gpu_matrix gm = gpu::upload_matrix(s.dev, F::id, m.v);
  std::vector<uint32_t> ids = {uint32_t(r.below(uint32_t(rows))), uint32_t(rows - 1), uint32_t(r.below(uint32_t(rows))),
                               uint32_t(rows + 3), uint32_t(r.below(uint32_t(rows)))};
  ids.push_back(ids[0]);
  const uint32_t n = uint32_t(ids.size());
  const gpu::buffer ib = upload(s.dev, ids);
  guarded out(s.dev, uint64_t(n) * copies * cols * 4);
  gpu::commands c = s.dev.begin();
  s.kern.embed_rows(c, gm, ib, n, copies, out.payload());
  s.submit(c);
  std::vector<float> got(uint64_t(n) * copies * cols), row(cols);
  std::string why;
  if (!out.read(got.data(), why)) return why;
  for (uint32_t i = 0; i < n; ++i) {
    const bool bad_id = ids[i] >= rows;
    if (!bad_id) F::decode_row(m.v, ids[i], row.data());
    for (uint32_t cp = 0; cp < copies; ++cp)
      for (uint64_t j = 0; j < cols; ++j) {
        const float g = got[(uint64_t(i) * copies + cp) * cols + j];
        if (bad_id ? !std::isnan(g) || std::bit_cast<uint32_t>(g) == guarded::nan_word
                   : std::bit_cast<uint32_t>(g) != std::bit_cast<uint32_t>(row[j]) && !(std::isnan(g) && std::isnan(row[j])))
          return "token " + std::to_string(i) + " (id " + std::to_string(ids[i]) + ") copy " + std::to_string(cp) +
                 " column " + std::to_string(j) + ": gpu " + std::to_string(g) +
                 (bad_id ? " (an id past the rows must give NaN)" : ", cpu " + std::to_string(row[j]));
      }
  }
  info = std::to_string(n) + " ids x " + std::to_string(copies) + " copies bit-exact, the bad id NaN";
  return {};
}

std::string shape_name(uint64_t r, uint64_t c, uint32_t n = 0) {
  return std::to_string(r) + "x" + std::to_string(c) + (n ? " n=" + std::to_string(n) : "");
}

/// Every decoded value must equal the trait's, bit for bit (NaN matches NaN).
template <class F>
std::string dequant_case(suite& s, uint64_t seed, uint64_t rows, uint64_t cols, bool generic, std::string& info) {
  rng r(seed);
  const host_matrix m = make_matrix<F>(r, rows, cols);
  const gpu::gpu_matrix gm = gpu::upload_matrix(s.dev, F::id, m.v);
  guarded out(s.dev, rows * cols * 4);
  gpu::commands c = s.dev.begin();
  s.kern.dequant(c, gm, out.payload(), generic);
  const double ms = s.submit(c);
  std::vector<float> got(rows * cols), row(cols);
  std::string why;
  if (!out.read(got.data(), why)) return why;
  uint64_t bad = 0, first = 0;
  float first_cpu = 0;
  for (uint64_t i = 0; i < rows; ++i) {
    F::decode_row(m.v, i, row.data());
    for (uint64_t j = 0; j < cols; ++j) {
      const float g = got[i * cols + j], w = row[j];
      const bool same = std::bit_cast<uint32_t>(g) == std::bit_cast<uint32_t>(w) || (std::isnan(g) && std::isnan(w) &&
                                                                                     std::bit_cast<uint32_t>(g) != guarded::nan_word);
      if (!same && bad++ == 0) first = i * cols + j, first_cpu = w;
    }
  }
  char b[96];
  std::snprintf(b, sizeof b, "bit-exact %s, gpu+copy %.1f ms", bad ? "NO" : "yes", ms);
  info = b;
  if (bad) {
    std::snprintf(b, sizeof b, "%llu values differ; first at %llu: gpu %.9g cpu %.9g", (unsigned long long)bad,
                  (unsigned long long)first, double(got[first]), double(first_cpu));
    return b;
  }
  return {};
}

/// The tiled GEMM in an f16 mode (kernels::set_gemm_precision) against float64 (kF16Nmse, kF16MaxAbsRel), and
/// proof that the mode ran: the result differs from the f32 tiles' on the same inputs.
template <class F>
std::string gemm_f16_case(suite& s, uint64_t seed, uint64_t rows, uint64_t cols, uint32_t n, std::string& info) {
  const gpu::gemm_precision mode = f16_gemm_mode(s.dev);
  rng r(seed);
  const host_matrix m = make_matrix<F>(r, rows, cols, false);
  const std::vector<float> X = r.normal(uint64_t(n) * cols);
  const gpu::gpu_matrix gm = gpu::upload_matrix(s.dev, F::id, m.v);
  const gpu::buffer xb = upload(s.dev, X);
  std::vector<float> got(uint64_t(n) * rows), f32(got.size());
  for (const bool half : {true, false}) {
    gemm_precision_scope ps(s.kern, half ? mode : gpu::gemm_precision::f32);
    if (half && s.kern.gemm_precision_used() != mode) return "the kernels do not run the requested f16 mode";
    guarded y(s.dev, uint64_t(n) * rows * 4);
    gpu::commands c = s.dev.begin();
    s.kern.matmul(c, gm, xb, n, y.payload());
    s.submit(c);
    std::string why;
    if (!y.read(half ? got.data() : f32.data(), why)) return why;
  }
  if (std::memcmp(got.data(), f32.data(), got.size() * 4) == 0) return "bit-identical to the f32 tiles: the f16 mode did not run";
  const std::vector<double> ref = ref::gemm(F::id, m.v, X.data(), n);
  const std::string v = verdict(compare(got.data(), ref.data(), got.size()), kF16Nmse, info, kF16MaxAbsRel);
  info = std::string(mode == gpu::gemm_precision::f16 ? "tensor cores, " : "emulated, ") + info;
  return v;
}

/// The f16 GEMM on cooperative matrices with a subgroup's blocks in two rows (matvec_tuning::gemm_warp_tile 2,
/// gemm.comp GEMM_WT2) against the one-row layout: the same products summed in the same order per block, so the
/// same bits; and against float64 with the f16 bounds.
template <class F>
std::string gemm_wt2_case(suite& s, uint64_t seed, uint64_t rows, uint64_t cols, uint32_t n, std::string& info) {
  rng r(seed);
  const host_matrix m = make_matrix<F>(r, rows, cols, false);
  const std::vector<float> X = r.normal(uint64_t(n) * cols);
  const gpu::gpu_matrix gm = gpu::upload_matrix(s.dev, F::id, m.v);
  const gpu::buffer xb = upload(s.dev, X);
  struct restore {
    gpu::kernels& k;
    ~restore() { k.set_tuning({}); }
  } back{s.kern};
  gemm_precision_scope ps(s.kern, gpu::gemm_precision::f16);
  if (s.kern.gemm_precision_used() != gpu::gemm_precision::f16) return "the kernels do not run the tensor cores";
  std::vector<float> got[2];
  for (int wt : {1, 2}) {
    gpu::matvec_tuning t;
    t.gemm_warp_tile = uint32_t(wt);
    s.kern.set_tuning(t);
    guarded y(s.dev, uint64_t(n) * rows * 4);
    gpu::commands c = s.dev.begin();
    s.kern.matmul(c, gm, xb, n, y.payload());
    s.submit(c);
    std::string why;
    got[wt - 1].resize(uint64_t(n) * rows);
    if (!y.read(got[wt - 1].data(), why)) return why;
  }
  if (std::memcmp(got[0].data(), got[1].data(), got[0].size() * 4) != 0)
    return "two rows of blocks differ from one row of blocks";
  const std::vector<double> ref = ref::gemm(F::id, m.v, X.data(), n);
  const std::string v = verdict(compare(got[1].data(), ref.data(), got[1].size()), kF16Nmse, info, kF16MaxAbsRel);
  info = "bit-identical to one row of blocks, " + info;
  return v;
}

/// The f16 modes saturate: one batch row and one weight row scaled past the f16 range (|x| up to ~4e6, |w| up to
/// ~2e5) must give finite outputs (no inf − inf NaNs), and the other outputs must keep the f16 accuracy (kF16Nmse
/// against float64).
std::string gemm_f16_saturation_case(suite& s, uint64_t seed, std::string& info) {
  using F = fmt_f32;
  const uint64_t rows = 130, cols = 256, wbig = 5;
  const uint32_t n = 20, big = 3;
  const gpu::gemm_precision mode = f16_gemm_mode(s.dev);
  rng r(seed);
  host_matrix m = make_matrix<F>(r, rows, cols, false);
  for (uint64_t c = 0; c < cols; ++c) {  // f32 weights are stored as they are: scale row wbig in place
    float w;
    std::memcpy(&w, m.e.data.data() + (wbig * cols + c) * 4, 4);
    w *= 1e6f;
    std::memcpy(m.e.data.data() + (wbig * cols + c) * 4, &w, 4);
  }
  std::vector<float> X = r.normal(uint64_t(n) * cols);
  for (uint64_t c = 0; c < cols; ++c) X[big * cols + c] *= 1e6f;
  const gpu::gpu_matrix gm = gpu::upload_matrix(s.dev, F::id, m.v);
  const gpu::buffer xb = upload(s.dev, X);
  std::vector<float> got(uint64_t(n) * rows);
  {
    gemm_precision_scope ps(s.kern, mode);
    if (s.kern.gemm_precision_used() != mode) return "the kernels do not run the requested f16 mode";
    guarded y(s.dev, got.size() * 4);
    gpu::commands c = s.dev.begin();
    s.kern.matmul(c, gm, xb, n, y.payload());
    s.submit(c);
    std::string why;
    if (!y.read(got.data(), why)) return why;
  }
  for (size_t i = 0; i < got.size(); ++i)
    if (!std::isfinite(got[i]))
      return "output " + std::to_string(i) + " (batch row " + std::to_string(i / rows) + ") is " +
             std::to_string(got[i]) + ": the f16 tiles did not saturate";
  const std::vector<double> ref = ref::gemm(F::id, m.v, X.data(), n);
  std::vector<float> g2;
  std::vector<double> r2;
  for (uint32_t t = 0; t < n; ++t)
    for (uint64_t o = 0; o < rows; ++o)
      if (t != big && o != wbig) {
        g2.push_back(got[t * rows + o]);
        r2.push_back(ref[t * rows + o]);
      }
  const std::string v = verdict(compare(g2.data(), r2.data(), g2.size()), kF16Nmse, info, kF16MaxAbsRel);
  info = std::string(mode == gpu::gemm_precision::f16 ? "tensor cores" : "emulated") +
         ", batch row 3 and weight row 5 x 1e6 finite; the other outputs " + info;
  return v;
}

template <class F>
std::string matmul_case(suite& s, uint64_t seed, uint64_t rows, uint64_t cols, uint32_t n, bool generic,
                        bool f32_scales, std::string& info) {
  rng r(seed);
  const host_matrix m = make_matrix<F>(r, rows, cols, f32_scales);
  const std::vector<float> X = r.normal(uint64_t(n) * cols);
  const gpu::gpu_matrix gm = gpu::upload_matrix(s.dev, F::id, m.v);
  const gpu::buffer xb = upload(s.dev, X);
  guarded y(s.dev, uint64_t(n) * rows * 4);
  gpu::commands c = s.dev.begin();
  if (generic)
    s.kern.matmul_generic(c, gm, xb, n, y.payload());
  else
    s.kern.matmul(c, gm, xb, n, y.payload());
  s.submit(c);
  std::vector<float> got(uint64_t(n) * rows);
  std::string why;
  if (!y.read(got.data(), why)) return why;
  const std::vector<double> ref = ref::gemm(F::id, m.v, X.data(), n);
  return verdict(compare(got.data(), ref.data(), got.size()), kNmse, info);
}

/// kernels::quantize_act alone (32 invocations per block, quantize_act.comp ACT_WIDE): n vectors of cols values
/// (block counts that leave a workgroup's 8 blocks ragged, n > 1 for the per-vector padding), the output poisoned and
/// guarded, read back and unpacked through common/act_q8.glsl's layout (word s of a block: byte i = element
/// act_plane_elem(s, i); then sx / 2 per block, then 2·offset·Σq per block) against the CPU's act_q8 rule
/// (quantize_act_q8): sx / 2 within 2 ulp of the CPU's (GPU division need not be correctly rounded), every q equal
/// to the CPU's except by one step where v / sx lies within 1e-4 of a rounding midpoint, and the sum word exactly
/// 2·offset times the sum of the GPU's own q. Inputs with an 8x outlier every 97 values and an all-zero block.

/// matmul_case at batch 1 under the matvec tuning t (restored to the automatic choice afterwards, also on a throw).
template <class F>
std::string tuned_matvec_case(suite& s, const gpu::matvec_tuning& t, uint64_t seed, uint64_t rows, uint64_t cols,
                              std::string& info) {
  struct restore {
    gpu::kernels& k;
    ~restore() { k.set_tuning({}); }
  } back{s.kern};
  s.kern.set_tuning(t);
  return matmul_case<F>(s, seed, rows, cols, 1, false, false, info);
}
template <class F>
std::string quantize_act_case(suite& s, uint64_t seed, uint32_t n, uint64_t cols, std::string& info) {
  rng r(seed);
  std::vector<float> X = r.normal(uint64_t(n) * cols);
  for (uint64_t c = 0; c < X.size(); c += 97) X[c] *= 8.0f;
  if (cols >= 64)
    for (uint64_t c = 32; c < 64; ++c) X[c] = 0.0f;  // an all-zero block: sx = 1
  const gpu::buffer xb = upload(s.dev, X);
  const uint64_t blocks = cols / 32, vec_words = gpu::kernels::act_q8_bytes(cols) / 4;
  guarded out(s.dev, gpu::kernels::act_q8_bytes(cols, n));
  gpu::commands c = s.dev.begin();
  s.kern.quantize_act(c, F::id, xb, n, cols, out.payload());
  s.submit(c);
  std::vector<uint32_t> w(vec_words * n);
  std::string why;
  if (!out.read(w.data(), why)) return why;
  act_q8 q;
  quantize_act_q8(X.data(), n, cols, act_layout::natural, q);
  constexpr bool ladder = F::id == format::q4tp || F::id == format::q2tp;
  if constexpr (!ladder && F::id != format::mxfp4) return "not a format with int8 activations";
  auto plane_elem = [](uint32_t sw, uint32_t i) -> uint32_t {
    if constexpr (ladder) {
      const uint32_t epb = 8 / F::elem_bits, wi = sw / epb, p = sw % epb;
      return (4 * wi + i) * epb + (F::low_bits_first ? p : epb - 1 - p);
    } else {
      return 4 * sw + i;
    }
  };
  int32_t off2 = 0;
  if constexpr (ladder) off2 = int32_t(2.0f * F::value_offset);
  uint64_t near_flips = 0;
  for (uint32_t t = 0; t < n; ++t)
    for (uint64_t b = 0; b < blocks; ++b) {
      const uint32_t* v = w.data() + t * vec_words;
      const std::string at = "vector " + std::to_string(t) + " block " + std::to_string(b);
      const float half_sx = std::bit_cast<float>(v[8 * blocks + b]), want_half = 0.5f * q.scale[t * blocks + b];
      if (!(std::fabs(double(half_sx) - want_half) <= 2.0 * std::ldexp(double(want_half), -23)))
        return at + ": sx/2 " + std::to_string(half_sx) + " against the CPU's " + std::to_string(want_half);
      int32_t sum = 0;
      for (uint32_t sw = 0; sw < 8; ++sw)
        for (uint32_t i = 0; i < 4; ++i) {
          const uint32_t e = plane_elem(sw, i);
          const int32_t got = int8_t(uint8_t(v[8 * b + sw] >> (8 * i)));
          const int32_t want = q.q[t * cols + b * 32 + e];
          sum += got;
          if (got == want) continue;
          const double y = double(X[t * cols + b * 32 + e]) / (2.0 * double(half_sx));
          if (std::abs(got - want) > 1 || std::fabs(std::fabs(y - std::trunc(y)) - 0.5) > 1e-4)
            return at + " element " + std::to_string(e) + ": q " + std::to_string(got) + ", the CPU's " +
                   std::to_string(want);
          ++near_flips;
        }
      const int32_t bsum = std::bit_cast<int32_t>(v[9 * blocks + b]);
      if (bsum != off2 * sum)
        return at + ": sum word " + std::to_string(bsum) + ", expected " + std::to_string(off2 * sum);
    }
  info = std::to_string(n) + " x " + std::to_string(blocks) + " blocks packed as the CPU rounds them (" +
         std::to_string(near_flips) + " midpoint flips)";
  return {};
}

/// Batch-1 matvec with int8 activations (kernels::matmul(..., act_precision::i8)). Two references:
///  - W · x̃ in float64, x̃ = x rounded by the CPU's act_q8 rule: the GPU computes exactly this up to float
///    summation order, except where its sx = absmax / 127 or 1 / sx differs in the last ulp from the CPU's (GPU
///    division need not be correctly rounded) and moves an x value across a rounding boundary — each such flip
///    moves an output by at most |w|·sx. Per output: |gpu − ref| <= 1e-5·Σ|w·x̃| + 2·max|w|·max sx.
///  - W · x in float64: the documented error of the int8 path — per output the rounding bound of
///    tests/kernels/gemm_i8_test.cpp (Σ_b absmax_b / 254 · Σ_{c in b} |w_c|, × 1.01) plus the flip allowance
///    above; NMSE <= 5e-4 over >= 64 outputs — looser than the CPU test's 2e-4 because one x value in 97 is an 8x
///    outlier here, which coarsens its block's int8 step.
/// in_group: the product recorded inside a concurrent group (the activations quantised before it, outside).
template <class F>
std::string matvec_i8_case(suite& s, uint64_t seed, uint64_t rows, uint64_t cols, std::string& info,
                           bool in_group = false) {
  rng r(seed);
  const host_matrix m = make_matrix<F>(r, rows, cols);
  std::vector<float> X = r.normal(cols);
  for (uint64_t c = 0; c < cols; c += 97) X[c] *= 8.0f;  // outliers: blocks with different scales
  const gpu::gpu_matrix gm = gpu::upload_matrix(s.dev, F::id, m.v);
  const gpu::buffer xb = upload(s.dev, X);
  guarded y(s.dev, rows * 4);
  gpu::commands c = s.dev.begin();
  if (in_group) {
    const gpu::buffer xq = s.dev.alloc(gpu::kernels::act_q8_bytes(cols));
    s.kern.quantize_act(c, F::id, xb, 1, cols, xq);
    c.begin_concurrent();
    s.kern.matvec_q8(c, gm, xq, y.payload());
    c.end_concurrent();
    s.submit(c);
  } else {
    s.kern.matmul(c, gm, xb, 1, y.payload(), act_precision::i8);
    s.submit(c);
  }
  std::vector<float> got(rows);
  std::string why;
  if (!y.read(got.data(), why)) return why;
  act_q8 q;
  quantize_act_q8(X.data(), 1, cols, act_layout::natural, q);
  std::vector<float> xt(cols);
  double sx_max = 0;
  for (uint64_t k = 0; k < cols; ++k) {
    xt[k] = float(q.q[k]) * q.scale[k / act_block];
    sx_max = std::max(sx_max, double(q.scale[k / act_block]));
  }
  const std::vector<double> ref_q = ref::gemm(F::id, m.v, xt.data(), 1);
  const std::vector<double> ref_x = ref::gemm(F::id, m.v, X.data(), 1);
  std::vector<float> row(cols);
  for (uint64_t i = 0; i < rows; ++i) {
    F::decode_row(m.v, i, row.data());
    double wabs_x = 0, wmax = 0, round_bound = 0;
    for (uint64_t b0 = 0; b0 < cols; b0 += act_block) {
      double amax = 0, wabs = 0;
      for (uint64_t k = b0; k < std::min<uint64_t>(cols, b0 + act_block); ++k) {
        wabs_x += std::fabs(double(row[k]) * xt[k]);
        wmax = std::max(wmax, std::fabs(double(row[k])));
        amax = std::max(amax, std::fabs(double(X[k])));
        wabs += std::fabs(double(row[k]));
      }
      round_bound += amax / 254.0 * wabs;
    }
    const double e_q = std::fabs(got[i] - ref_q[i]), e_x = std::fabs(got[i] - ref_x[i]);
    if (!(e_q <= 1e-5 * wabs_x + 2 * wmax * sx_max))
      return "row " + std::to_string(i) + ": " + std::to_string(got[i]) + " vs int8-rounded reference " +
             std::to_string(ref_q[i]);
    if (!(e_x <= 1.01 * round_bound + 1e-5 * wabs_x + 2 * wmax * sx_max))
      return "row " + std::to_string(i) + ": error vs exact reference above the int8 rounding bound";
  }
  const stats sx_ = compare(got.data(), ref_x.data(), rows), sq = compare(got.data(), ref_q.data(), rows);
  char b[160];
  std::snprintf(b, sizeof b, "nmse %.2e vs exact (bound 5e-4), %.2e vs int8-rounded x; max_abs %.2e (ref max %.3g)",
                sx_.nmse, sq.nmse, sx_.max_abs, sx_.ref_max);
  info = b;
  if (sx_.nonfinite_mismatch || sq.nonfinite_mismatch) return "non-finite output";
  if (rows >= 64 && !(sx_.nmse <= 5e-4)) return "NMSE vs the exact reference above the int8 bound 5e-4";
  return {};
}

/// Independent matvecs recorded inside begin_concurrent / end_concurrent (no barriers between them), then one
/// that reads their outputs: every result must still be exact to the reference.
template <class F>
std::string concurrent_case(suite& s, uint64_t seed, std::string& info, uint64_t rows = 96, uint64_t cols = 256) {
  rng r(seed);
  std::vector<host_matrix> ms;
  std::vector<gpu::gpu_matrix> gms;
  for (int i = 0; i < 4; ++i) {
    ms.push_back(make_matrix<F>(r, rows, cols));
    gms.push_back(gpu::upload_matrix(s.dev, F::id, ms.back().v));
  }
  const host_matrix last = make_matrix<F>(r, rows, 4 * rows);
  const gpu::gpu_matrix glast = gpu::upload_matrix(s.dev, F::id, last.v);
  const std::vector<float> X = r.normal(cols);
  const gpu::buffer xb = upload(s.dev, X);
  gpu::buffer mid = s.dev.alloc(4 * rows * 4);
  guarded y(s.dev, rows * 4);
  gpu::commands c = s.dev.begin();
  c.begin_concurrent();
  for (int i = 0; i < 4; ++i) s.kern.matmul(c, gms[size_t(i)], xb, 1, gpu::view(mid, uint64_t(i) * rows * 4, rows * 4));
  c.end_concurrent();
  s.kern.matmul(c, glast, mid, 1, y.payload());
  s.submit(c);
  std::vector<float> got(rows);
  std::string why;
  if (!y.read(got.data(), why)) return why;
  std::vector<float> h(4 * rows);
  for (int i = 0; i < 4; ++i) {
    const std::vector<double> part = ref::gemm(F::id, ms[size_t(i)].v, X.data(), 1);
    for (uint64_t j = 0; j < rows; ++j) h[uint64_t(i) * rows + j] = float(part[j]);
  }
  const std::vector<double> ref = ref::gemm(F::id, last.v, h.data(), 1);
  return verdict(compare(got.data(), ref.data(), rows), 1e-10, info);
}

struct shape {
  uint64_t rows, cols;
  uint32_t n;
};

}  // namespace

void matrix_cases(suite& s) {
  const shape dq[] = {{1, 32, 0}, {7, 96, 0}, {13, 160, 0}, {5, 33, 0}, {9, 200, 0}, {130, 256, 0}, {257, 1024, 0}};
  const shape mv[] = {{1, 32, 1},    {7, 96, 1},    {5, 33, 1},      {9, 200, 1},
                      {130, 256, 1}, {33, 4096, 1}, {1024, 4096, 1}};
  // n > 8 with whole 32-column steps: the tiled GEMM (gemm.comp; ragged rows and batch rows past its 64 x 64 tiles)
  const shape gm[] = {{7, 96, 2}, {5, 33, 3}, {64, 1024, 8}, {130, 256, 11}, {256, 2048, 4}, {130, 256, 70}, {200, 512, 129}};
  // The tensor-core variants compile for a 32-wide subgroup on any device (a device without cooperative matrices
  // cannot run them; the gemm_f16 / moe_f16 cases run them where it can).
  s.run("gemm_f16", "-", "cooperative-matrix shaders compile (every format, dense + expert, subgroup 32)",
        [&](uint64_t, std::string& info) -> std::string {
          const uint32_t n = s.kern.compile_gemm_variants(gpu::gemm_precision::f16, 32);
          info = std::to_string(n) + " variants compiled";
          // dense, dense with two rows of blocks per subgroup (GEMM_WT2), and the expert GEMMs' four
          return n == 6 * all_formats::size ? "" : "expected 6 variants per format";
        });
  if (!s.dev.info().coop_matrix)
    std::printf("[ skip ] gemm_f16 with two rows of blocks per subgroup (gemm_warp_tile 2): no cooperative matrices "
                "on this device (their shaders compile above)\n");
  if (f16_gemm_mode(s.dev) != gpu::gemm_precision::f32)
    s.run("gemm_f16", "f32", "130x256 n=20, a batch row and a weight row beyond the f16 range",
          [&](uint64_t seed, std::string& info) { return gemm_f16_saturation_case(s, seed, info); });
  for_each_type(all_formats{}, [&]<class F>() {
    const std::string fn(F::name);
    for (const shape& sh : dq) {
      if (!F::shape_ok(sh.rows, sh.cols)) continue;
      for (bool generic : {false, true})
        s.run("dequant", fn, shape_name(sh.rows, sh.cols) + (generic ? " element-path" : ""),
              [&](uint64_t seed, std::string& info) { return dequant_case<F>(s, seed, sh.rows, sh.cols, generic, info); });
    }
    for (const shape& sh : {shape{300, 256, 0}, shape{37, 100, 0}}) {
      if (!F::shape_ok(sh.rows, sh.cols)) continue;
      s.run("embed_rows", fn, shape_name(sh.rows, sh.cols) + " x4 copies",
            [&](uint64_t seed, std::string& info) { return embed_case<F>(s, seed, sh.rows, sh.cols, 4, info); });
    }
    for (const shape& sh : mv) {
      if (!F::shape_ok(sh.rows, sh.cols)) continue;
      s.run("matvec", fn, shape_name(sh.rows, sh.cols), [&](uint64_t seed, std::string& info) {
        return matmul_case<F>(s, seed, sh.rows, sh.cols, 1, false, false, info);
      });
    }
    s.run("matvec", fn, "64x1024 element-path", [&](uint64_t seed, std::string& info) {
      return matmul_case<F>(s, seed, 64, 1024, 1, true, false, info);
    });
    s.run("matvec", fn, "300x1024 sliced (64 KiB bindings)", [&](uint64_t seed, std::string& info) {
      s.kern.set_binding_limit(64 << 10);
      const std::string why = matmul_case<F>(s, seed, 300, 1024, 1, false, false, info);
      s.kern.set_binding_limit(0);
      return why;
    });
    // Work splits the automatic choice does not pick on this device (a CPU device never splits columns).
    s.run("matvec", fn, "300x1024 split 4 unroll 2", [&](uint64_t seed, std::string& info) {
      s.kern.set_tuning({4, 2});
      const std::string why = matmul_case<F>(s, seed, 300, 1024, 1, false, false, info);
      s.kern.set_tuning({});
      return why;
    });
    s.run("gemm", fn, "130x1024 n=5 split 2", [&](uint64_t seed, std::string& info) {
      s.kern.set_tuning({2, 1});
      const std::string why = matmul_case<F>(s, seed, 130, 1024, 5, false, false, info);
      s.kern.set_tuning({});
      return why;
    });
    if constexpr (requires { typename F::scale_elem; })
      s.run("matvec", fn, "130x256 f32 scales", [&](uint64_t seed, std::string& info) {
        return matmul_case<F>(s, seed, 130, 256, 1, false, true, info);
      });
    for (const shape& sh : gm) {
      if (!F::shape_ok(sh.rows, sh.cols)) continue;
      s.run("gemm", fn, shape_name(sh.rows, sh.cols, sh.n), [&](uint64_t seed, std::string& info) {
        return matmul_case<F>(s, seed, sh.rows, sh.cols, sh.n, false, false, info);
      });
    }
    // the f16 modes: 64-column steps, aligned and ragged rows and batch rows
    for (const shape& sh : {shape{64, 1024, 9}, shape{130, 256, 70}, shape{200, 512, 129}, shape{32, 64, 32}, shape{64, 32, 32}}) {
      if (!F::shape_ok(sh.rows, sh.cols)) continue;
      if (f16_gemm_mode(s.dev) == gpu::gemm_precision::f32) {
        s.unsupported("gemm_f16", fn);
        break;
      }
      s.run("gemm_f16", fn, shape_name(sh.rows, sh.cols, sh.n), [&](uint64_t seed, std::string& info) {
        return gemm_f16_case<F>(s, seed, sh.rows, sh.cols, sh.n, info);
      });
    }
    // the smallest f16 tile that fits wherever the grid is small (matvec_tuning::gemm_min_groups; a device whose
    // shared memory holds larger tiles — the H200's 128 × 128 — runs 64 × 64 here instead)
    if (f16_gemm_mode(s.dev) != gpu::gemm_precision::f32 && F::shape_ok(200, 512))
      s.run("gemm_f16", fn, "200x512 n=129, smallest tiles (gemm_min_groups)", [&](uint64_t seed, std::string& info) {
        struct restore {
          gpu::kernels& k;
          ~restore() { k.set_tuning({}); }
        } back{s.kern};
        gpu::matvec_tuning t;
        t.gemm_min_groups = 1u << 30;
        s.kern.set_tuning(t);
        return gemm_f16_case<F>(s, seed, 200, 512, 129, info);
      });
    // a subgroup's blocks in two rows (matvec_tuning::gemm_warp_tile 2, gemm.comp GEMM_WT2): cooperative matrices
    // only (the emulated mode has no subgroup blocks); ragged rows and batch rows, 4 and 8 blocks per subgroup
    if (s.dev.info().coop_matrix)
      for (const shape& sh : {shape{130, 256, 70}, shape{200, 512, 129}, shape{300, 1024, 257}}) {
        if (!F::shape_ok(sh.rows, sh.cols)) continue;
        s.run("gemm_f16", fn, shape_name(sh.rows, sh.cols, sh.n) + ", two rows of blocks per subgroup",
              [&](uint64_t seed, std::string& info) { return gemm_wt2_case<F>(s, seed, sh.rows, sh.cols, sh.n, info); });
      }
    s.run("gemm", fn, "64x1024 n=3 element-path", [&](uint64_t seed, std::string& info) {
      return matmul_case<F>(s, seed, 64, 1024, 3, true, false, info);
    });
    // The batch-1 row kernel at each rows-per-subgroup setting (ragged row counts: rows past the end).
    for (uint32_t rpt : {1u, 2u, 4u})
      s.run("matvec", fn, "37x512 rows/team " + std::to_string(rpt), [&](uint64_t seed, std::string& info) {
        gpu::matvec_tuning t;
        t.rows_per_team = rpt;
        return tuned_matvec_case<F>(s, t, seed, 37, 512, info);
      });
    s.run("matvec", fn, "64x16384 (several activation tiles)", [&](uint64_t seed, std::string& info) {
      return matmul_case<F>(s, seed, 64, 16384, 1, false, false, info);
    });
    // Activations read by every lane from the buffer instead of a shared-memory tile (matvec_tuning::x_source), at
    // the automatic column split (split 0) and with the columns split over 2, 4 or 8 subgroups per row (KSPLIT; the
    // automatic choice splits only where a row has many chunks and the dispatch few rows): ragged rows, a row whose
    // chunks do not fill every subgroup's lanes. A split above the subgroups of a workgroup is capped (8 runs as 4
    // on 32-lane devices, as asked on lavapipe).
    for (const shape& sh : {shape{37, 512, 1}, shape{64, 16384, 1}})
      for (const auto& [rpt, split] :
           {std::pair{1u, 0u}, std::pair{4u, 0u}, std::pair{1u, 8u}, std::pair{2u, 4u}, std::pair{4u, 2u}})
        s.run("matvec", fn,
              shape_name(sh.rows, sh.cols) + " x from buffer, rows/team " + std::to_string(rpt) +
                  (split ? " split " + std::to_string(split) : std::string()),
              [&](uint64_t seed, std::string& info) {
                gpu::matvec_tuning t;
                t.rows_per_team = rpt;
                t.split = split;
                t.x_source = 2;
                return tuned_matvec_case<F>(s, t, seed, sh.rows, sh.cols, info);
              });
    // A chunk's words shared by 2 or 4 lanes (matvec_tuning::sub; capped at what the format's chunks allow, 1 for
    // formats without whole-word chunks): ragged rows, a short row whose units do not fill a subgroup, a long row
    // over split subgroups.
    for (const auto& [rows, cols, rpt, split] :
         {std::tuple{37u, 512u, 2u, 0u}, std::tuple{5u, 96u, 1u, 0u}, std::tuple{64u, 16384u, 4u, 4u}})
      for (uint32_t sub : {2u, 4u}) {
        if (!F::shape_ok(rows, cols)) continue;
        s.run("matvec", fn,
              shape_name(rows, cols) + " x from buffer, rows/team " + std::to_string(rpt) +
                  (split ? " split " + std::to_string(split) : std::string()) + ", " + std::to_string(sub) +
                  " lanes per chunk",
              [&](uint64_t seed, std::string& info) {
                gpu::matvec_tuning t;
                t.rows_per_team = rpt;
                t.split = split;
                t.x_source = 2;
                t.sub = sub;
                return tuned_matvec_case<F>(s, t, seed, rows, cols, info);
              });
      }
    // Activations held in registers (matvec_tuning::x_source 3, shaders/matvec_xreg.comp): each lane owns chunks of
    // every row, a subgroup walks batches of rows_per_team rows (0: the defaults, 4 rows × 4 batches).
    // Ragged rows (also in the last batch), a row shorter than one subgroup's chunks, rows whose chunks leave lanes
    // idle, long rows (two chunks per lane on 32-lane devices).
    for (const auto& [rows, cols, rpt, nb] :
         {std::tuple{37u, 512u, 0u, 0u}, std::tuple{5u, 96u, 0u, 0u}, std::tuple{130u, 4096u, 0u, 0u},
          std::tuple{300u, 2048u, 1u, 0u}, std::tuple{70u, 1056u, 16u, 0u}, std::tuple{64u, 16384u, 0u, 0u},
          std::tuple{33u, 5120u, 2u, 0u}, std::tuple{300u, 2048u, 1u, 4u}, std::tuple{130u, 4096u, 2u, 3u},
          std::tuple{37u, 512u, 0u, 2u}, std::tuple{64u, 16384u, 0u, 2u}}) {
      if (!F::shape_ok(rows, cols)) continue;
      s.run("matvec", fn,
            shape_name(rows, cols) + " x in registers" + (rpt ? ", rows/team " + std::to_string(rpt) : std::string()) +
                (nb ? ", " + std::to_string(nb) + " batches" : std::string()),
            [&](uint64_t seed, std::string& info) {
              gpu::matvec_tuning t;
              t.rows_per_team = rpt;
              t.xreg_batches = nb;
              t.x_source = 3;
              return tuned_matvec_case<F>(s, t, seed, rows, cols, info);
            });
    }
    s.run("matvec", fn, "4x96x256 concurrent + dependent", [&](uint64_t seed, std::string& info) {
      return concurrent_case<F>(s, seed, info);
    });
    // the throughput rule of products recorded in a concurrent group (matvec_tuning::concurrent = 2: 4 rows per
    // subgroup above 512 rows; ragged rows)
    s.run("matvec", fn, "4x600x512 concurrent + dependent, throughput rule", [&](uint64_t seed, std::string& info) {
      gpu::matvec_tuning t;
      t.concurrent = 2;
      s.kern.set_tuning(t);
      const std::string why = concurrent_case<F>(s, seed, info, 600, 512);
      s.kern.set_tuning({});
      return why;
    });
    if (!s.kern.has_i8(F::id)) {
      s.unsupported("matvec_i8", fn);  // int8 activations: q4tp, q2tp, MXFP4 on devices with integer dot products
      s.unsupported("quantize_act", fn);
    } else {
      for (const auto& [n, cols] : {std::pair{1u, 32ull}, std::pair{3u, 96ull}, std::pair{1u, 1024ull},
                                    std::pair{8u, 4096ull}, std::pair{2u, 4128ull}})
        s.run("quantize_act", fn, std::to_string(n) + "x" + std::to_string(cols), [&](uint64_t seed, std::string& info) {
          return quantize_act_case<F>(s, seed, n, cols, info);
        });
      const shape i8s[] = {{1, 32, 1}, {7, 96, 1}, {37, 512, 1}, {130, 4096, 1}, {1024, 4096, 1}, {300, 2048, 1}};
      for (const shape& sh : i8s)
        s.run("matvec_i8", fn, shape_name(sh.rows, sh.cols), [&](uint64_t seed, std::string& info) {
          return matvec_i8_case<F>(s, seed, sh.rows, sh.cols, info);
        });
      // A tile of activations smaller than the row (the multi-tile loop) is exercised by 1x32 / 7x96 on
      // devices whose shared memory forces small tiles; here force it through a long row.
      s.run("matvec_i8", fn, "64x16384", [&](uint64_t seed, std::string& info) {
        return matvec_i8_case<F>(s, seed, 64, 16384, info);
      });
      for (const auto& [rpt, split] : {std::pair{1u, 8u}, std::pair{2u, 4u}, std::pair{4u, 2u}})
        s.run("matvec_i8", fn, "300x2048 rows/team " + std::to_string(rpt) + " split " + std::to_string(split),
              [&](uint64_t seed, std::string& info) {
                gpu::matvec_tuning t;
                t.rows_per_team = rpt;
                t.split = split;
                s.kern.set_tuning(t);
                const std::string why = matvec_i8_case<F>(s, seed, 300, 2048, info);
                s.kern.set_tuning({});
                return why;
              });
    // q2tp's units of one chunk and of two (matvec_rows.comp PAIR: one 16-byte value load, both codes from one
    // load), at the automatic split and at a split whose lanes take one unit each; 96 columns: an odd chunk count
    // takes single chunks whatever is asked.
    if constexpr (F::id == format::q2tp) {
      for (const auto& [rows, cols, split] : {std::tuple{37u, 512u, 0u}, std::tuple{300u, 2048u, 2u},
                                              std::tuple{64u, 16384u, 0u}, std::tuple{5u, 96u, 0u}})
        for (uint32_t pairs : {1u, 2u})
          s.run("matvec_i8", fn,
                shape_name(rows, cols) + (split ? " split " + std::to_string(split) : std::string()) +
                    " chunks per unit " + std::to_string(pairs),
                [&](uint64_t seed, std::string& info) {
                  gpu::matvec_tuning t;
                  t.split = split;
                  t.pairs = pairs;
                  s.kern.set_tuning(t);
                  const std::string why = matvec_i8_case<F>(s, seed, rows, cols, info);
                  s.kern.set_tuning({});
                  return why;
                });
    }
    // a product recorded in a concurrent group under each rule (matvec_tuning::concurrent; 2: 4 rows per subgroup,
    // q2tp chunk pairs; 1030 rows: a last workgroup with rows past the end)
    for (uint32_t rule : {1u, 2u})
      s.run("matvec_i8", fn, "1030x1024 in a concurrent group, rule " + std::to_string(rule),
            [&](uint64_t seed, std::string& info) {
              gpu::matvec_tuning t;
              t.concurrent = rule;
              s.kern.set_tuning(t);
              const std::string why = matvec_i8_case<F>(s, seed, 1030, 1024, info, true);
              s.kern.set_tuning({});
              return why;
            });
    }
  });
}

}  // namespace cmfx::parity
