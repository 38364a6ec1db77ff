// Stop strings on streamed text (sample/stop_strings.hpp): every text is fed whole, split at every byte position,
// in three chunks at every pair of positions, and byte by byte; the released text and the stop that matched must
// equal a whole-text reference (the occurrence that ends first; on a tie the longer stop).
#include <gtest/gtest.h>

#include "cmfx/sample/stop_strings.hpp"

namespace {

struct outcome {
  std::string text;
  bool stopped = false;
  size_t which = cmfx::stop_string_matcher::npos;
};

outcome reference(const std::string& text, const std::vector<std::string>& stops) {
  outcome o;
  size_t best_end = std::string::npos, best_start = 0;
  for (size_t i = 0; i < stops.size(); ++i) {
    if (stops[i].empty()) continue;
    const size_t p = text.find(stops[i]);
    if (p == std::string::npos) continue;
    const size_t e = p + stops[i].size();
    if (e < best_end || (e == best_end && p < best_start)) {
      best_end = e;
      best_start = p;
      o.which = i;
    }
  }
  o.stopped = o.which != cmfx::stop_string_matcher::npos;
  o.text = o.stopped ? text.substr(0, best_start) : text;
  return o;
}

outcome stream(const std::string& text, const std::vector<std::string>& stops, const std::vector<size_t>& cuts) {
  cmfx::stop_string_matcher m(stops);
  outcome o;
  size_t at = 0;
  auto feed = [&](std::string_view chunk) {
    const auto r = m.push(chunk);
    o.text += r.text;
    if (r.stopped) {
      o.stopped = true;
      o.which = r.which;
    }
  };
  for (size_t c : cuts) {
    feed(std::string_view(text).substr(at, c - at));
    at = c;
  }
  feed(std::string_view(text).substr(at));
  o.text += m.flush();
  return o;
}

void check(const std::string& text, const std::vector<std::string>& stops) {
  const outcome want = reference(text, stops);
  auto same = [&](const outcome& got, const std::string& how) {
    EXPECT_EQ(got.text, want.text) << how << " text=" << text;
    EXPECT_EQ(got.stopped, want.stopped) << how << " text=" << text;
    EXPECT_EQ(got.which, want.which) << how << " text=" << text;
  };
  same(stream(text, stops, {}), "whole");
  for (size_t i = 0; i <= text.size(); ++i) same(stream(text, stops, {i}), "split " + std::to_string(i));
  for (size_t i = 0; i <= text.size(); ++i)
    for (size_t j = i; j <= text.size(); ++j) same(stream(text, stops, {i, j}), "splits " + std::to_string(i) + "," + std::to_string(j));
  std::vector<size_t> every;
  for (size_t i = 1; i < text.size(); ++i) every.push_back(i);
  same(stream(text, stops, every), "byte by byte");
}

TEST(StopStrings, Basic) {
  EXPECT_EQ(reference("Hello ### world", {"###"}).text, "Hello ");
  cmfx::stop_string_matcher m({"###"});
  auto r = m.push("Hello #");
  EXPECT_EQ(r.text, "Hello ");  // "#" could start the stop string: held back
  EXPECT_EQ(m.held_back(), 1u);
  r = m.push("# there");
  EXPECT_EQ(r.text, "## there");
  EXPECT_FALSE(r.stopped);
  r = m.push(" ##");
  EXPECT_EQ(r.text, " ");
  r = m.push("#!");
  EXPECT_TRUE(r.stopped);
  EXPECT_EQ(r.text, "");
  EXPECT_TRUE(m.push("more").stopped);
  EXPECT_EQ(m.flush(), "");
  m.reset();
  EXPECT_EQ(m.push("a#").text, "a");
  EXPECT_EQ(m.flush(), "#");
}

TEST(StopStrings, EverySplitPosition) {
  const std::vector<std::string> stops = {"###", "\n\nUser:", "abcd", "bc", "。\n", ""};
  for (const std::string text :
       {"Hello ### world", "no stop here at all", "tricky ## #\n\nUse \n\nUser: hi", "xabcd", "xabc", "xab", "a",
        "", "中文。\n后面", "中文。后面。", "####", "\n\n\n\nUser:", "ending in partial \n\nUs"})
    check(text, stops);
  // Tie on the end position: the longer (earlier) stop wins; "bc" ends before "abcd" completes.
  EXPECT_EQ(reference("xabc", {"bc", "abc"}).which, 1u);
  check("xabc", {"bc", "abc"});
  EXPECT_EQ(reference("xabcd", {"abcd", "bc"}).text, "xa");
  check("a stop at the very end STOP", {"STOP"});
  check("STOP at the start", {"STOP"});
}

}  // namespace
