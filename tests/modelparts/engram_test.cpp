// Engram (include/cmfx/model/engram.hpp, spec §4.4): the V4.1-Flash layout goldens (primes, row totals,
// multipliers), row ids against an independent 128-bit reference and against values computed with Python big
// integers, FP8 row decode against a float64 reference for every code, and the whole token → n-gram → row → value
// → gate → residual path against a float64 reference, contiguous vs chunked (bitwise), image spans, bad input.
#include <gtest/gtest.h>

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "cmfx/formats/mx.hpp"
#include "cmfx/model/engram.hpp"
#include "cmfx/model/engram_wkv.hpp"
#include "support/metrics.hpp"

using namespace cmfx;

namespace {

__extension__ typedef unsigned __int128 u128;  // exact products of the reference (GCC/Clang extension)

uint64_t fresh_seed() { return std::random_device{}() ^ (uint64_t(std::random_device{}()) << 32); }

// Whole path vs float64: the only f32 steps are the test's wkv dot products (plain f32 sums of 576 terms of
// magnitude up to ~10) and the final X += g·value; row ids and E are exact.
constexpr double kPathNmse = 1e-11;      // measured ≈ 2e-13
constexpr double kPathRelAbs = 1e-5;     // max |err| relative to max |ref|; measured ≈ 1.2e-6
// Gate alone at the real width (d = 5120): double sums, f32 output.
constexpr double kGateNmse = 1e-13;

/// Token map valid for a config: ids below `compressed_vocab` map to themselves shuffled in first-appearance order,
/// the rest repeat earlier ids at random.
std::vector<int32_t> random_map(std::mt19937_64& g, const engram_config& c) {
  std::vector<int32_t> m(c.vocab);
  int32_t next = 0;
  for (uint32_t i = 0; i < c.vocab; ++i) {
    const uint32_t left = c.vocab - i, need = c.compressed_vocab - uint32_t(next);
    const bool fresh = next == 0 || (need > 0 && (left == need || std::uniform_int_distribution<uint32_t>(0, 3)(g) == 0));
    m[i] = fresh ? next++ : std::uniform_int_distribution<int32_t>(0, next - 1)(g);
  }
  return m;
}

/// Independent row ids (spec formula) from the full history, with unsigned 128-bit products.
std::vector<int64_t> ref_row_ids(const engram_layout& lay, const std::vector<int32_t>& map,
                                 const std::vector<uint32_t>& tokens, const std::vector<uint8_t>& image) {
  const engram_config& c = lay.config();
  std::vector<int64_t> out;
  const int64_t pad = map[c.pad_token];
  for (size_t t = 0; t < tokens.size(); ++t) {
    std::vector<int64_t> sh;
    bool blocked = false;
    for (uint32_t s = 0; s < c.max_ngram; ++s) {
      blocked = blocked || t < s || image[t - s];
      sh.push_back(blocked ? pad : map[tokens[t - s]]);
    }
    for (size_t l = 0; l < lay.layer_count(); ++l) {
      const engram_layer_hash& L = lay.layer(l);
      u128 r = (u128)(sh[0]) * (u128)(L.mult[0]);
      for (uint32_t s = 1; s < c.max_ngram; ++s) {
        const u128 p = (u128)(sh[s]) * (u128)(L.mult[s]);
        EXPECT_LT(p, (u128)(std::numeric_limits<int64_t>::max()));
        r ^= p;
        uint64_t off = 0;
        for (uint32_t i = 0; i < (s - 1) * c.n_heads; ++i) off += uint64_t(L.prime[i]);
        for (uint32_t h = 0; h < c.n_heads; ++h) {
          const uint64_t pr = uint64_t(L.prime[(s - 1) * c.n_heads + h]);
          out.push_back(int64_t(uint64_t(r % pr) + off));
          off += pr;
        }
      }
    }
  }
  return out;
}

/// bf16 round-to-nearest-even of a double (exact arithmetic on the grid 2^(max(e, −126) − 7)).
double ref_bf16(double v) {
  if (v == 0) return v;
  const int e = std::max(int(std::floor(std::log2(std::fabs(v)))), -126);
  const double q = std::ldexp(1.0, e - 7);
  return std::nearbyint(v / q) * q;  // nearbyint rounds ties to even in the default mode
}

struct small_model {
  engram_config c;
  engram_layout lay;
  std::vector<int32_t> map_vec;
  engram_token_map map;
  std::vector<std::vector<uint8_t>> data, scale;
  std::vector<std::vector<float>> wkv;  // [kv_dim, embed_dim] per layer
  std::vector<std::vector<float>> qw, kw;
  std::vector<engram_layer_weights> w;

