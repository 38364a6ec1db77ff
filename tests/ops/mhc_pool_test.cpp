// The mHC steps of a chunk on a thread pool (ops/mhc_pool.hpp) against ops/mhc.hpp's per-token calls, bit for bit:
// the mixes split over (token, row) items then hc_pre_coeffs + hc_fold = hc_pre, and hc_pre_pool on both its paths; hc_post over column blocks =
// hc_post. Fresh random inputs at the models' shapes (hc 4, d 4096 / 5120) and small and ragged ones, chunks of 1 to
// more tokens than workers, pools of 1, 2, 3 and 7 workers. (The values themselves are checked against the float64
// reference in mhc_test.cpp.)
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

#include "cmfx/core/thread_pool.hpp"
#include "cmfx/ops/mhc.hpp"
#include "cmfx/ops/mhc_pool.hpp"
#include "op_test_util.hpp"

using namespace cmfx;
using namespace cmfx::test;

namespace {

struct pool_case {
  uint32_t hc;
  size_t d;
  uint64_t n;
  unsigned threads;
};
const pool_case kCases[] = {{4, 4096, 1, 7}, {4, 5120, 1, 3}, {4, 4096, 3, 2}, {4, 1000, 9, 7}, {4, 7, 2, 3},
                            {2, 33, 1, 7},   {3, 129, 4, 2},  {1, 16, 5, 3},   {4, 300, 1, 1}, {8, 257, 2, 7}};

bool same_bits(const std::vector<float>& a, const std::vector<float>& b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0;
}

std::string name(const pool_case& c) {
  return "hc " + std::to_string(c.hc) + " d " + std::to_string(c.d) + " n " + std::to_string(c.n) + " threads " +
         std::to_string(c.threads);
}

TEST(MhcPool, PreEqualsHcPreBitForBit) {
  op_rng r(0x6d686370);
  for (const pool_case& c : kCases) {
    SCOPED_TRACE(name(c));
    const uint32_t hc = c.hc;
    const size_t d = c.d, hd = hc * d, rows = size_t(2 + hc) * hc;
    const std::vector<float> X = r.normal(c.n * hd, 2.0f), fn = r.normal(rows * hd, 1.0f / std::sqrt(float(hd)));
    const std::vector<float> base = r.normal(rows), scale = {r.uniform(0.5f, 2.0f), r.uniform(0.5f, 2.0f),
                                                             r.uniform(0.5f, 2.0f)};
    const float norm_eps = 1e-6f, hc_eps = 1e-6f;
    const uint32_t iters = 20;
    // per token, the plain call
    std::vector<float> pre0(c.n * hc), post0(c.n * hc), C0(c.n * hc * hc), y0(c.n * d);
    for (uint64_t i = 0; i < c.n; ++i)
      hc_pre(std::span<const float>(X.data() + i * hd, hd), fn, base, scale, hc, norm_eps, hc_eps, iters,
             std::span<float>(pre0.data() + i * hc, hc), std::span<float>(post0.data() + i * hc, hc),
             std::span<float>(C0.data() + i * hc * hc, hc * hc), std::span<float>(y0.data() + i * d, d));
    // the pool's mixes, then the coefficients and the fold per token
    thread_pool pool(c.threads);
    std::vector<double> m(c.n * rows, std::nan("")), raw;
    hc_mixes_pool(pool, X.data(), c.n, hd, fn, rows, norm_eps, raw, m.data());
    std::vector<float> pre1(c.n * hc, NAN), post1(c.n * hc, NAN), C1(c.n * hc * hc, NAN), y1(c.n * d, NAN);
    for (uint64_t i = 0; i < c.n; ++i) {
      hc_pre_coeffs(m.data() + i * rows, base, scale, hc, hc_eps, iters, std::span<float>(pre1.data() + i * hc, hc),
                    std::span<float>(post1.data() + i * hc, hc), std::span<float>(C1.data() + i * hc * hc, hc * hc));
      ops_detail::hc_fold(std::span<const float>(X.data() + i * hd, hd), pre1.data() + i * hc, hc, d,
                          std::span<float>(y1.data() + i * d, d));
    }
    EXPECT_TRUE(same_bits(pre0, pre1));
    EXPECT_TRUE(same_bits(post0, post1));
    EXPECT_TRUE(same_bits(C0, C1));
    EXPECT_TRUE(same_bits(y0, y1));
    // hc_pre_pool, on the split path (split_min 0; taken while n < threads) and on the per-token path
    for (size_t split_min : {size_t(0), SIZE_MAX}) {
      std::vector<float> pre2(c.n * hc, NAN), post2(c.n * hc, NAN), C2(c.n * hc * hc, NAN), y2(c.n * d, NAN);
      std::vector<int> seen(c.n, 0);
      hc_pre_pool(pool, X.data(), c.n, hc, d, fn, base, scale, norm_eps, hc_eps, iters, pre2.data(), post2.data(),
                  C2.data(), raw, [&](uint64_t i) {
                    ++seen[i];
                    ops_detail::hc_fold(std::span<const float>(X.data() + i * hd, hd), pre2.data() + i * hc, hc, d,
                                        std::span<float>(y2.data() + i * d, d));
                  }, split_min);
      SCOPED_TRACE(split_min ? "per-token path" : "split path");
      EXPECT_EQ(seen, std::vector<int>(c.n, 1));
      EXPECT_TRUE(same_bits(pre0, pre2));
      EXPECT_TRUE(same_bits(post0, post2));
      EXPECT_TRUE(same_bits(C0, C2));
      EXPECT_TRUE(same_bits(y0, y2));
    }
  }
}

TEST(MhcPool, PostEqualsHcPostBitForBit) {
  op_rng r(0x6d686371);
  for (const pool_case& c : kCases) {
    SCOPED_TRACE(name(c));
    const uint32_t hc = c.hc;
    const size_t d = c.d, hd = hc * d;
    const std::vector<float> o = r.normal(c.n * d), X = r.normal(c.n * hd, 2.0f), post = r.normal(c.n * hc),
                             C = r.normal(c.n * hc * hc);
    std::vector<float> out0(c.n * hd);
    for (uint64_t i = 0; i < c.n; ++i)
      hc_post(std::span<const float>(o.data() + i * d, d), std::span<const float>(X.data() + i * hd, hd),
              std::span<const float>(post.data() + i * hc, hc), std::span<const float>(C.data() + i * hc * hc, hc * hc),
              hc, std::span<float>(out0.data() + i * hd, hd));
    thread_pool pool(c.threads);
    for (size_t min_cols : {size_t(1), size_t(5), size_t(256)}) {  // 1 and 5: many ragged blocks
      std::vector<float> out1(c.n * hd, NAN);
      hc_post_pool(pool, o.data(), X.data(), post.data(), C.data(), c.n, hc, d, out1.data(), min_cols);
      EXPECT_TRUE(same_bits(out0, out1)) << "min_cols " << min_cols;
    }
  }
}

TEST(MhcPool, PostColsLeavesOtherColumnsAlone) {
  op_rng r(0x6d686372);
  const uint32_t hc = 4;
  const size_t d = 37, hd = hc * d;
  const std::vector<float> o = r.normal(d), X = r.normal(hd), post = r.normal(hc), C = r.normal(hc * hc);
  std::vector<float> full(hd), part(hd, 123.0f);
  hc_post(o, X, post, C, hc, full);
  hc_post_cols(o, X, post, C, hc, 5, 19, part);
  for (uint32_t k = 0; k < hc; ++k)
    for (size_t i = 0; i < d; ++i) {
      const float want = (i >= 5 && i < 19) ? full[k * d + i] : 123.0f;
      EXPECT_EQ(part[k * d + i], want) << "copy " << k << " column " << i;
    }
  EXPECT_THROW(hc_post_cols(o, X, post, C, hc, 20, 19, part), std::invalid_argument);
  EXPECT_THROW(hc_post_cols(o, X, post, C, hc, 0, d + 1, part), std::invalid_argument);
  std::vector<double> raw, m(2);
  thread_pool pool(2);
  EXPECT_THROW(hc_mixes_pool(pool, X.data(), 1, hd, std::span<const float>(X.data(), hd - 1), 1, 1e-6f, raw, m.data()),
               std::invalid_argument);
}

}  // namespace
