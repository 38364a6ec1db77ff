// Fake-quant and Hadamard cases: activation fake-quant E4M3 (blocks 128, 64, 32) and E2M1 (block 32) must be
// bit-exact against ops/fake_quant.hpp and equal to the float64 grid-search reference ref::act_quant_*; E2M1
// with E4M3 scales (act_quant_e2m1_e4m3, block 16; no float64 reference exists) bit-exact against the CPU; the
// Walsh–Hadamard transform bit-exact against ops/hadamard.hpp (same butterflies in the same order) and within
// kNmse of the float64 matrix product ref::hadamard. Inputs: per-block magnitudes spread over 1e-6 … 1e4, a block
// below the amax floor, amax exactly fmax·scale (448·2^k, 6·2^k, 6·an E4M3 value) with exact midpoints of the
// value grid times the scale (ties to even), ragged last blocks.
#include <bit>

#include "cmfx/ops/fake_quant.hpp"
#include "cmfx/ops/hadamard.hpp"
#include "cmfx/ref/ops_ref.hpp"
#include "harness.hpp"

namespace cmfx::parity {

namespace {

std::string exact(const float* got, const float* want, size_t n, const char* what) {
  for (size_t i = 0; i < n; ++i)
    if (std::bit_cast<uint32_t>(got[i]) != std::bit_cast<uint32_t>(want[i]))
      return std::string(what) + " differs at " + std::to_string(i) + ": gpu " + std::to_string(got[i]) + " (0x" +
             std::to_string(std::bit_cast<uint32_t>(got[i])) + "), cpu " + std::to_string(want[i]);
  return {};
}

using fqf = gpu::kernels::fq_format;

std::string fq_case(suite& s, uint64_t seed, uint32_t rows, uint32_t n, uint32_t block, fqf fmt, std::string& info) {
  rng r(seed);
  const bool e4m3 = fmt == fqf::e4m3, e4m3_scale = fmt == fqf::e2m1_e4m3;
  std::vector<float> x = r.normal(uint64_t(rows) * n);
  const float fmax = e4m3 ? 448.0f : 6.0f;
  for (uint32_t i = 0; i < rows; ++i)
    for (uint32_t b0 = 0; b0 < n; b0 += block) {
      const uint32_t len = std::min(block, n - b0);
      float* p = x.data() + uint64_t(i) * n + b0;
      const float mag = std::pow(10.0f, r.uniform(-6.0f, 4.0f));  // spread of block magnitudes
      for (uint32_t j = 0; j < len; ++j) p[j] *= mag;
      const float u = r.uniform(0, 1);
      if (u < 0.15f) {  // amax exactly fmax·sv: the scale sits exactly on a value (sv = 2^k, or an E4M3 value)
        const std::vector<double> e4 = ref::value_grid<cmfx::e4m3>();
        const float sv = e4m3_scale ? float(e4[40 + r.below(e4.size() - 41)]) : std::ldexp(1.0f, int(r.below(20)) - 10);
        float am = 0;
        for (uint32_t j = 0; j < len; ++j) am = std::max(am, std::fabs(p[j]));
        for (uint32_t j = 0; j < len; ++j) p[j] = fmax * sv * (p[j] / am) * 0.5f;
        p[r.below(len)] = fmax * sv * (u < 0.07f ? -1.0f : 1.0f);
        // exact midpoints between neighbouring values of the format, times the scale (ties → the even code)
        const std::vector<double> g2 = e4m3 ? e4 : ref::value_grid<cmfx::e2m1>();
        for (uint32_t t = 0; t < std::min<uint32_t>(len, 8); ++t) {
          const size_t at = 1 + r.below(g2.size() - 1);
          const uint32_t j = uint32_t(r.below(len));
          if (std::fabs(p[j]) == fmax * sv) continue;  // keep the amax element
          p[j] = float((g2[at - 1] + g2[at]) / 2.0 * double(sv)) * (r.below(2) ? -1.0f : 1.0f);
        }
      } else if (u < 0.25f) {  // everything below the amax floor
        for (uint32_t j = 0; j < len; ++j) p[j] *= (e4m3 ? e4m3_amax_floor : e2m1_amax_floor * 1e6f) * 1e-3f / mag;
      }
    }
  guarded xg(s.dev, x.size() * 4);
  s.dev.upload(xg.payload(), x);
  gpu::commands c = s.dev.begin();
  s.kern.fake_quant(c, xg.payload(), rows, n, block, fmt);
  s.submit(c);
  std::vector<float> got(x.size());
  std::string why;
  if (!xg.read(got.data(), why)) return why;
  std::vector<float> cpu = x;
  for (uint32_t i = 0; i < rows; ++i) {
    std::span<float> row(cpu.data() + uint64_t(i) * n, n);
    if (e4m3)
      act_quant_e4m3(row, block);
    else if (e4m3_scale)
      act_quant_e2m1_e4m3(row, block);
    else
      act_quant_e2m1(row, block);
  }
  if (auto w = exact(got.data(), cpu.data(), got.size(), "value"); !w.empty()) return w;
  if (e4m3_scale) {  // no float64 reference of this variant in ref/ops_ref.hpp: the CPU op is the oracle
    info = "bit-exact vs CPU";
    return {};
  }
  for (uint32_t i = 0; i < rows; ++i) {  // and the float64 grid search agrees value for value
    const std::vector<float> row(x.begin() + std::ptrdiff_t(i) * n, x.begin() + std::ptrdiff_t(i + 1) * n);
    const std::vector<double> ref = e4m3 ? ref::act_quant_e4m3(row, block) : ref::act_quant_e2m1(row, block);
    for (uint32_t j = 0; j < n; ++j)
      if (double(got[uint64_t(i) * n + j]) != ref[j])
        return "row " + std::to_string(i) + " col " + std::to_string(j) + ": gpu " +
               std::to_string(got[uint64_t(i) * n + j]) + ", float64 reference " + std::to_string(ref[j]);
  }
  info = "bit-exact vs CPU and float64 reference";
  return {};
}

std::string hadamard_case(suite& s, uint64_t seed, uint32_t rows, uint32_t n, float scale, std::string& info) {
  rng r(seed);
  const std::vector<float> x = r.normal(uint64_t(rows) * n);
  guarded xg(s.dev, x.size() * 4);
  s.dev.upload(xg.payload(), x);
  gpu::commands c = s.dev.begin();
  s.kern.hadamard(c, xg.payload(), rows, n, scale);
  s.submit(c);
  std::vector<float> got(x.size());
  std::string why;
  if (!xg.read(got.data(), why)) return why;
  std::vector<float> cpu = x;
  hadamard_rows(cpu, n, scale);
  if (auto w = exact(got.data(), cpu.data(), got.size(), "value"); !w.empty()) return w;
  std::vector<double> ref;
  for (uint32_t i = 0; i < rows; ++i) {
    const std::vector<float> row(x.begin() + std::ptrdiff_t(i) * n, x.begin() + std::ptrdiff_t(i + 1) * n);
    const std::vector<double> h = ref::hadamard(row, scale);
    ref.insert(ref.end(), h.begin(), h.end());
  }
  const std::string v = verdict(compare(got.data(), ref.data(), got.size()), kNmse, info);
  info = "bit-exact vs CPU, " + info;
  return v;
}

/// kernels::rmsnorm_q8 against rmsnorm followed by quantize_act on its output: the normalised rows and the int8
/// vectors (words, scales, sums; not the padding words after a vector) bit for bit — the same operations on the
/// same values. Both outputs poisoned and guarded; inputs with an 8x outlier every 97 values.
std::string rmsnorm_q8_case(suite& s, uint64_t seed, format f, uint32_t rows, uint32_t dim, std::string& info) {
  rng r(seed);
  std::vector<float> x = r.normal(uint64_t(rows) * dim), w = r.normal(dim);
  for (uint64_t i = 0; i < x.size(); i += 97) x[i] *= 8.0f;
  const gpu::buffer xb = upload(s.dev, x), wb = upload(s.dev, w);
  const uint64_t ybytes = uint64_t(rows) * dim * 4, qbytes = gpu::kernels::act_q8_bytes(dim, rows);
  guarded y1(s.dev, ybytes), q1(s.dev, qbytes), y2(s.dev, ybytes), q2(s.dev, qbytes);
  gpu::commands c = s.dev.begin();
  s.kern.rmsnorm_q8(c, xb, wb, y1.payload(), rows, dim, 1e-6f, f, q1.payload());
  s.kern.rmsnorm(c, xb, wb, y2.payload(), rows, dim, 1e-6f);
  s.kern.quantize_act(c, f, y2.payload(), rows, dim, q2.payload());
  s.submit(c);
  std::vector<float> a(uint64_t(rows) * dim), b(a.size());
  std::vector<uint32_t> qa(qbytes / 4), qc(qbytes / 4);
  std::string why;
  if (!y1.read(a.data(), why) || !y2.read(b.data(), why) || !q1.read(qa.data(), why) || !q2.read(qc.data(), why))
    return why;
  if (auto e = exact(a.data(), b.data(), a.size(), "normalised value"); !e.empty()) return e;
  const uint64_t vec = qbytes / 4 / rows, used = 10 * uint64_t(dim / 32);  // words per vector; written
  for (uint32_t t = 0; t < rows; ++t)
    for (uint64_t i = 0; i < used; ++i)
      if (qa[t * vec + i] != qc[t * vec + i])
        return "int8 vector " + std::to_string(t) + " word " + std::to_string(i) + " differs from quantize_act's";
  info = std::to_string(rows) + " x " + std::to_string(dim / 32) + " blocks: rows and int8 words bit-identical";
  return {};
}

}  // namespace

void quant_cases(suite& s) {
  using R = std::string;
  auto fq = [&](uint32_t rows, uint32_t n, uint32_t block, fqf f, const R& note) {
    const char* name = f == fqf::e4m3 ? "e4m3 " : f == fqf::e2m1 ? "e2m1 " : "e2m1/e4m3-scale ";
    s.run("fake_quant", "-",
          R(name) + std::to_string(rows) + "x" + std::to_string(n) + " block " + std::to_string(block) + note,
          [=, &s](uint64_t seed, R& info) { return fq_case(s, seed, rows, n, block, f, info); });
  };
  fq(3, 4096, 128, fqf::e4m3, " (V4 Linear inputs)");
  fq(2, 4096, 32, fqf::e4m3, " (V4.1)");
  fq(4, 512, 64, fqf::e4m3, " (KV nope dims)");
  fq(5, 300, 128, fqf::e4m3, " ragged last block");
  fq(3, 1000, 1000, fqf::e4m3, " block > workgroup");
  fq(64, 128, 32, fqf::e2m1, " (indexer, 64 heads)");
  fq(3, 50, 32, fqf::e2m1, " ragged");
  fq(8, 512, 16, fqf::e2m1_e4m3, " (V4.1 compressed KV)");
  fq(3, 100, 16, fqf::e2m1_e4m3, " ragged");
  auto had = [&](uint32_t rows, uint32_t n, const R& note) {
    const float scale = 1.0f / std::sqrt(float(n));
    s.run("hadamard", "-", std::to_string(rows) + "x" + std::to_string(n) + note,
          [=, &s](uint64_t seed, R& info) { return hadamard_case(s, seed, rows, n, scale, info); });
  };
  had(64, 128, " (indexer heads)");
  had(3, 4096, " max");
  had(5, 2, "");
  had(2, 1, " n=1");
  had(7, 512, "");
  for_each_type(all_formats{}, [&]<class F>() {  // every format's column: a case, or unsupported
    const format f = F::id;
    const std::string fn(F::name);
    if (!s.kern.has_i8(f)) {
      s.unsupported("rmsnorm_q8", fn);
      return;
    }
    for (const auto& [rows, dim] : {std::pair{1u, 1024u}, std::pair{3u, 4128u}, std::pair{2u, 96u}})
      s.run("rmsnorm_q8", fn, std::to_string(rows) + "x" + std::to_string(dim),
            [=, &s](uint64_t seed, R& info) { return rmsnorm_q8_case(s, seed, f, rows, dim, info); });
  });
}

}  // namespace cmfx::parity
