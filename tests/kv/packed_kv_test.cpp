// Packed V4.1 KV rows (include/cmfx/kv/packed_kv.hpp): byte layout, quantizer against a float64 grid-search
// reference (bit-exact), decode(quantize(x)) bit-identical to the fake-quant of fake_quant.hpp, error against the
// f32 input within the format's bound, the bank and the bounded scratch, the state size of the model card, and
// sink attention over packed rows within a bound derived from the measured row errors.
#include <gtest/gtest.h>

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <random>
#include <string>
#include <vector>

#include "cmfx/kv/packed_kv.hpp"
#include "cmfx/ops/fake_quant.hpp"
#include "cmfx/ref/ops_ref.hpp"
#include "support/metrics.hpp"

using namespace cmfx;

namespace {

uint64_t fresh_seed() { return std::random_device{}() ^ (uint64_t(std::random_device{}()) << 32); }

// Sanity bounds of the quantization error itself on N(0,1) rows with 0.2 % 8x outliers (measured values are printed):
// E2M1 keeps 1 mantissa bit, so the relative RMS error of a block scaled to amax ≈ 6 is ≈ 10 %.
constexpr double kMainQuantNmse = 2.5e-2;   // measured ≈ 9.0e-3
constexpr double kIndexQuantNmse = 3.5e-2;  // measured ≈ 1.7–1.8e-2 (one power-of-two scale per 32: coarser)
// Sink attention over the selected packed rows vs the same rows unquantized (64 heads × 512 outputs):
constexpr double kAttnNmse = 5e-2;          // measured 8e-3 – 2.4e-2 over 110 runs (peaked heads weigh one row)

struct rng {
  std::mt19937_64 g;
  explicit rng(uint64_t s) : g(s) {}
  float normal() { return std::normal_distribution<float>(0.0f, 1.0f)(g); }
  float uniform(float a, float b) { return std::uniform_real_distribution<float>(a, b)(g); }
  uint64_t below(uint64_t n) { return std::uniform_int_distribution<uint64_t>(0, n - 1)(g); }
  /// N(0,1) with 0.2 % 8x outliers.
  std::vector<float> normal_vec(size_t n) {
    std::vector<float> v(n);
    for (auto& x : v) {
      x = normal();
      if (uniform(0, 1) < 0.002f) x *= 8.0f;
    }
    return v;
  }
  /// Per-block magnitudes 2^-20..2^12 (some scales saturate at 448 above amax 2688), exact zeros, blocks below the
  /// amax floor, and exact E2M1 grid points times an E4M3 value (rounding ties of x/s).
  std::vector<float> blocky(size_t n, uint32_t block) {
    std::vector<float> x = normal_vec(n);
    for (size_t b = 0; b < n; b += block) {
      const float u = uniform(0, 1);
      const float mag = u < 0.1f ? 1e-5f : std::ldexp(1.0f, int(below(33)) - 20);
      const bool grid = uniform(0, 1) < 0.15f;
      const float s = e4m3::decode(uint8_t(8 + below(110)));
      for (size_t i = b; i < std::min(n, b + block); ++i) {
        x[i] *= mag;
        if (grid) {
          static const float ties[] = {0.25f, 0.75f, 1.25f, 1.75f, 2.5f, 3.5f, 5.0f, 6.0f, 0.5f, 3.0f};
          x[i] = ties[below(10)] * s * (below(2) ? -1.0f : 1.0f);
        }
        if (uniform(0, 1) < 0.01f) x[i] = 0.0f;
      }
    }
    return x;
  }
};

/// Float64 reference quantizer by grid search (ops_ref value_grid / round_to_grid): E4M3 scale = the grid value
/// nearest to max(amax, 6·2^-9)/6 (ties to even, saturated at 448) or the smallest power of two ≥ amax'/6 (UE8M0);
/// values = nearest E2M1 grid value of clamp(x/s, ±6), ties to even.
template <class Row>
std::vector<double> ref_fake_quant(const std::vector<float>& x) {  // a ragged last block uses its own amax
  const std::vector<double> g2 = ref::value_grid<e2m1>();
  const std::vector<double> g4 = ref::value_grid<e4m3>();
  std::vector<double> out(x.size());
  for (size_t b0 = 0; b0 < x.size(); b0 += Row::block) {
    const size_t b1 = std::min(x.size(), b0 + Row::block);
    double amax = 0;
    for (size_t i = b0; i < b1; ++i) amax = std::max(amax, std::fabs(double(x[i])));
    double s;
    if constexpr (std::is_same_v<typename Row::scale_elem, e4m3>) {
      s = ref::round_to_grid(std::min(std::max(amax, 6.0 * std::ldexp(1.0, -9)) / 6.0, 448.0), g4);
    } else {
      const double q = std::max(amax, 6.0 * std::ldexp(1.0, -126)) / 6.0;
      int e = -127;
      while (std::ldexp(1.0, e) < q) ++e;
      s = std::ldexp(1.0, e);
    }
    for (size_t i = b0; i < b1; ++i)
      out[i] = ref::round_to_grid(std::clamp(double(x[i]) / s, -6.0, 6.0), g2) * s;
  }
  return out;
}

template <class Row>
std::vector<float> pack_decode(const std::vector<float>& x) {
  std::vector<float> out(x.size());
  std::vector<uint8_t> row(Row::row_bytes);
  for (size_t r = 0; r < x.size() / Row::values; ++r) {
    Row::quantize(x.data() + r * Row::values, row.data());
    Row::decode(row.data(), out.data() + r * Row::values);
  }
  return out;
}

template <class Row>
void fake_quant(std::vector<float>& x) {
  if constexpr (std::is_same_v<typename Row::scale_elem, e4m3>)
    act_quant_e2m1_e4m3(x, Row::block);
  else
    act_quant_e2m1(x, Row::block);
}

template <class Row>
void check_bit_exact(const char* name) {
  const uint64_t seed = fresh_seed();
  rng r(seed);
  size_t mism_fq = 0, mism_ref = 0, total = 0;
  for (size_t rows : {1u, 3u, 17u, 64u}) {
    const std::vector<float> x = r.blocky(rows * Row::values, Row::block);
    const std::vector<float> dec = pack_decode<Row>(x);
    std::vector<float> fq = x;
    fake_quant<Row>(fq);
    const std::vector<double> ref = ref_fake_quant<Row>(x);
    for (size_t i = 0; i < x.size(); ++i) {
      ++total;
      if (std::bit_cast<uint32_t>(dec[i]) != std::bit_cast<uint32_t>(fq[i])) {
        if (mism_fq++ < 5) ADD_FAILURE() << name << " packed " << dec[i] << " != fake-quant " << fq[i] << " at " << i;
      }
      if (double(dec[i]) != ref[i]) {
        if (mism_ref++ < 5)
          ADD_FAILURE() << name << " packed " << dec[i] << " != f64 reference " << ref[i] << " (x " << x[i] << ") at " << i;
      }
    }
  }
  std::printf("[kv] %s: %zu values, %zu differ from fake-quant, %zu from the f64 reference (seed %llu)\n", name,
              total, mism_fq, mism_ref, (unsigned long long)seed);
  EXPECT_EQ(mism_fq, 0u) << "seed " << seed;
  EXPECT_EQ(mism_ref, 0u) << "seed " << seed;
}

}  // namespace