  explicit small_model(std::mt19937_64& g, uint32_t hidden) {
    c.layer_ids = {1, 14};
    c.n_heads = 3;
    c.head_dim = 64;
    c.vocab = 300;
    c.compressed_vocab = 200;
    c.pad_token = 2;
    c.engram_vocab = 1000;
    c.num_embeddings.clear();
    c.hidden = hidden;
    const int64_t lim = engram_multiplier_limit(c.compressed_vocab);
    c.multipliers.assign(2, {});
    for (auto& m : c.multipliers)
      for (uint32_t s = 0; s < c.max_ngram; ++s) m.push_back(std::uniform_int_distribution<int64_t>(0, lim / 2 - 1)(g) * 2 + 1);
    lay = engram_layout(c);
    map_vec = random_map(g, c);
    map = engram_token_map(map_vec, c);
    std::normal_distribution<float> nd(0.0f, 1.0f);
    for (size_t l = 0; l < 2; ++l) {
      const uint64_t rows = lay.layer(l).rows;
      std::vector<uint8_t> d(rows * c.head_dim), s(rows * c.head_dim / c.scale_block);
      for (auto& b : d) {
        do b = uint8_t(g());
        while ((b & 0x7F) == 0x7F);  // no NaN codes
      }
      for (auto& b : s) b = uint8_t(118 + g() % 8);
      data.push_back(std::move(d));
      scale.push_back(std::move(s));
      std::vector<float> W(size_t(c.kv_dim()) * c.embed_dim());
      for (auto& x : W) x = nd(g) * 0.05f;
      wkv.push_back(std::move(W));
      std::vector<float> q(size_t(c.hc) * c.hidden), k(q.size());
      for (auto& x : q) x = nd(g);
      for (auto& x : k) x = nd(g) * 0.3f;
      qw.push_back(std::move(q));
      kw.push_back(std::move(k));
    }
    for (size_t l = 0; l < 2; ++l) {
      engram_layer_weights lw;
      lw.table.data = data[l].data();
      lw.table.data_bytes = data[l].size();
      lw.table.scale = scale[l].data();
      lw.table.scale_bytes = scale[l].size();
      lw.table.scale_enc = scale_encoding::e8m0;
      lw.table.rows = lay.layer(l).rows;
      lw.table.cols = c.head_dim;
      engram_check_table(lw.table, lay.layer(l), c);
      lw.qk = engram_qk(qw[l], kw[l]);
      const float* W = wkv[l].data();
      const engram_config cc = c;
      lw.wkv = [W, cc](const float* E, uint64_t n, float* kv) {  // plain f32 loop, row by row
        for (uint64_t t = 0; t < n; ++t)
          for (uint32_t r = 0; r < cc.kv_dim(); ++r) {
            float s = 0;
            for (uint32_t j = 0; j < cc.embed_dim(); ++j) s += W[size_t(r) * cc.embed_dim() + j] * E[t * cc.embed_dim() + j];
            kv[t * cc.kv_dim() + r] = s;
          }
      };
      w.push_back(std::move(lw));
    }
  }

