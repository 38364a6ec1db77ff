#include "cmfx/core/aligned.hpp"

#include <gtest/gtest.h>

#include <cstdint>
#include <numeric>

#include "cmfx/kernels/act_q8.hpp"

namespace {
bool on_line(const void* p) { return reinterpret_cast<std::uintptr_t>(p) % cmfx::scratch_alignment == 0; }
}  // namespace

// Every size (small ones come from the heap's 16-byte bins, large ones from mmap at page + 16) and every regrowth
// keeps data() on a cache line, and the contents survive the moves.
TEST(AlignedVector, DataStartsOnACacheLineAtEverySize) {
  for (std::size_t n : {1u, 3u, 17u, 64u, 1000u, 8192u, 40000u, 1u << 20}) {
    cmfx::aligned_vector<int8_t> v(n);
    EXPECT_TRUE(on_line(v.data())) << n;
    std::iota(v.begin(), v.end(), int8_t(1));
    v.resize(3 * n + 5);
    EXPECT_TRUE(on_line(v.data())) << n;
    for (std::size_t i = 0; i < n; ++i) ASSERT_EQ(v[i], int8_t(1 + i)) << n << " " << i;
  }
  cmfx::aligned_vector<float> f;
  for (int i = 0; i < 5000; ++i) {
    f.push_back(float(i));
    ASSERT_TRUE(on_line(f.data())) << i;
  }
}

// The int8 activations, their scales and block sums are the kernels' 64-byte loads (aligned.hpp).
TEST(AlignedVector, QuantisedActivationsStartOnACacheLine) {
  std::vector<float> x(3 * 4096 + 32 * 7);
  for (std::size_t i = 0; i < x.size(); ++i) x[i] = float(int(i * 2654435761u % 2001) - 1000) / 97.0f;
  for (uint64_t cols : {4096u, 4096u + 32u * 7u}) {
    cmfx::act_q8 a;
    cmfx::quantize_act_q8(x.data(), x.size() / cols, cols, cmfx::act_layout::natural, a);
    EXPECT_TRUE(on_line(a.q.data()));
    EXPECT_TRUE(on_line(a.scale.data()));
    EXPECT_TRUE(on_line(a.bsum.data()));
  }
}