TEST(PackedKvRow, SizesOfTheSpec) {
  EXPECT_EQ(kv_main_row::row_bytes, 288u);
  EXPECT_EQ(kv_main_row::nibble_bytes, 256u);
  EXPECT_EQ(kv_main_row::scale_bytes, 32u);
  EXPECT_EQ(kv_index_row::row_bytes, 68u);
  EXPECT_EQ(kv_index_row::nibble_bytes, 64u);
  EXPECT_EQ(kv_index_row::scale_bytes, 4u);
}

TEST(PackedKvRow, ByteLayout) {
  // Block 0 of a main row: amax 6 → scale e4m3(1.0) = 0x38; value 2k in the low nibble of byte k.
  std::vector<float> x(512, 0.0f);
  x[0] = 6.0f;    // code 7
  x[1] = -0.5f;   // code 9
  x[2] = 1.5f;    // code 3
  x[3] = -6.0f;   // code 15
  x[16] = 0.75f;  // block 1: amax 0.75 → scale e4m3(0.125) = 0x20; 0.75/0.125 = 6 → code 7
  std::vector<uint8_t> row(288);
  kv_main_row::quantize(x.data(), row.data());
  EXPECT_EQ(row[0], 0x97);
  EXPECT_EQ(row[1], 0xF3);
  EXPECT_EQ(row[8], 0x07);
  EXPECT_EQ(row[256], e4m3::encode(1.0f));
  EXPECT_EQ(row[257], e4m3::encode(0.125f));
  EXPECT_EQ(row[258], e4m3::encode(0x1p-9f));  // all-zero block: the amax floor 6·2^-9 gives the smallest scale
  std::vector<float> back(512);
  kv_main_row::decode(row.data(), back.data());
  for (size_t i = 0; i < 512; ++i) EXPECT_EQ(back[i], x[i]) << i;  // every input is on the grid

  std::vector<float> xi(128, 0.0f);
  xi[0] = 3.0f;  // amax 3 → scale 2^ceil(log2 0.5) = 0.5 (UE8M0 126); 3/0.5 = 6 → code 7
  xi[1] = 1.0f;  // 2 → code 4
  std::vector<uint8_t> ri(68);
  kv_index_row::quantize(xi.data(), ri.data());
  EXPECT_EQ(ri[0], 0x47);
  EXPECT_EQ(ri[64], 126);
  EXPECT_EQ(ri[65], 1);  // all-zero block: floor 6·2^-126 → 2^-126
}