  /// float64 reference of layer l on token t: X (doubles, in place) from the reference row ids.
  void ref_apply(size_t l, const int64_t* rows, bool image, double* X) const {
    std::vector<double> E(c.embed_dim());
    for (uint32_t i = 0; i < c.cols(); ++i)
      for (uint32_t j = 0; j < c.head_dim; ++j) {
        const uint64_t r = uint64_t(rows[i]);
        const double v = double(e4m3::decode(data[l][r * c.head_dim + j])) *
                         std::ldexp(1.0, int(scale[l][r * (c.head_dim / c.scale_block) + j / c.scale_block]) - 127);
        E[size_t(i) * c.head_dim + j] = ref_bf16(v);
      }
    std::vector<double> kv(c.kv_dim(), 0.0);
    for (uint32_t r = 0; r < c.kv_dim(); ++r)
      for (uint32_t j = 0; j < c.embed_dim(); ++j) kv[r] += double(wkv[l][size_t(r) * c.embed_dim() + j]) * E[j];
    if (image) return;
    const uint32_t d = c.hidden;
    std::vector<double> g(c.hc);
    for (uint32_t cp = 0; cp < c.hc; ++cp) {
      double sx = 0, sk = 0, dot = 0;
      for (uint32_t i = 0; i < d; ++i) {
        const double x = X[cp * d + i], k = kv[cp * d + i];
        sx += x * x;
        sk += k * k;
        dot += x * (double(qw[l][cp * d + i]) * double(kw[l][cp * d + i])) * k;
      }
      dot *= 1.0 / std::sqrt(sx / d + double(c.eps)) / std::sqrt(sk / d + double(c.eps)) / std::sqrt(double(d));
      const double z = std::copysign(std::sqrt(std::max(std::fabs(dot), double(c.gate_clamp))), dot);
      g[cp] = 1.0 / (1.0 + std::exp(-z));
    }
    for (uint32_t cp = 0; cp < c.hc; ++cp)
      for (uint32_t i = 0; i < d; ++i) X[cp * d + i] += g[cp] * kv[size_t(c.hc) * d + i];
  }
};

/// A random token sequence with image spans (2–6 tokens long) on ~8 % of the positions.
void random_sequence(std::mt19937_64& g, uint32_t vocab, size_t n, std::vector<uint32_t>& tok, std::vector<uint8_t>& img) {
  tok.resize(n);
  img.assign(n, 0);
  for (size_t i = 0; i < n; ++i) {
    tok[i] = uint32_t(g() % vocab);
    if (g() % 40 == 0)
      for (size_t k = i; k < std::min(n, i + 2 + g() % 5); ++k) img[k] = 1;
  }
}

}  // namespace

TEST(EngramLayout, V41FlashGoldens) {
  const engram_config c;  // defaults = V4.1-Flash
  const engram_layout lay(c);
  ASSERT_EQ(lay.layer_count(), 2u);
  const engram_layer_hash& L1 = lay.layer(0);
  const engram_layer_hash& L14 = lay.layer(1);
  EXPECT_EQ(L1.prime[0], 16000057);
  EXPECT_EQ(L1.prime[1], 16000079);
  EXPECT_EQ(L1.prime[2], 16000081);
  EXPECT_EQ(L1.rows, 384006168u);   // engram_num_embeddings of layer 1
  EXPECT_EQ(L14.rows, 384016682u);  // and of layer 14
  EXPECT_EQ(L1.prime[23], 16000463);  // Python big-int recomputation
  EXPECT_EQ(L14.prime[23], 16000889);
  EXPECT_GT(L14.prime[0], L1.prime[23]);  // never reused across layers
  for (size_t l = 0; l < 2; ++l)
    for (uint32_t i = 0; i < c.cols(); ++i) {
      const engram_layer_hash& L = lay.layer(l);
      EXPECT_TRUE(engram_is_prime(uint64_t(L.prime[i])));
      if (i) {
        EXPECT_GT(L.prime[i], L.prime[i - 1]);
        EXPECT_EQ(L.offset[i], L.offset[i - 1] + L.prime[i - 1]);
        for (int64_t p = L.prime[i - 1] + 1; p < L.prime[i]; ++p) EXPECT_FALSE(engram_is_prime(uint64_t(p))) << p;
      }
    }
  EXPECT_EQ(L1.offset[0], 0);
  EXPECT_EQ(lay.index_of(14), 1u);
  EXPECT_THROW(lay.index_of(2), std::out_of_range);
  // Multiplier bound of the spec: (INT64_MAX div 99092) div 2 = 46,539,438,283,891; numpy draws v < bound, m = 2v+1.
  const int64_t bound = (std::numeric_limits<int64_t>::max() / 99092) / 2;
  EXPECT_EQ(bound, 46539438283891);
  const std::vector<std::vector<int64_t>> want = {
      {76632096046245, 4839876093313, 35959672319349, 73987337458391},
      {67716810739261, 51510806800915, 30921347202721, 82619226485591}};
  for (size_t l = 0; l < 2; ++l) {
    EXPECT_EQ(lay.layer(l).mult, want[l]);
    for (const int64_t m : lay.layer(l).mult) {
      EXPECT_EQ(m % 2, 1);
      EXPECT_LT(m, 2 * bound);
    }
  }
}

