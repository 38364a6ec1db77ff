// Scalar element formats: every code decoded against an independent formula, encode checked for exact
// round trips, ties-to-even at every midpoint, overflow and NaN rules.
#include "cmfx/formats/exmy.hpp"

#include <gtest/gtest.h>

#include <bit>
#include <cmath>
#include <random>
#include <immintrin.h>
#include <algorithm>

#include "support/hex.hpp"

namespace {

// Independent reference decoders written straight from the OCP MX v1.0 spec tables.
double ref_e4m3(uint8_t c) {
  const int s = c >> 7, e = (c >> 3) & 15, m = c & 7;
  if (e == 15 && m == 7) return NAN;
  const double v = e == 0 ? (m / 8.0) * std::pow(2.0, -6) : (1.0 + m / 8.0) * std::pow(2.0, e - 7);
  return s ? -v : v;
}
double ref_e2m1(uint8_t c) {
  static const double mag[8] = {0, 0.5, 1, 1.5, 2, 3, 4, 6};
  return (c & 8) ? -mag[c & 7] : mag[c & 7];
}
double ref_e8m0(uint8_t c) { return c == 255 ? NAN : std::pow(2.0, int(c) - 127); }

template <class F>
void check_all_codes(double (*ref)(uint8_t)) {
  for (uint32_t c = 0; c < F::code_count; ++c) {
    const float got = F::decode(typename F::storage(c));
    const double want = ref(uint8_t(c));
    if (std::isnan(want)) {
      EXPECT_TRUE(std::isnan(got)) << "code " << c;
      continue;
    }
    EXPECT_EQ(double(got), want) << "code " << c;
    EXPECT_EQ(std::signbit(got), std::signbit(want)) << "code " << c;  // -0 stays -0
  }
}

// For all finite codes: encode(decode(c)) == c, and midpoints between neighbours round to the even code.
template <class F>
void check_encode_roundtrip_and_ties() {
  std::vector<std::pair<double, uint32_t>> pos;  // non-negative finite values with their codes
  for (uint32_t c = 0; c < F::code_count; ++c) {
    const float v = F::decode(typename F::storage(c));
    if (std::isnan(v) || std::isinf(v)) continue;
    const uint32_t back = F::encode(v);
    EXPECT_EQ(back, c) << "code " << c << " value " << v;
    if (!std::signbit(v)) pos.emplace_back(v, c);
  }
  std::sort(pos.begin(), pos.end());
  for (size_t i = 0; i + 1 < pos.size(); ++i) {
    const double a = pos[i].first, b = pos[i + 1].first, mid = (a + b) / 2;
    if (float(mid) != mid) continue;  // midpoint not representable in f32 (never for these formats)
    const uint32_t even = (pos[i].second & 1) == 0 ? pos[i].second : pos[i + 1].second;
    EXPECT_EQ(F::encode(float(mid)), even) << "midpoint of " << a << " and " << b;
    EXPECT_EQ(F::encode(std::nextafter(float(mid), 0.0f)), pos[i].second) << "below midpoint " << mid;
    EXPECT_EQ(F::encode(std::nextafter(float(mid), INFINITY)), pos[i + 1].second) << "above midpoint " << mid;
  }
}

}  // namespace

TEST(E4M3, AllCodesDecode) { check_all_codes<cmfx::e4m3>(ref_e4m3); }
TEST(E2M1, AllCodesDecode) { check_all_codes<cmfx::e2m1>(ref_e2m1); }
TEST(UE8M0, AllCodesDecode) { check_all_codes<cmfx::ue8m0>(ref_e8m0); }

// OCP reference points pinned by convert.rs `fp8_e4m3_decodes_the_ocp_reference_points` (cmf-format.md §2.4).
TEST(E4M3, ReferencePoints) {
  EXPECT_EQ(cmfx::e4m3::decode(0x00), 0.0f);
  EXPECT_EQ(cmfx::e4m3::decode(0x38), 1.0f);
  EXPECT_EQ(cmfx::e4m3::decode(0xB8), -1.0f);
  EXPECT_EQ(cmfx::e4m3::decode(0x3C), 1.5f);
  EXPECT_EQ(cmfx::e4m3::decode(0x40), 2.0f);
  EXPECT_EQ(cmfx::e4m3::decode(0x01), std::ldexp(1.0f, -9));
  EXPECT_EQ(cmfx::e4m3::decode(0x7E), 448.0f);
  EXPECT_TRUE(std::isnan(cmfx::e4m3::decode(0x7F)));
  EXPECT_TRUE(std::isnan(cmfx::e4m3::decode(0xFF)));
  EXPECT_EQ(cmfx::e4m3::max_finite(), 448.0);
}

TEST(E4M3, EncodeRoundTripAndTies) { check_encode_roundtrip_and_ties<cmfx::e4m3>(); }
TEST(E2M1, EncodeRoundTripAndTies) { check_encode_roundtrip_and_ties<cmfx::e2m1>(); }
TEST(Half, EncodeRoundTripAndTies) { check_encode_roundtrip_and_ties<cmfx::half>(); }
TEST(BFloat16, EncodeRoundTripAndTies) { check_encode_roundtrip_and_ties<cmfx::bfloat16>(); }