// The fake-quant alone on ragged lengths (the packed rows are always whole; the fake-quant is not).
TEST(PackedKvRow, FakeQuantE4m3ScaleRaggedMatchesReference) {
  const uint64_t seed = fresh_seed();
  rng r(seed);
  for (size_t n : {1u, 15u, 37u, 448u, 5121u}) {
    const std::vector<float> x = r.blocky(n, 16);
    std::vector<float> fq = x;
    act_quant_e2m1_e4m3(fq, 16);
    const std::vector<double> ref = ref_fake_quant<kv_main_row>(x);
    for (size_t i = 0; i < n; ++i) ASSERT_EQ(double(fq[i]), ref[i]) << "n " << n << " i " << i << " seed " << seed;
  }
}

TEST(PackedKvRow, MainRowBitExact) { check_bit_exact<kv_main_row>("main (E2M1 + E4M3/16)"); }
TEST(PackedKvRow, IndexRowBitExact) { check_bit_exact<kv_index_row>("index (E2M1 + UE8M0/32)"); }
// The same codecs at other widths (the V4.1 toy's 64 / 32, and ragged block counts).
TEST(PackedKvRow, OtherWidthsBitExact) {
  check_bit_exact<packed_fp4_row<64, 16, e4m3>>("main at 64");
  check_bit_exact<packed_fp4_row<48, 16, e4m3>>("main at 48");
  check_bit_exact<packed_fp4_row<32, 32, ue8m0>>("index at 32");
  check_bit_exact<packed_fp4_row<96, 32, ue8m0>>("index at 96");
  EXPECT_EQ(kv_main_codec::row_bytes(64), 36u);
  EXPECT_EQ(kv_index_codec::row_bytes(32), 17u);
  EXPECT_FALSE(kv_main_codec::width_ok(40));
  EXPECT_FALSE(kv_index_codec::width_ok(0));
}

// A run-time-width bank without a fixed capacity (how the V4.1 graph keeps its state): rows decode to the
// fake-quant, a copy is an independent value, truncate keeps a prefix, the scratch refuses another width.
TEST(PackedKvBank, RuntimeWidthUnbounded) {
  const uint64_t seed = fresh_seed();
  rng r(seed);
  packed_fp4_bank<kv_main_codec> bank(64, 2, packed_kv_unbounded);
  EXPECT_EQ(bank.row_bytes(), 36u);
  std::vector<std::vector<float>> rows;
  for (int i = 0; i < 300; ++i) {
    rows.push_back(r.normal_vec(64));
    bank.append(rows.back());
  }
  EXPECT_EQ(bank.rows(), 300u);
  EXPECT_EQ(bank.bytes(), 300u * 36u);
  const packed_fp4_bank<kv_main_codec> copy = bank;
  bank.truncate(100);
  EXPECT_EQ(copy.rows(), 300u);
  std::vector<float> a(64), want;
  for (uint64_t i : {0u, 99u, 150u, 299u}) {
    copy.decode_row(i, a.data());
    want = rows[i];
    act_quant_e2m1_e4m3(want, 16);
    EXPECT_EQ(a, want) << "row " << i << " seed " << seed;
  }
  EXPECT_THROW(bank.row(100), std::out_of_range);
  packed_fp4_scratch<kv_main_codec> sc(64, 8);
  const std::vector<uint32_t> pick = {5, 0, 99};
  const std::span<const float> got = sc.decode(bank, std::span<const uint32_t>(pick));
  for (size_t k = 0; k < pick.size(); ++k) {
    bank.decode_row(pick[k], a.data());
    EXPECT_TRUE(std::equal(a.begin(), a.end(), got.begin() + std::ptrdiff_t(k * 64))) << k;
  }
  packed_fp4_scratch<kv_main_codec> other(128, 8);
  EXPECT_THROW(other.decode(bank, std::span<const uint32_t>(pick)), std::invalid_argument);
  EXPECT_THROW((packed_fp4_bank<kv_main_codec>(40, 1, 10)), std::invalid_argument);
}