TEST(EngramLayout, RejectsBadConfig) {
  engram_config c;
  c.num_embeddings[1] += 1;
  EXPECT_THROW((engram_layout(c)), std::invalid_argument);
  c = engram_config{};
  c.multipliers[0][2] = engram_multiplier_limit(c.compressed_vocab) + 1;
  EXPECT_THROW((engram_layout(c)), std::invalid_argument);
  c = engram_config{};
  c.multipliers[0].pop_back();
  EXPECT_THROW((engram_layout(c)), std::invalid_argument);
  c = engram_config{};
  c.multipliers.pop_back();
  EXPECT_THROW((engram_layout(c)), std::invalid_argument);
  c = engram_config{};
  c.head_dim = 250;
  EXPECT_THROW((engram_layout(c)), std::invalid_argument);
}

TEST(EngramTokenMap, Validation) {
  engram_config c;
  c.vocab = 6;
  c.compressed_vocab = 4;
  c.pad_token = 2;
  EXPECT_NO_THROW((engram_token_map({0, 1, 1, 2, 3, 0}, c)));
  EXPECT_EQ(engram_token_map({0, 1, 1, 2, 3, 0}, c).pad(), 1);
  EXPECT_THROW((engram_token_map({0, 1, 1, 2, 3}, c)), std::invalid_argument);     // wrong length
  EXPECT_THROW((engram_token_map({0, 2, 1, 2, 3, 0}, c)), std::invalid_argument);  // skips id 1
  EXPECT_THROW((engram_token_map({0, 1, 1, 2, 2, 0}, c)), std::invalid_argument);  // 3 ids, config says 4
  EXPECT_THROW((engram_token_map({0, -1, 1, 2, 3, 0}, c)), std::invalid_argument);
  const engram_token_map m({0, 1, 1, 2, 3, 0}, c);
  EXPECT_THROW(m(6), std::out_of_range);
}

// Row ids of the real layout: values computed with Python big integers from the spec formula for a fixed sequence,
// and random sequences against the 128-bit reference.
TEST(EngramRowIds, V41FlashGoldenAndReference) {
  const engram_config c;
  const engram_layout lay(c);
  std::vector<int32_t> mv(c.vocab);
  for (uint32_t i = 0; i < c.vocab; ++i) mv[i] = int32_t(std::min<uint32_t>(i, c.compressed_vocab - 1));
  const engram_token_map map(mv, c);
  const std::vector<uint32_t> seq = {0, 5, 129279, 12345, 7, 129264, 42, 43, 44, 2};
  const std::vector<uint8_t> img = {0, 0, 0, 0, 0, 1, 0, 0, 0, 0};
  engram_ngram_state st(c.max_ngram);
  std::vector<int64_t> ids(seq.size() * 2 * 24);
  engram_hash_tokens(lay, map, st, seq, img, ids);
  struct golden { size_t t, l; int64_t c0, c7, c8, c23; };
  const golden gold[] = {{0, 0, 5702652, 121476532, 131476717, 380066193}, {0, 1, 14361964, 120604547, 132225184, 372375971},
                         {3, 0, 9897246, 115060326, 133992457, 381091871}, {3, 1, 3178723, 126215113, 141503812, 376891608},
                         {4, 0, 6730274, 124267974, 139112604, 374935307}, {4, 1, 13662559, 114679773, 142162964, 379880175},
                         {6, 0, 5873501, 118868640, 140595404, 382017429}, {6, 1, 10351927, 124020605, 133745174, 380843614},
                         {8, 0, 6071950, 121259382, 135873813, 372496064}, {8, 1, 9888051, 112032198, 135835294, 369646820},
                         {9, 0, 13840493, 118252736, 140397732, 377542242}, {9, 1, 9564164, 127402819, 140167964, 370257809}};
  for (const golden& g : gold) {
    const int64_t* r = ids.data() + (g.t * 2 + g.l) * 24;
    EXPECT_EQ(r[0], g.c0) << "t " << g.t << " layer " << g.l;
    EXPECT_EQ(r[7], g.c7) << "t " << g.t << " layer " << g.l;
    EXPECT_EQ(r[8], g.c8) << "t " << g.t << " layer " << g.l;
    EXPECT_EQ(r[23], g.c23) << "t " << g.t << " layer " << g.l;
  }
  const uint64_t seed = fresh_seed();
  std::mt19937_64 g(seed);
  const engram_token_map rmap(random_map(g, c), c);
  std::vector<int32_t> rmv(c.vocab);
  for (uint32_t i = 0; i < c.vocab; ++i) rmv[i] = rmap(i);
  for (size_t n : {1u, 4u, 333u}) {
    std::vector<uint32_t> tok;
    std::vector<uint8_t> im;
    random_sequence(g, c.vocab, n, tok, im);
    engram_ngram_state s2(c.max_ngram);
    std::vector<int64_t> got(n * 48);
    engram_hash_tokens(lay, rmap, s2, tok, im, got);
    EXPECT_EQ(got, ref_row_ids(lay, rmv, tok, im)) << "n " << n << " seed " << seed;
    for (size_t i = 0; i < got.size(); ++i) {
      const size_t l = (i / 24) % 2;
      EXPECT_LT(uint64_t(got[i]), lay.layer(l).rows);
    }
  }
  EXPECT_THROW(engram_hash_tokens(lay, rmap, st, seq, img, std::span<int64_t>(ids.data(), 10)), std::invalid_argument);
  const std::vector<uint32_t> bad = {c.vocab};
  std::vector<int64_t> one(48);
  EXPECT_THROW(engram_hash_tokens(lay, rmap, st, bad, {}, one), std::out_of_range);
}

