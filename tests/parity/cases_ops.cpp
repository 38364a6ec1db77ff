// Layer-primitive cases: RMSNorm, RoPE, softmax with sink, exact top-k and clamped SwiGLU against the float64
// references of include/cmfx/ref/ops_ref.hpp (top-k: identical index lists). Shapes are the model's (d 4096 /
// 5120, 64 heads × 512 with rope 64, 256 / 384 experts top-6, indexer top-512, vocabulary 129280) plus small
// and ragged ones.
#include <limits>

#include "cmfx/ops/rope.hpp"
#include "cmfx/ref/ops_ref.hpp"
#include "harness.hpp"

namespace cmfx::parity {

namespace {

constexpr float kInf = std::numeric_limits<float>::infinity();

std::string read_floats(guarded& g, std::vector<float>& out) {
  std::string why;
  g.read(out.data(), why);
  return why;
}

std::string rmsnorm_case(suite& s, uint64_t seed, uint32_t rows, uint32_t dim, bool weighted, float eps, float scale,
                         std::string& info) {
  rng r(seed);
  std::vector<float> x = r.normal(uint64_t(rows) * dim);
  for (float& v : x) v *= scale;
  const std::vector<float> w = r.normal(dim, 0.5f);
  const gpu::buffer xb = upload(s.dev, x), wb = upload(s.dev, w);
  guarded y(s.dev, x.size() * 4);
  gpu::commands c = s.dev.begin();
  s.kern.rmsnorm(c, xb, weighted ? gpu::view(wb) : gpu::view(), y.payload(), rows, dim, eps);
  s.submit(c);
  std::vector<float> got(x.size());
  if (auto why = read_floats(y, got); !why.empty()) return why;
  std::vector<double> ref;
  for (uint32_t i = 0; i < rows; ++i) {
    const std::vector<float> row(x.begin() + std::ptrdiff_t(i) * dim, x.begin() + std::ptrdiff_t(i + 1) * dim);
    const std::vector<double> o = ref::rmsnorm(row, weighted ? w.data() : nullptr, eps);
    ref.insert(ref.end(), o.begin(), o.end());
  }
  return verdict(compare(got.data(), ref.data(), got.size()), kNmse, info);
}

std::string rope_case(suite& s, uint64_t seed, uint32_t rows, uint32_t heads, uint32_t head_dim, const rope_config& cfg,
                      int64_t max_pos, bool inverse, std::string& info) {
  rng r(seed);
  const std::vector<float> x = r.normal(uint64_t(rows) * heads * head_dim);
  const rope_table table(cfg);
  std::vector<int64_t> pos(rows);
  std::vector<float> cs(uint64_t(rows) * cfg.dim);
  std::vector<double> row_cs(cfg.dim);
  for (uint32_t i = 0; i < rows; ++i) {
    pos[i] = max_pos ? int64_t(r.below(uint64_t(max_pos) + 1)) : 0;
    table.rotation(pos[i], row_cs);  // the CPU library's cos/sin, uploaded as f32
    for (uint32_t j = 0; j < cfg.dim; ++j) cs[uint64_t(i) * cfg.dim + j] = float(row_cs[j]);
  }
  guarded xg(s.dev, x.size() * 4);
  s.dev.upload(xg.payload(), x);
  const gpu::buffer cb = upload(s.dev, cs);
  gpu::commands c = s.dev.begin();
  s.kern.rope(c, xg.payload(), cb, rows, heads, head_dim, cfg.dim, inverse);
  s.submit(c);
  std::vector<float> got(x.size());
  if (auto why = read_floats(xg, got); !why.empty()) return why;
  std::vector<double> ref(x.begin(), x.end());
  const std::vector<double> f = ref::rope_freqs(cfg.dim, cfg.base, cfg.yarn, cfg.factor, cfg.original, cfg.beta_fast,
                                                cfg.beta_slow);
  for (uint32_t i = 0; i < rows; ++i)
    for (uint32_t h = 0; h < heads; ++h)
      ref::rope(ref, (uint64_t(i) * heads + h) * head_dim + (head_dim - cfg.dim), pos[i], f, inverse);
  return verdict(compare(got.data(), ref.data(), got.size()), kNmse, info);
}

/// rmsnorm_rope (per-head norm + rope in one dispatch): bit-identical to rmsnorm then rope on the device (in place
/// and out of place), and within kNmse of the float64 composition (ref::rmsnorm per head, then ref::rope).
std::string rmsnorm_rope_case(suite& s, uint64_t seed, uint32_t tokens, uint32_t heads, uint32_t dim, bool weighted,
                              bool in_place, std::string& info) {
  rng r(seed);
  rope_config cfg;
  cfg.base = 160000.0;
  cfg.yarn = true;
  const uint32_t rows = tokens * heads;
  const std::vector<float> x = r.normal(uint64_t(rows) * dim, 3.0f), w = r.normal(dim, 0.5f);
  const rope_table table(cfg);
  std::vector<int64_t> pos(tokens);
  std::vector<float> cs(uint64_t(tokens) * cfg.dim);
  std::vector<double> row_cs(cfg.dim);
  for (uint32_t t = 0; t < tokens; ++t) {
    pos[t] = int64_t(r.below(70000));
    table.rotation(pos[t], row_cs);
    for (uint32_t j = 0; j < cfg.dim; ++j) cs[uint64_t(t) * cfg.dim + j] = float(row_cs[j]);
  }
  const gpu::buffer xb = upload(s.dev, x), wb = upload(s.dev, w), cb = upload(s.dev, cs);
  const gpu::view wv = weighted ? gpu::view(wb) : gpu::view();
  guarded y(s.dev, x.size() * 4), y2(s.dev, x.size() * 4);
  if (in_place) s.dev.upload(y.payload(), x);
  gpu::commands c = s.dev.begin();
  s.kern.rmsnorm_rope(c, in_place ? y.payload() : gpu::view(xb), wv, y.payload(), rows, dim, 1e-6f, cb, heads, cfg.dim);
  s.kern.rmsnorm(c, xb, wv, y2.payload(), rows, dim, 1e-6f);
  s.kern.rope(c, y2.payload(), cb, tokens, heads, dim, cfg.dim, false);
  s.submit(c);
  std::vector<float> got(x.size()), two(x.size());
  if (auto why = read_floats(y, got); !why.empty()) return why;
  if (auto why = read_floats(y2, two); !why.empty()) return why;
  if (std::memcmp(got.data(), two.data(), got.size() * 4))
    return "not bit-identical to rmsnorm then rope on the device";
  std::vector<double> ref;
  for (uint32_t i = 0; i < rows; ++i) {
    const std::vector<float> row(x.begin() + std::ptrdiff_t(i) * dim, x.begin() + std::ptrdiff_t(i + 1) * dim);
    const std::vector<double> o = ref::rmsnorm(row, weighted ? w.data() : nullptr, 1e-6f);
    ref.insert(ref.end(), o.begin(), o.end());
  }
  const std::vector<double> f = ref::rope_freqs(cfg.dim, cfg.base, cfg.yarn, cfg.factor, cfg.original, cfg.beta_fast,
                                                cfg.beta_slow);
  for (uint32_t i = 0; i < rows; ++i) ref::rope(ref, uint64_t(i) * dim + (dim - cfg.dim), pos[i / heads], f, false);
  return verdict(compare(got.data(), ref.data(), got.size()), kNmse, info);
}

enum class sink_mode { per_row, none, masked_rows };

std::string softmax_case(suite& s, uint64_t seed, uint32_t rows, uint32_t n, sink_mode mode, float mask, bool in_place,
                         std::string& info) {
  rng r(seed);
  std::vector<float> l = r.normal(uint64_t(rows) * n, 3.0f);
  for (float& v : l)
    if (r.uniform(0, 1) < mask) v = -kInf;
  if (mode == sink_mode::masked_rows && rows > 1)  // row 1: every key masked (the sink takes everything)
    for (uint32_t k = 0; k < n; ++k) l[n + k] = -kInf;
  const uint32_t sink_count = mode == sink_mode::none ? 0 : std::min<uint32_t>(rows, 3);
  const std::vector<float> sinks = r.normal(std::max<uint32_t>(sink_count, 1));
  const gpu::buffer sb = upload(s.dev, sinks);
  guarded lg(s.dev, l.size() * 4), pg(s.dev, l.size() * 4);
  s.dev.upload(lg.payload(), l);
  gpu::commands c = s.dev.begin();
  s.kern.softmax_sink(c, lg.payload(), sink_count ? gpu::view(sb) : gpu::view(), sink_count,
                      in_place ? lg.payload() : pg.payload(), rows, n);
  s.submit(c);
  std::vector<float> got(l.size());
  if (auto why = read_floats(in_place ? lg : pg, got); !why.empty()) return why;
  std::vector<double> ref;
  for (uint32_t i = 0; i < rows; ++i) {
    const std::vector<float> row(l.begin() + std::ptrdiff_t(i) * n, l.begin() + std::ptrdiff_t(i + 1) * n);
    const std::vector<double> p = ref::attend_sink(row, sink_count ? double(sinks[i % sink_count]) : -double(kInf));
    ref.insert(ref.end(), p.begin(), p.end());
  }
  return verdict(compare(got.data(), ref.data(), got.size()), kNmse, info);
}

enum class topk_values { normal, ties_specials, all_equal };

std::string topk_case(suite& s, uint64_t seed, uint32_t rows, uint32_t n, uint32_t k, topk_values kind,
                      std::string& info, bool by_position = false) {
  rng r(seed);
  std::vector<float> v = r.normal(uint64_t(rows) * n);
  if (kind == topk_values::ties_specials)
    for (float& x : v) {  // few distinct values, plus NaN, ±inf, ±0
      x = std::round(x * 2.0f) / 2.0f;
      const float u = r.uniform(0, 1);
      if (u < 0.02f) x = std::numeric_limits<float>::quiet_NaN();
      else if (u < 0.04f) x = -kInf;
      else if (u < 0.05f) x = kInf;
      else if (u < 0.10f) x = u < 0.075f ? -0.0f : 0.0f;
    }
  if (kind == topk_values::all_equal) std::fill(v.begin(), v.end(), 0.25f);
  const gpu::buffer vb = upload(s.dev, v);
  guarded out(s.dev, uint64_t(rows) * k * 4, 0xDEADBEEFu);
  gpu::commands c = s.dev.begin();
  s.kern.topk(c, vb, rows, n, k, out.payload(), by_position);
  s.submit(c);
  std::vector<uint32_t> got(uint64_t(rows) * k);
  std::string why;
  if (!out.read(got.data(), why)) return why;
  info = "k=" + std::to_string(k) + " of " + std::to_string(n) + (by_position ? ", the set in index order" : ", exact order");
  for (uint32_t i = 0; i < rows; ++i) {
    const std::vector<float> row(v.begin() + std::ptrdiff_t(i) * n, v.begin() + std::ptrdiff_t(i + 1) * n);
    std::vector<uint32_t> want = ref::topk(row, k);
    if (by_position) std::sort(want.begin(), want.end());  // the same set, ascending
    for (uint32_t j = 0; j < k; ++j) {
      const uint32_t w = j < want.size() ? want[j] : 0xFFFFFFFFu, g = got[uint64_t(i) * k + j];
      if (g != w)
        return "row " + std::to_string(i) + " slot " + std::to_string(j) + ": gpu index " + std::to_string(g) +
               ", cpu " + std::to_string(w);
    }
  }
  return {};
}

std::string swiglu_case(suite& s, uint64_t seed, uint32_t n, float limit, float weight, float sigma, bool in_place,
                        std::string& info) {
  rng r(seed);
  const std::vector<float> g = r.normal(n, sigma), v = r.normal(n, sigma);
  guarded gg(s.dev, uint64_t(n) * 4), og(s.dev, uint64_t(n) * 4);
  s.dev.upload(gg.payload(), g);
  const gpu::buffer vb = upload(s.dev, v);
  gpu::commands c = s.dev.begin();
  s.kern.swiglu_clamp(c, gg.payload(), vb, in_place ? gg.payload() : og.payload(), n, limit, weight);
  s.submit(c);
  std::vector<float> got(n);
  if (auto why = read_floats(in_place ? gg : og, got); !why.empty()) return why;
  const std::vector<double> ref = ref::swiglu_clamp(g, v, limit, weight);
  return verdict(compare(got.data(), ref.data(), got.size()), kNmse, info);
}

}  // namespace

void op_cases(suite& s) {
  using R = std::string;
  auto rms = [&](uint32_t rows, uint32_t dim, bool w, float eps, float scale, const R& note) {
    s.run("rmsnorm", "-", std::to_string(rows) + "x" + std::to_string(dim) + note, [=, &s](uint64_t seed, R& info) {
      return rmsnorm_case(s, seed, rows, dim, w, eps, scale, info);
    });
  };
  rms(1, 4096, true, 1e-6f, 1.0f, " weight");
  rms(3, 5120, true, 1e-6f, 1.0f, " weight");
  rms(64, 512, false, 1e-6f, 1.0f, " heads");
  rms(7, 33, true, 1e-6f, 1.0f, " weight ragged");
  if (s.dev.info().float64)
    rms(2, 4096, true, 1e-20f, 1e-25f, " x~1e-25 eps 1e-20 (f64 accumulators)");
  else
    std::printf("[ skip ] rmsnorm with inputs whose squares underflow f32: f32 accumulators (--f64 not given, or no shaderFloat64)\n");

  rope_config yarn;
  yarn.base = 160000.0;
  yarn.yarn = true;
  rope_config swa;
  for (bool inv : {false, true})
    s.run("rope", "-", R("3x64x512 rope 64 yarn pos<=1e6") + (inv ? " inverse" : ""), [=, &s](uint64_t seed, R& info) {
      return rope_case(s, seed, 3, 64, 512, yarn, 1000000, inv, info);
    });
  s.run("rope", "-", "5x1x64 rope 64 base 1e4", [=, &s](uint64_t seed, R& info) {
    return rope_case(s, seed, 5, 1, 64, swa, 70000, false, info);
  });
  s.run("rope", "-", "2x8x128 pos 0 (identity)", [=, &s](uint64_t seed, R& info) {
    return rope_case(s, seed, 2, 8, 128, yarn, 0, false, info);
  });
  s.run("rmsnorm_rope", "-", "1x64x512 rope 64, in place (V4's q heads)", [=, &s](uint64_t seed, R& info) {
    return rmsnorm_rope_case(s, seed, 1, 64, 512, false, true, info);
  });
  s.run("rmsnorm_rope", "-", "3x5x200 rope 64 weight", [=, &s](uint64_t seed, R& info) {
    return rmsnorm_rope_case(s, seed, 3, 5, 200, true, false, info);
  });

  auto sm = [&](uint32_t rows, uint32_t n, sink_mode m, float mask, bool inplace, const R& note) {
    s.run("softmax_sink", "-", std::to_string(rows) + "x" + std::to_string(n) + note, [=, &s](uint64_t seed, R& info) {
      return softmax_case(s, seed, rows, n, m, mask, inplace, info);
    });
  };
  sm(4, 1, sink_mode::per_row, 0, false, "");
  sm(4, 7, sink_mode::per_row, 0, false, "");
  sm(8, 128, sink_mode::per_row, 0.3f, false, " 30% masked");
  sm(2, 4096, sink_mode::none, 0, false, " no sink");
  sm(1, 65536, sink_mode::per_row, 0.5f, false, " 50% masked");
  sm(3, 64, sink_mode::masked_rows, 0, false, " row of masked keys");
  sm(3, 64, sink_mode::none, 0, false, " no sink, masked row");
  sm(5, 300, sink_mode::per_row, 0.1f, true, " in place");

  auto tk = [&](uint32_t rows, uint32_t n, uint32_t k, topk_values kind, const R& note, bool by_position = false) {
    s.run("topk", "-", std::to_string(rows) + "x" + std::to_string(n) + " k=" + std::to_string(k) + note,
          [=, &s](uint64_t seed, R& info) { return topk_case(s, seed, rows, n, k, kind, info, by_position); });
  };
  tk(4, 256, 6, topk_values::normal, " experts");
  tk(4, 384, 6, topk_values::normal, " experts");
  tk(2, 4096, 512, topk_values::normal, " indexer");
  tk(1, 129280, 8, topk_values::normal, " vocabulary");
  tk(3, 100, 200, topk_values::normal, " k>n");
  tk(4, 5000, 2048, topk_values::ties_specials, " ties NaN inf ±0");
  tk(2, 1000, 50, topk_values::all_equal, " all equal");
  // k = 1 on rows >= kernels::argmax_min_n: the split argmax (two dispatches through the kernels' scratch).
  tk(1, 129280, 1, topk_values::normal, " argmax vocabulary");
  tk(3, 8193, 1, topk_values::ties_specials, " argmax ties NaN inf ±0");
  tk(2, 20000, 1, topk_values::all_equal, " argmax all equal");
  // by_position (the indexers): the selected set in ascending index order; k >= n every index without a selection.
  tk(3, 100, 512, topk_values::ties_specials, " by position, k>n", true);
  tk(2, 512, 512, topk_values::normal, " by position, k=n", true);
  tk(2, 4096, 512, topk_values::normal, " by position, k<n", true);
  tk(3, 5000, 2048, topk_values::ties_specials, " by position, ties NaN inf ±0", true);
  tk(2, 1000, 50, topk_values::all_equal, " by position, all equal", true);
  tk(1, 16385, 1024, topk_values::normal, " by position, ragged", true);

  s.run("swiglu_clamp", "-", "6144 limit 10 w 0.7", [&](uint64_t seed, R& info) {
    return swiglu_case(s, seed, 6144, 10.0f, 0.7f, 4.0f, false, info);
  });
  s.run("swiglu_clamp", "-", "1001 no clamp", [&](uint64_t seed, R& info) {
    return swiglu_case(s, seed, 1001, 0.0f, 1.0f, 8.0f, false, info);
  });
  s.run("swiglu_clamp", "-", "2048 limit 10 w 1.5 in place", [&](uint64_t seed, R& info) {
    return swiglu_case(s, seed, 2048, 10.0f, 1.5f, 4.0f, true, info);
  });
}

}  // namespace cmfx::parity
