#include "cmfx/core/hash64.hpp"

#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "support/hex.hpp"

namespace {
uint64_t h(const std::string& s) { return cmfx::hash64(reinterpret_cast<const uint8_t*>(s.data()), s.size()); }
}  // namespace

// Golden vectors from infosave2007/cmf:crates/cortiq-core/tests/roundtrip.rs (cmf-format.md §1.8).
TEST(Hash64, GoldenVectors) {
  EXPECT_EQ(h(""), 0u);
  EXPECT_EQ(cmfx::test::hex64(h("CMF")), "b59aa39a074033ec");
  EXPECT_EQ(cmfx::test::hex64(h("0123456789abcdef")), "30d401310062ea9f");
  std::vector<uint8_t> all(256);
  for (int i = 0; i < 256; ++i) all[i] = uint8_t(i);
  EXPECT_EQ(cmfx::test::hex64(cmfx::hash64(all)), "9955bb876c0706bf");
}

// Split hashing (used by the multi-threaded verifier) equals the one-shot hash for every word-aligned split.
TEST(Hash64, PartialChunksMatchOneShot) {
  const uint64_t seed = cmfx::test::fresh_seed();
  std::mt19937_64 rng(seed);
  for (size_t len : {1u, 7u, 8u, 9u, 31u, 32u, 33u, 255u, 256u, 257u, 1000u, 4099u, 100003u}) {
    std::vector<uint8_t> b(len);
    for (auto& x : b) x = uint8_t(rng());
    const uint64_t whole = cmfx::hash64(b);
    for (size_t cut = 0; cut <= len; cut += 8) {
      const uint64_t acc = cmfx::hash64_partial(b.data(), cut, 0) ^ cmfx::hash64_partial(b.data() + cut, len - cut, cut / 8);
      ASSERT_EQ(cmfx::hash64_finish(acc, len), whole) << "len " << len << " cut " << cut << " seed " << seed;
    }
  }
}