// Every E4M3 code under scales from 2^-127 (bf16 rounding of subnormal products) to 2^127.
TEST(EngramTable, RowDecodeEveryCode) {
  engram_config c;
  c.head_dim = 256;
  const uint32_t ks[] = {0, 1, 2, 3, 5, 8, 9, 60, 120, 127, 131, 200, 240};
  const uint64_t rows = std::size(ks);
  std::vector<uint8_t> data(rows * 256), sc(rows * 8);
  for (uint64_t r = 0; r < rows; ++r) {
    for (uint32_t j = 0; j < 256; ++j) data[r * 256 + j] = uint8_t(j);
    for (uint32_t b = 0; b < 8; ++b) sc[r * 8 + b] = uint8_t(ks[r] + (b % 2));
  }
  matrix_view t{data.data(), data.size(), sc.data(), sc.size(), scale_encoding::e8m0, rows, 256};
  std::vector<float> out(256);
  size_t rounded = 0;
  for (uint64_t r = 0; r < rows; ++r) {
    engram_decode_row(t, 32, int64_t(r), out.data());
    for (uint32_t j = 0; j < 256; ++j) {
      const float e = e4m3::decode(uint8_t(j));
      if (std::isnan(e)) {
        EXPECT_TRUE(std::isnan(out[j]));
        continue;
      }
      const double v = double(e) * std::ldexp(1.0, int(sc[r * 8 + j / 32]) - 127);
      const double want = ref_bf16(v);
      rounded += want != v;
      EXPECT_EQ(double(out[j]), want) << "code " << j << " k " << int(sc[r * 8 + j / 32]);
      // and the trait path: bf16(f32 product) always
      EXPECT_EQ(out[j], bfloat16::decode(bfloat16::encode(e * e8m0_to_f32(sc[r * 8 + j / 32]))));
    }
  }
  EXPECT_GT(rounded, 0u);  // the subnormal branch was exercised
  EXPECT_THROW(engram_decode_row(t, 32, int64_t(rows), out.data()), std::out_of_range);
  EXPECT_THROW(engram_decode_row(t, 32, -1, out.data()), std::out_of_range);
}

