// CMF v2: the golden file byte for byte, reader/writer round trips in both layouts, verification, and every
// envelope/directory rule of cmf-format.md §1 on hostile input (error names the file and the offset).
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cstdio>
#include <filesystem>
#include <random>

#include "cmfx/io/cmf_reader.hpp"
#include "cmfx/io/cmf_verify.hpp"
#include "cmfx/io/cmf_writer.hpp"
#include "support/cmf_golden.hpp"
#include "support/hex.hpp"

using namespace cmfx;
using cmfx::test::from_hex;
using cmfx::test::to_hex;
using ::testing::HasSubstr;

namespace {

std::string tmp_path(const std::string& leaf) {
  auto dir = std::filesystem::temp_directory_path() / ("cmfx_test_" + std::to_string(::getpid()));
  std::filesystem::create_directories(dir);
  return (dir / leaf).string();
}

template <class T>
void poke(std::vector<uint8_t>& b, uint64_t at, T v) {
  std::memcpy(b.data() + at, &v, sizeof(T));
}

// Parses and expects input_error whose message contains `offset N` and `needle`.
void expect_rejected(const std::vector<uint8_t>& b, uint64_t offset, const std::string& needle) {
  try {
    (void)cmf_file::parse(b, "hostile.cmf");
    ADD_FAILURE() << "accepted; expected: " << needle;
  } catch (const input_error& e) {
    EXPECT_THAT(e.what(), HasSubstr("hostile.cmf: offset " + std::to_string(offset) + ":")) << e.what();
    EXPECT_THAT(e.what(), HasSubstr(needle));
  }
}

// Built with += : g++ 12 gives a false -Wrestrict for "literal" + std::string (GCC PR 105651).
std::string tname(int i) {
  std::string s = "t";
  s += std::to_string(i);
  return s;
}

constexpr uint64_t kDir = 0x1a3;     // golden directory offset
constexpr uint64_t kRec0 = kDir + 16;
constexpr uint64_t kRec1 = kRec0 + 56;

}  // namespace

TEST(CmfGolden, WriterReproducesTheVerifiedFile) {
  const auto b = test::golden_cmf();
  ASSERT_EQ(b.size(), 4300u);
  EXPECT_EQ(to_hex(b.data(), 128),
            "434d46010200000000000000010000008000000000000000230100000000000"
            "0a30100000000000092000000000000000010000000000000cc00000000000000"
            + std::string(96, '0') + "730fa163997aa7d664f62582df8e9790");
  EXPECT_EQ(to_hex(b.data() + kDir, 146),
            "02000000000000008000000000000000"
            "000000001100010140000000" + std::string(40, '0') + "0000000000000000800000000000000020ad5abbf5d83e14"
            "110000000100" "0f02" "0200000040000000" + std::string(32, '0') +
            "80000000000000004c00000000000000900e849addc1d45c" + to_hex(reinterpret_cast<const uint8_t*>("model.norm.weightw"), 18));
}

TEST(CmfGolden, ReaderAcceptsAndVerifies) {
  const auto b = test::golden_cmf();
  const auto f = cmf_file::parse(b, "golden.cmf");
  EXPECT_EQ(f.envelope().features, 1u);
  EXPECT_EQ(f.envelope().data.off, 4096u);
  EXPECT_EQ(f.envelope().data.len, 204u);
  ASSERT_EQ(f.tensors().size(), 2u);
  const auto& w = f.at("w");
  EXPECT_EQ(w.dtype, 15);
  EXPECT_EQ(w.rows(), 2u);
  EXPECT_EQ(w.cols(), 64u);
  EXPECT_EQ(test::hex64(w.hash), "5cd4c1dd9a840e90");
  EXPECT_EQ(f.find("nope"), nullptr);
  EXPECT_EQ(f.arch_name(), "tiny-test");
  verify_options o;
  o.threads = 2;
  const auto rep = verify(f, o);
  EXPECT_TRUE(rep.ok()) << (rep.problems.empty() ? "" : rep.problems[0]);
  EXPECT_EQ(rep.bytes_hashed, 204u);
}

TEST(CmfVerify, NamesEachCorruptTensorAndSection) {
  auto b = test::golden_cmf();
  b[4096 + 128 + 5] ^= 0x10;  // inside "w"
  b[0x80 + 3] = 'F';          // header text: {"format" -> {"Format"
  const auto f = cmf_file::parse(b, "bad.cmf");
  const auto rep = verify(f);
  ASSERT_EQ(rep.bad_tensors.size(), 1u);
  EXPECT_EQ(rep.bad_tensors[0], "w");
  ASSERT_EQ(rep.problems.size(), 2u);
  EXPECT_THAT(rep.problems[0], HasSubstr("header hash mismatch"));
}

