// q4tp / q2tp golden values of cmf-format.md §2.1-2.2, reproduced bit for bit: ladders, code packing, the
// worked 2x64 tensors (decode and encode), all-zero rows.
#include <gtest/gtest.h>

#include <bit>
#include <cmath>

#include "cmfx/core/hash64.hpp"
#include "cmfx/formats/ladder.hpp"
#include "support/hex.hpp"

using namespace cmfx;
using cmfx::test::from_hex;
using cmfx::test::hex64;
using cmfx::test::to_hex;

namespace {
uint32_t bits(float f) { return std::bit_cast<uint32_t>(f); }

// The encoder input of the worked example: x_i = sinf(i*0.37f) * (i%64<32 ? 0.02 : 0.5) * (i>=64 ? 3 : 1).
std::vector<float> worked_input() {
  std::vector<float> x(128);
  for (int i = 0; i < 128; ++i) x[i] = ::sinf(float(i) * 0.37f) * (i % 64 < 32 ? 0.02f : 0.5f) * (i >= 64 ? 3.0f : 1.0f);
  return x;
}
const char* kQ4tpWorked =
    "a8eceebd7935224286caeede9b572322 53b8fdffce6924003185dbffef9c4602 2163b8edffcd7924113286dbfedf9b46 "
    "122164b8edffbd6924114286dbfedf9b 3ac8cb30 dec6cc30 c103 e003";
const char* kQ2tpWorked =
    "fabf1600e9ff5a00a4ff6b0190feaf05 50fabf1640e9ff5a00a4ff6b0190feaf 3cc6f530 a5c4f430 c103 c103";

std::vector<float> decode_all(const std::vector<uint8_t>& payload, bool two, uint64_t rows, uint64_t cols) {
  matrix_view v{payload.data(), payload.size(), nullptr, 0, scale_encoding::none, rows, cols};
  std::vector<float> out(rows * cols);
  for (uint64_t r = 0; r < rows; ++r) {
    if (two) fmt_q2tp::decode_row(v, r, out.data() + r * cols);
    else fmt_q4tp::decode_row(v, r, out.data() + r * cols);
  }
  return out;
}
uint64_t hash_floats(const std::vector<float>& f) {
  return hash64(reinterpret_cast<const uint8_t*>(f.data()), f.size() * 4);
}
}  // namespace

TEST(Q4tp, LadderGoldenBits) {
  const ladder::table t = ladder::build(0xC200, 0x3400);  // lo = -3, step = 0.25
  EXPECT_EQ(t[0], 0.125f);
  EXPECT_EQ(bits(t[1]), 0x3e1837f0u);
  EXPECT_EQ(bits(t[2]), 0x3e3504f2u);
  EXPECT_EQ(bits(t[4]), 0x3e7ffffdu);  // not 0.25: the repeated product is the definition
  EXPECT_EQ(bits(t[12]), 0x3f7ffff9u);
  EXPECT_EQ(bits(t[31]), 0x41d744eeu);
  EXPECT_FLOAT_EQ(t[31], 26.90865707f);
}

TEST(Ladder, CodePackingGolden) {
  uint8_t a[5] = {};
  const uint32_t ca[8] = {1, 5, 9, 13, 17, 21, 25, 29};
  for (int g = 0; g < 8; ++g) ladder::put_code(a, g, ca[g]);
  EXPECT_EQ(to_hex(a, 5), "a1a4166bee");
  for (int g = 0; g < 8; ++g) EXPECT_EQ(ladder::get_code(a, g), ca[g]);
  uint8_t b[2] = {};
  const uint32_t cb[3] = {31, 30, 29};
  for (int g = 0; g < 3; ++g) ladder::put_code(b, g, cb[g]);
  EXPECT_EQ(to_hex(b, 2), "df77");
  EXPECT_EQ(ladder::code_stride(3), 2u);
  EXPECT_EQ(ladder::code_stride(8), 5u);
  // q2tp code bytes from vacuum.rs: (0,7) -> e0 00, (12,12) -> 8c 01.
  uint8_t c[2] = {};
  ladder::put_code(c, 0, 0);
  ladder::put_code(c, 1, 7);
  EXPECT_EQ(to_hex(c, 2), "e000");
  uint8_t d[2] = {};
  ladder::put_code(d, 0, 12);
  ladder::put_code(d, 1, 12);
  EXPECT_EQ(to_hex(d, 2), "8c01");
}

