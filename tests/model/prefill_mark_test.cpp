// The prefill mark's rule (driver/model/prefill_mark.hpp), shared by V4.1's CPU state and its GPU graph.
#include "model/prefill_mark.hpp"

#include <gtest/gtest.h>

namespace cmfx::driver {
namespace {

TEST(PrefillMark, CallAtPositionZeroIsAPrefillOfItsOwnIds) {
  prefill_mark m;
  EXPECT_EQ(m.end_for_call(0, 7), 7u);
  EXPECT_EQ(m.call_rows(0, 7), 7u);
  m.mark_call(0, 7);
  EXPECT_EQ(m.end, 7u);
  EXPECT_TRUE(m.covers(6));
  EXPECT_FALSE(m.covers(7));
  // a later call is a decode call: no rows of it are prefill rows, and it does not move the end
  EXPECT_EQ(m.call_rows(7, 3), 0u);
  m.mark_call(7, 3);
  EXPECT_EQ(m.end, 7u);
}

TEST(PrefillMark, MarkTakesEffectOnlyWhileEveryPositionIsAPrefillPosition) {
  prefill_mark m;
  EXPECT_TRUE(m.mark(0, 600));
  EXPECT_EQ(m.end, 600u);
  EXPECT_TRUE(m.mark(512, 300));  // never lowers the end
  EXPECT_EQ(m.end, 600u);
  EXPECT_EQ(m.call_rows(512, 512), 88u);  // a piece straddling the end: its leading rows
  EXPECT_EQ(m.call_rows(0, 20), 20u);
  EXPECT_TRUE(m.mark(600, 700));  // the whole prompt done, no decode step yet: still extendable
  EXPECT_EQ(m.end, 700u);
  EXPECT_FALSE(m.mark(701, 900));  // after a decode step
  EXPECT_EQ(m.end, 700u);
  EXPECT_EQ(m.end_for_call(0, 5), 700u);
}

TEST(PrefillMark, TruncateLowersTheEndAndAMarkMayExtendItAgain) {
  prefill_mark m;
  m.mark(0, 100);
  m.truncate(40);
  EXPECT_EQ(m.end, 40u);
  m.truncate(90);  // never raises it
  EXPECT_EQ(m.end, 40u);
  EXPECT_FALSE(m.mark(45, 80));  // position 45 > 40: a decode position already
  EXPECT_TRUE(m.mark(40, 80));
  EXPECT_EQ(m.end, 80u);
}

}  // namespace
}  // namespace cmfx::driver