// token → n-gram → row → value → gate → residual on two layers, against the float64 reference; then the same
// sequence in random chunks (state carried) must give bitwise identical row ids and stream.
TEST(EngramPath, WholePathContiguousAndChunked) {
  const uint64_t seed = fresh_seed();
  std::mt19937_64 g(seed);
  for (const uint32_t hidden : {96u, 136u}) {  // 136: not a multiple of 8/32
    small_model m(g, hidden);
    const engram_config& c = m.c;
    const size_t n = 61, hd = size_t(c.hc) * c.hidden;
    std::vector<uint32_t> tok;
    std::vector<uint8_t> img;
    random_sequence(g, c.vocab, n, tok, img);
    img[7] = 1;  // at least one image token
    std::normal_distribution<float> nd(0.0f, 1.0f);
    std::vector<float> X0(n * hd);
    for (auto& x : X0) x = nd(g);

    // Contiguous.
    engram_ngram_state st(c.max_ngram);
    std::vector<int64_t> ids(n * 2 * c.cols());
    engram_hash_tokens(m.lay, m.map, st, tok, img, ids);
    EXPECT_EQ(ids, ref_row_ids(m.lay, m.map_vec, tok, img)) << "seed " << seed;
    std::vector<float> X = X0;
    engram_scratch scr;
    for (size_t l = 0; l < 2; ++l) engram_apply(c, m.w[l], X, ids.data() + l * c.cols(), 2 * c.cols(), img, scr);

    // Reference.
    std::vector<double> Xr(X0.begin(), X0.end());
    for (size_t t = 0; t < n; ++t)
      for (size_t l = 0; l < 2; ++l) m.ref_apply(l, ids.data() + (t * 2 + l) * c.cols(), img[t] != 0, Xr.data() + t * hd);
    const test::error_stats e = test::compare(X.data(), Xr.data(), X.size());
    std::printf("[engram] whole path d=%u: NMSE %.3e max_abs %.3e (ref max %.3g)\n", hidden, e.nmse, e.max_abs, e.ref_max);
    EXPECT_LE(e.nmse, kPathNmse) << "seed " << seed;
    EXPECT_LE(e.max_abs, kPathRelAbs * e.ref_max) << "seed " << seed;
    EXPECT_EQ(e.nonfinite, 0u);
    // Image tokens are untouched, text tokens moved.
    for (size_t t = 0; t < n; ++t) {
      const bool same = std::equal(X.begin() + std::ptrdiff_t(t * hd), X.begin() + std::ptrdiff_t((t + 1) * hd),
                                   X0.begin() + std::ptrdiff_t(t * hd));
      EXPECT_EQ(same, img[t] != 0) << "token " << t;
    }

    // Chunked: random chunk sizes 1..9, state carried.
    engram_ngram_state cs(c.max_ngram);
    std::vector<float> Xc = X0;
    std::vector<int64_t> idc;
    for (size_t p = 0; p < n;) {
      const size_t len = std::min<size_t>(n - p, 1 + g() % 9);
      std::vector<int64_t> part(len * 2 * c.cols());
      engram_hash_tokens(m.lay, m.map, cs, std::span<const uint32_t>(tok.data() + p, len),
                         std::span<const uint8_t>(img.data() + p, len), part);
      std::span<float> xs(Xc.data() + p * hd, len * hd);
      for (size_t l = 0; l < 2; ++l)
        engram_apply(c, m.w[l], xs, part.data() + l * c.cols(), 2 * c.cols(), std::span<const uint8_t>(img.data() + p, len),
                     scr);
      idc.insert(idc.end(), part.begin(), part.end());
      p += len;
    }
    EXPECT_EQ(idc, ids);
    bool bitwise = Xc.size() == X.size();
    for (size_t i = 0; bitwise && i < X.size(); ++i) bitwise = std::bit_cast<uint32_t>(Xc[i]) == std::bit_cast<uint32_t>(X[i]);
    EXPECT_TRUE(bitwise) << "chunked != contiguous, seed " << seed;
  }
}