// Error of the packed value against the f32 input: per value |x̂ − x| ≤ half the E2M1 step at |x|/s, times s, plus
// what the ±6 clamp cuts off; NMSE on Gaussian rows within the format's usual range.
template <class Row>
void check_error(const char* name, double nmse_max) {
  const uint64_t seed = fresh_seed();
  rng r(seed);
  const size_t rows = 200;
  const std::vector<float> x = r.normal_vec(rows * Row::values);
  std::vector<uint8_t> row(Row::row_bytes);
  std::vector<float> dec(Row::values);
  double err = 0, ref = 0;
  size_t bad = 0;
  for (size_t i = 0; i < rows; ++i) {
    const float* xr = x.data() + i * Row::values;
    Row::quantize(xr, row.data());
    Row::decode(row.data(), dec.data());
    for (uint32_t b = 0; b < Row::blocks; ++b) {
      const double s = Row::scale_value(row[Row::nibble_bytes + b]);
      for (uint32_t j = b * Row::block; j < (b + 1) * Row::block; ++j) {
        const double a = std::fabs(double(xr[j])) / s;
        const double half_step = a < 2 ? 0.25 : a < 4 ? 0.5 : 1.0;
        const double bound = half_step * s + std::max(0.0, std::fabs(double(xr[j])) - 6 * s) + 1e-30;
        const double e = std::fabs(double(dec[j]) - double(xr[j]));
        if (e > bound && bad++ < 5) ADD_FAILURE() << name << " value " << xr[j] << " -> " << dec[j] << " s " << s;
        err += e * e;
        ref += double(xr[j]) * double(xr[j]);
      }
    }
  }
  std::printf("[kv] %s quantization NMSE %.3e (bound %.1e)\n", name, err / ref, nmse_max);
  EXPECT_EQ(bad, 0u) << "seed " << seed;
  EXPECT_LE(err / ref, nmse_max) << "seed " << seed;
}

TEST(PackedKvRow, MainErrorWithinFormat) { check_error<kv_main_row>("main", kMainQuantNmse); }
TEST(PackedKvRow, IndexErrorWithinFormat) { check_error<kv_index_row>("index", kIndexQuantNmse); }

TEST(PackedKvBank, AppendDecodeTruncate) {
  const uint64_t seed = fresh_seed();
  rng r(seed);
  packed_kv_bank<kv_main_row> bank(2, 101);  // ragged: 101 tokens at ratio 2 → 50 rows
  EXPECT_EQ(bank.capacity_rows(), 50u);
  EXPECT_EQ(bank.capacity_tokens(), 100u);
  EXPECT_EQ(bank.capacity_bytes(), 50u * 288u);
  std::vector<std::vector<float>> rows;
  for (int i = 0; i < 50; ++i) {
    rows.push_back(r.normal_vec(512));
    bank.append(rows.back());
  }
  EXPECT_EQ(bank.bytes(), 50u * 288u);
  EXPECT_THROW(bank.append(rows[0]), std::length_error);
  std::vector<float> a(512), want(512);
  for (int i = 0; i < 50; i += 7) {
    bank.decode_row(uint64_t(i), a.data());
    want = rows[size_t(i)];
    act_quant_e2m1_e4m3(want, 16);
    EXPECT_EQ(a, want) << "row " << i;
  }
  std::vector<float> tile(3 * 512);
  bank.decode_range(47, tile);
  for (size_t k = 0; k < 3; ++k) {
    bank.decode_row(47 + k, a.data());
    EXPECT_TRUE(std::equal(a.begin(), a.end(), tile.begin() + std::ptrdiff_t(k * 512)));
  }
  EXPECT_THROW(bank.decode_range(48, tile), std::out_of_range);
  bank.truncate(10);
  EXPECT_EQ(bank.rows(), 10u);
  EXPECT_EQ(bank.bytes(), 10u * 288u);
  EXPECT_THROW(bank.row(10), std::out_of_range);
  EXPECT_THROW(bank.truncate(11), std::out_of_range);
  // A packed row re-appended is the same row.
  const std::vector<uint8_t> copy(bank.row(3), bank.row(3) + 288);
  bank.append_packed(copy);
  EXPECT_TRUE(std::equal(copy.begin(), copy.end(), bank.row(10)));
  EXPECT_THROW(bank.append(std::vector<float>(511)), std::invalid_argument);
  EXPECT_THROW(bank.append_packed(std::vector<uint8_t>(287)), std::invalid_argument);
  EXPECT_THROW((packed_kv_bank<kv_main_row>(0, 10)), std::invalid_argument);
}