TEST(Q4tp, WorkedTensorDecode) {
  const auto payload = from_hex(kQ4tpWorked);
  ASSERT_EQ(payload.size(), 76u);
  ASSERT_EQ(payload.size(), fmt_q4tp::data_bytes(2, 64));
  EXPECT_EQ(hex64(hash64(payload)), "5cd4c1dd9a840e90");
  const auto w = decode_all(payload, false, 2, 64);
  EXPECT_EQ(w[0], 0.0f);
  EXPECT_EQ(w[1], 6.3310275e-3f);
  EXPECT_EQ(w[2], 1.2662055e-2f);
  EXPECT_EQ(w[3], 1.8993083e-2f);
  EXPECT_EQ(w[32], -0.32134885f);
  EXPECT_EQ(w[33], -0.1928093f);
  EXPECT_EQ(w[34], 0.0f);
  EXPECT_EQ(w[35], 0.1928093f);
  EXPECT_EQ(w[96], -1.2876551f);
  EXPECT_EQ(w[97], -1.5022644f);
  EXPECT_EQ(w[127], 0.21460919f);
  EXPECT_EQ(hex64(hash_floats(w)), "1022db9e96c2ec83");
}

TEST(Q4tp, WorkedTensorEncode) {
  const auto x = worked_input();
  ASSERT_EQ(hex64(hash_floats(x)), "9fbfb56530391c9d") << "libm sinf differs: encoder parity needs identical input";
  const auto e = fmt_q4tp::encode(x.data(), 2, 64);
  EXPECT_EQ(to_hex(e.data), to_hex(from_hex(kQ4tpWorked)));
}

TEST(Q2tp, WorkedTensorDecodeAndEncode) {
  const auto payload = from_hex(kQ2tpWorked);
  ASSERT_EQ(payload.size(), 44u);
  ASSERT_EQ(payload.size(), fmt_q2tp::data_bytes(2, 64));
  const auto w = decode_all(payload, true, 2, 64);
  EXPECT_EQ(w[32], -0.4484123f);
  EXPECT_EQ(w[33], -0.14947076f);
  EXPECT_EQ(w[34], 0.14947076f);
  EXPECT_EQ(w[35], 0.14947076f);
  EXPECT_EQ(hex64(hash_floats(w)), "3ac9caaaefff7b5d");
  const auto x = worked_input();
  EXPECT_EQ(to_hex(fmt_q2tp::encode(x.data(), 2, 64).data), to_hex(payload));
}

TEST(Q2tp, RungSevenAndTopRung) {
  // Params of §2.1 (lo -3, step 0.25), chunk bytes 0xE4 (codes 0,1,2,3 per byte), group on rung 7.
  std::vector<uint8_t> p(fmt_q2tp::data_bytes(1, 32), 0);
  for (int k = 0; k < 8; ++k) p[k] = 0xE4;
  store_u16(p.data() + 8, 0xC200);
  store_u16(p.data() + 10, 0x3400);
  ladder::put_code(p.data() + 12, 0, 7);
  const auto w = decode_all(p, true, 1, 32);
  const ladder::table t = ladder::build(0xC200, 0x3400);
  const float want[4] = {-1.5f * t[6], -0.5f * t[6], 0.5f * t[6], 1.5f * t[6]};
  for (int i = 0; i < 32; ++i) EXPECT_EQ(w[i], want[i % 4]) << i;
  EXPECT_FLOAT_EQ(t[30], 22.627394f);  // q2tp_ladder[31]
}

TEST(Q2tp, RungZeroIsNegativeZeroForLowCodes) {
  std::vector<uint8_t> p(fmt_q2tp::data_bytes(1, 32), 0);
  for (int k = 0; k < 8; ++k) p[k] = 0xE4;
  store_u16(p.data() + 8, 0xC200);
  store_u16(p.data() + 10, 0x3400);
  const auto w = decode_all(p, true, 1, 32);
  for (int i = 0; i < 32; ++i) {
    EXPECT_EQ(w[i], 0.0f);
    EXPECT_EQ(std::signbit(w[i]), (i % 4) < 2) << i;  // codes 0/1 give -0.0 (vacuum.rs)
  }
}

TEST(Ladder, AllZeroRows) {
  const std::vector<float> z(64, 0.0f);
  EXPECT_EQ(to_hex(fmt_q4tp::encode(z.data(), 1, 64).data),
            std::string(64, '8') + "00cb0100" + "0000");
  EXPECT_EQ(to_hex(fmt_q2tp::encode(z.data(), 1, 64).data),
            "aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa" "00cb0100" "0000");
}