TEST(E4M3, OverflowAndNaN) {
  EXPECT_EQ(cmfx::e4m3::encode(460.0f), 0x7E);       // rounds down to 448
  EXPECT_EQ(cmfx::e4m3::encode(464.0f), 0x7E);       // tie between 448 (even) and the NaN slot
  EXPECT_EQ(cmfx::e4m3::encode(470.0f), 0x7F);       // torch's non-saturating cast gives NaN
  EXPECT_EQ(cmfx::e4m3::encode(470.0f, true), 0x7E);  // saturating
  EXPECT_EQ(cmfx::e4m3::encode(-1e9f, true), 0xFE);
  EXPECT_EQ(cmfx::e4m3::encode(NAN), 0x7F);
  EXPECT_EQ(cmfx::e4m3::encode(-0.0f), 0x80);
  EXPECT_EQ(cmfx::e4m3::encode(std::ldexp(1.0f, -10)), 0x00);  // half of the smallest subnormal: tie to 0
  EXPECT_EQ(cmfx::e4m3::encode(std::ldexp(1.5f, -10)), 0x01);
}

TEST(E2M1, SaturatesAndHasNoNaN) {
  EXPECT_EQ(cmfx::e2m1::encode(100.0f), 0x7);
  EXPECT_EQ(cmfx::e2m1::encode(-7.0f), 0xF);
  EXPECT_EQ(cmfx::e2m1::encode(5.0f), 0x6);   // tie between 4 (even code 6) and 6 (code 7)
  EXPECT_EQ(cmfx::e2m1::encode(0.25f), 0x0);  // tie between 0 and 0.5: even code 0
  EXPECT_EQ(cmfx::e2m1::encode(-0.0f), 0x8);
}

TEST(UE8M0, EncodeRules) {
  for (int k = 0; k < 255; ++k) EXPECT_EQ(cmfx::ue8m0::encode(std::ldexp(1.0f, k - 127)), k);
  EXPECT_EQ(cmfx::ue8m0::encode(-1.0f), 0xFF);
  EXPECT_EQ(cmfx::ue8m0::encode(NAN), 0xFF);
  EXPECT_EQ(cmfx::ue8m0::encode(0.0f), 0x00);
  EXPECT_EQ(cmfx::ue8m0::encode(1.4f), 127);
  EXPECT_EQ(cmfx::ue8m0::encode(1.6f), 128);
  EXPECT_EQ(cmfx::ue8m0::encode(1e38f * 10.0f), 0xFF);        // above 2^127 overflows to NaN
  EXPECT_EQ(cmfx::ue8m0::encode(1e38f * 10.0f, true), 0xFE);  // saturating
}

// f16: all 65536 codes decode exactly as the fast path; specials; cortiq's repo test values (§2.0).
TEST(Half, AllCodesAndRepoValues) {
  for (uint32_t c = 0; c < 65536; ++c) {
    const float a = cmfx::half::decode(uint16_t(c)), b = cmfx::f16_to_f32(uint16_t(c));
    ASSERT_EQ(std::bit_cast<uint32_t>(a), std::bit_cast<uint32_t>(b)) << "code " << c;
  }
  EXPECT_EQ(cmfx::f16_to_f32(0x0001), 5.9604645e-8f);
  EXPECT_EQ(cmfx::f16_to_f32(0x03FF), 6.097555e-5f);
  EXPECT_EQ(cmfx::f16_to_f32(0x812b), -1.7821789e-5f);
  EXPECT_EQ(cmfx::f16_to_f32(0x0400), 6.1035156e-5f);
  EXPECT_EQ(cmfx::f32_to_f16(65520.0f), 0x7c00);  // IEEE overflow to Inf
  EXPECT_EQ(cmfx::f32_to_f16(65519.0f), 0x7bff);
  EXPECT_EQ(cmfx::f32_to_f16(INFINITY), 0x7c00);
  EXPECT_EQ(cmfx::f32_to_f16(-INFINITY), 0xfc00);
  EXPECT_EQ(cmfx::f32_to_f16(NAN), 0x7e00);
  EXPECT_EQ(cmfx::f32_to_f16(std::ldexp(1.0f, -25)), 0x0000);  // IEEE RNE tie to 0 (cortiq gives 0x0001)
  EXPECT_EQ(cmfx::f32_to_f16(std::ldexp(1.5f, -25)), 0x0001);
  EXPECT_EQ(cmfx::f32_to_f16(-0.0f), 0x8000);
}

// f16 encode against the CPU's own F16C conversion (an independent implementation) on random inputs.
__attribute__((target("f16c"))) static uint16_t hw_f16(float x) { return uint16_t(_cvtss_sh(x, 0)); }
TEST(Half, EncodeMatchesF16C) {
  if (!__builtin_cpu_supports("f16c")) GTEST_SKIP() << "no F16C on this CPU";
  const uint64_t seed = cmfx::test::fresh_seed();
  std::mt19937_64 rng(seed);
  for (int i = 0; i < 2000000; ++i) {
    // Random bit patterns concentrated around the f16 range, plus fully random ones.
    uint32_t bits = uint32_t(rng());
    if (i & 1) bits = (bits & 0x80FFFFFFu) | (uint32_t(96 + rng() % 64) << 23);
    const float x = std::bit_cast<float>(bits);
    if (std::isnan(x)) continue;
    ASSERT_EQ(cmfx::f32_to_f16(x), hw_f16(x)) << "x=" << x << " bits=" << bits << " seed " << seed;
  }
}

TEST(BFloat16, EncodeMatchesBitTrick) {
  const uint64_t seed = cmfx::test::fresh_seed();
  std::mt19937_64 rng(seed);
  for (int i = 0; i < 1000000; ++i) {
    const uint32_t bits = uint32_t(rng());
    const float x = std::bit_cast<float>(bits);
    if (std::isnan(x)) continue;
    const uint32_t rounded = bits + 0x7FFFu + ((bits >> 16) & 1u);
    uint16_t want = uint16_t(rounded >> 16);
    ASSERT_EQ(cmfx::f32_to_bf16(x), want) << "bits=" << bits << " seed " << seed;
    EXPECT_EQ(std::bit_cast<uint32_t>(cmfx::bf16_to_f32(want)), uint32_t(want) << 16);
  }
}