TEST(PackedKvScratch, SelectedRowsOnce) {
  const uint64_t seed = fresh_seed();
  rng r(seed);
  packed_kv_bank<kv_index_row> bank(1, 300);
  for (int i = 0; i < 300; ++i) bank.append(r.normal_vec(128));
  packed_kv_scratch<kv_index_row> sc(37);
  std::vector<int32_t> idx;
  for (int i = 0; i < 37; ++i) idx.push_back(r.uniform(0, 1) < 0.1f ? -1 : int32_t(r.below(300)));
  const std::span<const float> out = sc.decode(bank, idx);
  ASSERT_EQ(out.size(), 37u * 128u);
  std::vector<float> a(128);
  for (size_t i = 0; i < idx.size(); ++i) {
    if (idx[i] < 0) {
      for (size_t j = 0; j < 128; ++j) EXPECT_EQ(out[i * 128 + j], 0.0f);
      continue;
    }
    bank.decode_row(uint64_t(idx[i]), a.data());
    EXPECT_TRUE(std::equal(a.begin(), a.end(), out.begin() + std::ptrdiff_t(i * 128))) << i;
  }
  idx.push_back(0);
  EXPECT_THROW(sc.decode(bank, idx), std::length_error);
  idx.resize(3);
  idx[1] = 300;
  EXPECT_THROW(sc.decode(bank, idx), std::out_of_range);
}

TEST(PackedKvState, ModelCardBytes) {
  const v41_state_config c;
  const v41_state_size z = v41_state_bytes(c, 4096);
  EXPECT_EQ(z.global_kv_bytes(), 3645440u);  // model card: 890 B/token at 4096 tokens
  EXPECT_EQ(z.global_kv_bytes(), 890u * 4096u);
  EXPECT_EQ(z.main_kv_bytes, 3u * 2048u * 288u + 4096u * 288u);
  EXPECT_EQ(z.index_k_bytes, 3u * 2048u * 68u + 4096u * 68u);
  EXPECT_EQ(z.window_bytes, 43u * 128u * 528u);
  EXPECT_EQ(z.compressor_bytes, 3u * 2u * 2u * 512u * 4u);
  EXPECT_EQ(z.engram_bytes, 12u);
  EXPECT_EQ(z.total(), 3645440u + 2906112u + 24576u + 12u);
  // Odd context: the ratio-2 banks hold ctx div 2 rows.
  const v41_state_size o = v41_state_bytes(c, 4097);
  EXPECT_EQ(o.global_kv_bytes(), 3u * 2048u * (288u + 68u) + 4097u * (288u + 68u));
  EXPECT_EQ(v41_state_bytes(c, 0).global_kv_bytes(), 0u);
  v41_state_config bad = c;
  bad.head_dim = 440;  // not a whole number of 16-value blocks
  EXPECT_THROW(v41_state_bytes(bad, 10), std::invalid_argument);
  bad = c;
  bad.kv_source_ratios = {2, 0};
  EXPECT_THROW(v41_state_bytes(bad, 10), std::invalid_argument);
}

