#include "cmfx/core/stream_copy.hpp"

#include <gtest/gtest.h>

#include <random>
#include <vector>

#include "support/hex.hpp"

// stream_copy equals memcpy for every size class (under the streaming threshold, around it, large with a ragged
// tail) at every destination and source misalignment, and writes nothing outside [dst, dst + n).
TEST(StreamCopy, EqualsMemcpyAtEveryAlignment) {
  const uint64_t seed = cmfx::test::fresh_seed();
  std::mt19937_64 rng(seed);
  for (size_t n : {0u, 1u, 15u, 255u, 256u, 271u, 319u, 320u, 4096u, 65537u, 1000003u}) {
    for (size_t da = 0; da < 16; da += 5) {
      for (size_t sa = 0; sa < 16; sa += 3) {
        std::vector<uint8_t> src(n + sa), dst(n + da + 64), ref;
        for (auto& x : src) x = uint8_t(rng());
        for (auto& x : dst) x = uint8_t(rng());
        ref = dst;
        std::memcpy(ref.data() + da, src.data() + sa, n);
        cmfx::stream_copy(dst.data() + da, src.data() + sa, n);
        ASSERT_EQ(dst, ref) << "n " << n << ", dst +" << da << ", src +" << sa << ", seed " << seed;
      }
    }
  }
}