TEST(CmfVerify, LargeTensorsChunkedAcrossThreads) {
  const uint64_t seed = test::fresh_seed();
  std::mt19937_64 rng(seed);
  cmf_writer w(test::kGoldenHeader);
  std::vector<std::vector<uint8_t>> payloads;
  for (int i = 0; i < 5; ++i) {
    std::vector<uint8_t> p(size_t(1 + rng() % 300000));
    for (auto& x : p) x = uint8_t(rng());
    w.add(tname(i), cmf_dtype::u8, {uint32_t(p.size())}, p);
    payloads.push_back(std::move(p));
  }
  const auto b = w.to_bytes();
  const auto f = cmf_file::parse(b, "big.cmf");
  for (unsigned th : {1u, 2u, 3u, 8u}) {
    verify_options o;
    o.threads = th;
    o.chunk_bytes = 4096 + 8 * (rng() % 100);
    const auto rep = verify(f, o);
    EXPECT_TRUE(rep.ok()) << "threads " << th << " seed " << seed;
  }
  for (int i = 0; i < 5; ++i) {
    const auto& t = f.at(tname(i));
    ASSERT_EQ(t.nbytes, payloads[i].size());
    EXPECT_EQ(std::memcmp(t.data, payloads[i].data(), t.nbytes), 0);
    EXPECT_EQ(t.off % (t.nbytes >= 16384 ? 4096 : 64), 0u);
  }
}

TEST(CmfStream, StreamingLayoutRoundTrip) {
  const uint64_t seed = test::fresh_seed();
  std::mt19937_64 rng(seed);
  for (uint64_t reserve : {uint64_t(8192), cmf_stream_writer::default_head_reserve(3), uint64_t(4096)}) {
    const std::string path = tmp_path("stream.cmf");
    std::vector<std::vector<uint8_t>> payloads;
    bool fit;
    {
      cmf_stream_writer w(path, test::kGoldenHeader, reserve);
      for (int i = 0; i < 120; ++i) {
        std::vector<uint8_t> p(size_t(2 * (1 + rng() % 12000)));
        for (auto& x : p) x = uint8_t(rng());
        w.add("model.layers." + std::to_string(i) + ".weight", cmf_dtype::f16, {uint32_t(p.size() / 2)}, p);
        payloads.push_back(std::move(p));
      }
      w.set_vocab(R"({"model":{"type":"BPE"}})");
      fit = w.finish();
    }
    const auto f = cmf_file::open(path);
    EXPECT_EQ(f.envelope().data.off, cmf::align_up(std::max<uint64_t>(reserve, 4096), 4096));
    EXPECT_EQ(fit, f.envelope().header.off == 128) << "reserve " << reserve;
    if (reserve == 4096) {
      EXPECT_FALSE(fit);  // 120 records do not fit: header + dir appended after the data
    }
    EXPECT_EQ(std::string(f.vocab().begin(), f.vocab().end()), R"({"model":{"type":"BPE"}})");
    EXPECT_TRUE(f.header().contains("section_hashes"));
    const auto rep = verify(f);
    EXPECT_TRUE(rep.ok()) << (rep.problems.empty() ? "" : rep.problems[0]) << " seed " << seed;
    for (size_t i = 0; i < payloads.size(); ++i)
      EXPECT_EQ(std::memcmp(f.tensors()[i].data, payloads[i].data(), payloads[i].size()), 0);
  }
}

TEST(CmfWriter, RejectsBadEntries) {
  cmf_writer w(test::kGoldenHeader);
  std::vector<uint8_t> p(10);
  EXPECT_THROW(w.add("x", cmf_dtype::f16, {4}, p), usage_error);  // 4 f16 need 8 bytes
  w.add("x", cmf_dtype::f16, {5}, p);
  EXPECT_THROW(w.add("x", cmf_dtype::f16, {5}, p), usage_error);  // duplicate
  EXPECT_THROW(w.add("y", uint8_t(40), {10}, p), usage_error);    // unknown dtype
  EXPECT_THROW(cmf_writer(std::string(R"({"version":2})")), usage_error);
}

TEST(CmfDtype, RefusedDtypesNameTheTensor) {
  cmf_writer w(test::kGoldenHeader);
  std::vector<uint8_t> p(64);
  w.add("model.layers.0.mlp.vbit", uint8_t(cmf_dtype::vbit), {64}, p);
  w.add("model.layers.0.mlp.q1", uint8_t(cmf_dtype::q1), {64}, std::vector<uint8_t>(12));
  const auto b = w.to_bytes();
  const auto f = cmf_file::parse(b, "refused.cmf");
  try {
    (void)f.at("model.layers.0.mlp.vbit").view();
    ADD_FAILURE();
  } catch (const usage_error& e) {
    EXPECT_THAT(e.what(), HasSubstr("'model.layers.0.mlp.vbit' has CMF dtype vbit"));
  }
  EXPECT_THROW((void)f.at("model.layers.0.mlp.q1").view(), usage_error);
}

// ---- hostile input: one case per rule ----