// Sink attention (spec §3.3) of 64 heads over the rows a top-k picked: once over the f32 rows, once over the same
// rows packed and decoded into the shared scratch. K == V (MQA). Bound, per head, with Δ = max_k |q·(k − k̂)|·scale:
// the packed logits differ by ≤ Δ, so every probability moves by a factor in [e^-2Δ, e^2Δ] (the sink term is
// unchanged) and ‖o − ô‖∞ ≤ (e^{2Δ} − 1)·max_k‖k‖∞ + max_k‖k − k̂‖∞. Plus an NMSE bound over all 64×512 outputs.
TEST(PackedKvAttention, OverPackedRowsWithinBound) {
  const uint64_t seed = fresh_seed();
  rng r(seed);
  const uint32_t H = 64, D = 512;
  for (const uint32_t history : {700u, 2053u}) {
    packed_kv_bank<kv_main_row> bank(2, 2 * history);
    std::vector<float> f32rows;
    for (uint32_t j = 0; j < history; ++j) {
      std::vector<float> k = r.normal_vec(D);
      bank.append(k);
      f32rows.insert(f32rows.end(), k.begin(), k.end());
    }
    // A top-k of 512 distinct rows plus two masked slots.
    std::vector<int32_t> idx;
    std::vector<uint32_t> perm(history);
    for (uint32_t j = 0; j < history; ++j) perm[j] = j;
    std::shuffle(perm.begin(), perm.end(), r.g);
    for (uint32_t i = 0; i < 512; ++i) idx.push_back(int32_t(perm[i]));
    std::sort(idx.begin(), idx.end());
    idx.insert(idx.begin() + 100, -1);
    idx.push_back(-1);
    packed_kv_scratch<kv_main_row> scratch(514);
    const std::span<const float> dec = scratch.decode(bank, idx);
    const double scale = 1.0 / std::sqrt(double(D));
    std::vector<double> o_ref(size_t(H) * D), o_pk(size_t(H) * D);
    size_t fails = 0;
    for (uint32_t h = 0; h < H; ++h) {
      std::vector<float> q = r.normal_vec(D);
      for (auto& v : q) v *= 0.35f;  // logits with a spread of a few units, as in a trained model
      const double sink = double(r.normal());
      auto attend = [&](auto row_of, double* o) {
        std::vector<double> l(idx.size(), -INFINITY);
        double m = sink;
        for (size_t k = 0; k < idx.size(); ++k) {
          if (idx[k] < 0) continue;
          double s = 0;
          const float* kr = row_of(k);
          for (uint32_t d = 0; d < D; ++d) s += double(q[d]) * double(kr[d]);
          l[k] = s * scale;
          m = std::max(m, l[k]);
        }
        double den = std::exp(sink - m);
        std::vector<double> acc(D, 0.0);
        for (size_t k = 0; k < idx.size(); ++k) {
          if (idx[k] < 0) continue;
          const double e = std::exp(l[k] - m);
          den += e;
          const float* kr = row_of(k);
          for (uint32_t d = 0; d < D; ++d) acc[d] += e * double(kr[d]);
        }
        for (uint32_t d = 0; d < D; ++d) o[d] = acc[d] / den;
      };
      attend([&](size_t k) { return f32rows.data() + size_t(idx[k]) * D; }, o_ref.data() + size_t(h) * D);
      attend([&](size_t k) { return dec.data() + k * D; }, o_pk.data() + size_t(h) * D);
      double delta = 0, vmax = 0, dvmax = 0;
      for (size_t k = 0; k < idx.size(); ++k) {
        if (idx[k] < 0) continue;
        const float* a = f32rows.data() + size_t(idx[k]) * D;
        const float* b = dec.data() + k * D;
        double dl = 0;
        for (uint32_t d = 0; d < D; ++d) {
          dl += double(q[d]) * (double(a[d]) - double(b[d]));
          vmax = std::max(vmax, std::fabs(double(a[d])));
          dvmax = std::max(dvmax, std::fabs(double(a[d]) - double(b[d])));
        }
        delta = std::max(delta, std::fabs(dl) * scale);
      }
      const double bound = std::expm1(2 * delta) * vmax + dvmax;
      double worst = 0;
      for (uint32_t d = 0; d < D; ++d)
        worst = std::max(worst, std::fabs(o_ref[size_t(h) * D + d] - o_pk[size_t(h) * D + d]));
      if (worst > bound && fails++ < 3) ADD_FAILURE() << "head " << h << " err " << worst << " > bound " << bound;
    }
    const test::error_stats e = test::compare(o_pk.data(), o_ref.data(), o_ref.size());
    std::printf("[kv] sink attention over %u packed of %u rows: NMSE %.3e max_abs %.3e (ref max %.3g)\n", 512u, history,
                e.nmse, e.max_abs, e.ref_max);
    EXPECT_EQ(fails, 0u) << "seed " << seed;
    EXPECT_LE(e.nmse, kAttnNmse) << "seed " << seed;
  }
}