// The wkv adapter over the CPU GEMM (f32 and FP8 32x32 weights) against float64.
TEST(EngramPath, WkvGemmAdapter) {
  const uint64_t seed = fresh_seed();
  std::mt19937_64 g(seed);
  engram_config c;
  c.hidden = 40;
  c.n_heads = 2;
  c.head_dim = 64;  // embed 384, kv 200
  std::normal_distribution<float> nd(0.0f, 1.0f);
  std::vector<float> W(size_t(c.kv_dim()) * c.embed_dim()), E(3 * c.embed_dim());
  for (auto& x : W) x = nd(g);
  for (auto& x : E) x = nd(g);
  thread_pool pool(1);
  const auto& k = best_cpu_kernels();
  const encoded_matrix enc = fmt_fp8_b32::encode(W.data(), c.kv_dim(), c.embed_dim());
  matrix_view v{enc.data.data(), enc.data.size(), enc.scale.data(), enc.scale.size(), scale_encoding::e8m0, c.kv_dim(),
                c.embed_dim()};
  const engram_wkv_fn f = engram_wkv_gemm(pool, k, format::fp8_b32, v, c);
  std::vector<float> kv(3 * c.kv_dim()), row(c.embed_dim());
  f(E.data(), 3, kv.data());
  std::vector<double> want(kv.size());
  for (uint32_t r = 0; r < c.kv_dim(); ++r) {
    fmt_fp8_b32::decode_row(v, r, row.data());
    for (size_t t = 0; t < 3; ++t) {
      double s = 0;
      for (uint32_t j = 0; j < c.embed_dim(); ++j) s += double(row[j]) * double(E[t * c.embed_dim() + j]);
      want[t * c.kv_dim() + r] = s;
    }
  }
  const test::error_stats e = test::compare(kv.data(), want.data(), kv.size());
  EXPECT_LE(e.nmse, 1e-10) << "seed " << seed;
  matrix_view wrong = v;
  wrong.rows -= 1;
  EXPECT_THROW(engram_wkv_gemm(pool, k, format::fp8_b32, wrong, c), std::invalid_argument);
}

// The gate at the real width (d = 5120, hc = 4), plus the copysign edge: dot = +0 gives σ(+sqrt(1e-6)).
TEST(EngramGate, RealWidthAndEdges) {
  const uint64_t seed = fresh_seed();
  std::mt19937_64 g(seed);
  std::normal_distribution<float> nd(0.0f, 1.0f);
  const uint32_t hc = 4, d = 5120;
  std::vector<float> X(hc * d), key(hc * d), val(d), qk(hc * d);
  for (auto& x : X) x = nd(g);
  for (auto& x : key) x = nd(g) * 3.0f;
  for (auto& x : val) x = nd(g);
  for (auto& x : qk) x = nd(g) * 2.0f;
  std::vector<double> want(X.begin(), X.end());
  for (uint32_t c = 0; c < hc; ++c) {
    double sx = 0, sk = 0, dot = 0;
    for (uint32_t i = 0; i < d; ++i) {
      sx += double(X[c * d + i]) * X[c * d + i];
      sk += double(key[c * d + i]) * key[c * d + i];
      dot += double(X[c * d + i]) * qk[c * d + i] * key[c * d + i];
    }
    dot /= std::sqrt(sx / d + 1e-20) * std::sqrt(sk / d + 1e-20) * std::sqrt(double(d));
    const double gate = 1.0 / (1.0 + std::exp(-std::copysign(std::sqrt(std::max(std::fabs(dot), 1e-6)), dot)));
    for (uint32_t i = 0; i < d; ++i) want[c * d + i] += gate * val[i];
  }
  std::vector<float> got = X;
  engram_gate_add(got.data(), key.data(), val.data(), qk.data(), hc, d, 1e-20f, 1e-6f, false);
  const test::error_stats e = test::compare(got.data(), want.data(), got.size());
  std::printf("[engram] gate d=5120: NMSE %.3e max_abs %.3e\n", e.nmse, e.max_abs);
  EXPECT_LE(e.nmse, kGateNmse) << "seed " << seed;

  std::vector<float> zero(hc * d, 0.0f);
  got = X;
  const auto gz = engram_gate_add(got.data(), key.data(), val.data(), zero.data(), hc, d, 1e-20f, 1e-6f, false);
  for (uint32_t c = 0; c < hc; ++c) EXPECT_NEAR(gz[c], 1.0 / (1.0 + std::exp(-0.001)), 1e-7);
  got = X;
  const auto gi = engram_gate_add(got.data(), key.data(), val.data(), qk.data(), hc, d, 1e-20f, 1e-6f, true);
  for (uint32_t c = 0; c < hc; ++c) EXPECT_EQ(gi[c], 0.0f);
  EXPECT_EQ(got, X);
}