TEST(CmfHostile, EveryTruncationIsRejected) {
  const auto good = test::golden_cmf();
  for (size_t n = 0; n < good.size(); ++n) {
    std::vector<uint8_t> b(good.begin(), good.begin() + long(n));
    EXPECT_THROW((void)cmf_file::parse(b, "t.cmf"), input_error) << "length " << n;
  }
}

TEST(CmfHostile, Envelope) {
  const auto g = test::golden_cmf();
  auto b = g;
  b[0] = 'X';
  expect_rejected(b, 0, "bad magic");
  b = g;
  poke<uint32_t>(b, 4, 1);
  expect_rejected(b, 4, "unsupported CMF version 1");
  b = g;
  poke<uint32_t>(b, 12, 1 | 8);
  expect_rejected(b, 12, "feature bit(s) 3");
  b = g;
  poke<uint32_t>(b, 12, 0x67);
  EXPECT_NO_THROW((void)cmf_file::parse(b, "ok.cmf"));
  b = g;
  poke<uint64_t>(b, 0x10, ~uint64_t(0) - 4);
  expect_rejected(b, 0x10, "overflows");
  b = g;
  poke<uint64_t>(b, 0x28, 1u << 20);
  expect_rejected(b, 0x20, "runs past the end");
  b = g;
  poke<uint64_t>(b, 0x18, 0);
  expect_rejected(b, 0x10, "header section is empty");
  b = g;
  poke<uint64_t>(b, 0x30, 4096 + 64);
  poke<uint64_t>(b, 0x38, 4);
  expect_rejected(b, 0x30, "not a multiple of 4096");
  b = g;
  poke<uint64_t>(b, 0x58, 100000);
  poke<uint64_t>(b, 0x50, 10);
  expect_rejected(b, 0x50, "vocab section");
}

TEST(CmfHostile, HeaderJson) {
  const auto g = test::golden_cmf();
  auto b = g;
  b[0x80 + 10] = '#';
  expect_rejected(b, 0x80 + 10, "header JSON");
  b = g;
  b[0x80 + 3] = 0xFF;
  expect_rejected(b, 0x80 + 3, "not valid UTF-8");
  b = g;
  const std::string h(b.begin() + 0x80, b.begin() + 0x80 + 291);
  const auto pos = h.find("\"quant_type\"");
  b[0x80 + pos + 1] = 'Q';
  expect_rejected(b, 0x80, "missing required key quant_type");
  b = g;
  const auto hid = h.find("\"hidden_size\":64");
  b[0x80 + hid + 14] = '-';
  expect_rejected(b, 0x80, "arch.hidden_size must be an unsigned integer");
}

TEST(CmfHostile, Directory) {
  const auto g = test::golden_cmf();
  auto b = g;
  poke<uint64_t>(b, kDir, uint64_t(1) << 60);
  expect_rejected(b, kDir, "claims 1152921504606846976 tensors");
  b = g;
  poke<uint64_t>(b, kDir + 8, 16);
  expect_rejected(b, kDir + 8, "name pool offset");
  b = g;
  poke<uint32_t>(b, kRec1, 100);
  expect_rejected(b, kRec1, "outside the name pool");
  b = g;
  b[kDir + 128 + 2] = 0xC0;  // overlong UTF-8 in the first name
  expect_rejected(b, kDir + 128 + 2, "not valid UTF-8");
  b = g;
  b[kDir + 128 + 2] = 0;
  expect_rejected(b, kDir + 128, "contains NUL");
  b = g;
  b[kRec1 + 6] = 17;
  expect_rejected(b, kRec1 + 6, "unknown dtype id 17");
  b = g;
  b[kRec1 + 7] = 7;
  expect_rejected(b, kRec1 + 7, "ndim 7 exceeds 6");
  b = g;
  b[kRec1 + 7] = 6;
  for (int k = 0; k < 6; ++k) poke<uint32_t>(b, kRec1 + 8 + 4 * k, 0xFFFFFFFFu);
  expect_rejected(b, kRec1 + 8, "shape product overflows");
  b = g;
  poke<uint64_t>(b, kRec1 + 32, 130);
  expect_rejected(b, kRec1 + 32, "not a multiple of 64");
  b = g;
  poke<uint64_t>(b, kRec1 + 32, 192);
  expect_rejected(b, kRec1 + 40, "runs past the data section");
  b = g;
  poke<uint64_t>(b, kRec1 + 40, ~uint64_t(0));
  expect_rejected(b, kRec1 + 40, "runs past the data section");
  b = g;
  poke<uint64_t>(b, kRec1 + 40, 72);
  poke<uint64_t>(b, 0x38, 204);
  expect_rejected(b, kRec1 + 40, "q4tp [2, 64] needs 76 bytes, the directory says 72");
  b = g;
  poke<uint32_t>(b, kRec1, 0);  // second name = "m" ... make both names identical:
  poke<uint16_t>(b, kRec1 + 4, 17);
  expect_rejected(b, kRec1, "duplicate tensor name");
}
