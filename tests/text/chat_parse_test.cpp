// Streaming parser of DeepSeek-V4 output (chat_parse.hpp): every output is fed whole, split at every byte position,
// byte by byte, and in random chunkings; the concatenated reasoning/content, the tool calls, the end flag and the
// warnings must not depend on where the chunks were cut.
#include <gtest/gtest.h>

#include <random>

#include "cmfx/text/chat_parse.hpp"

namespace {

using cmfx::chat_mode;

struct result {
  std::string reasoning, content;
  std::vector<cmfx::chat_tool_call> calls;
  bool finished_before_finish = false;
  std::vector<std::string> warnings;
};

bool same_calls(const std::vector<cmfx::chat_tool_call>& a, const std::vector<cmfx::chat_tool_call>& b) {
  if (a.size() != b.size()) return false;
  for (size_t i = 0; i < a.size(); ++i)
    if (a[i].id != b[i].id || a[i].name != b[i].name || a[i].arguments != b[i].arguments) return false;
  return true;
}

result run(const std::string& text, chat_mode mode, const std::vector<size_t>& cuts) {
  cmfx::chat_output_parser p(mode);
  cmfx::chat_delta d;
  result r;
  size_t at = 0;
  for (size_t c : cuts) {
    p.feed(std::string_view(text).substr(at, c - at), d);
    at = c;
  }
  p.feed(std::string_view(text).substr(at), d);
  r.finished_before_finish = d.finished;
  p.finish(d);
  r.reasoning = d.reasoning;
  r.content = d.content;
  r.calls = d.tool_calls;
  r.warnings = p.warnings();
  return r;
}

// Runs every chunking and checks each against the expected result.
void check_all_splits(const std::string& text, chat_mode mode, const result& want) {
  auto same = [&](const result& r, const std::string& how) {
    EXPECT_EQ(r.reasoning, want.reasoning) << how;
    EXPECT_EQ(r.content, want.content) << how;
    EXPECT_TRUE(same_calls(r.calls, want.calls)) << how;
    EXPECT_EQ(r.finished_before_finish, want.finished_before_finish) << how;
    EXPECT_EQ(r.warnings.size(), want.warnings.size()) << how;
    return !::testing::Test::HasFailure();
  };
  if (!same(run(text, mode, {}), "whole")) return;
  for (size_t i = 0; i <= text.size(); ++i)
    if (!same(run(text, mode, {i}), "split at byte " + std::to_string(i))) return;
  std::vector<size_t> every(text.size());
  for (size_t i = 0; i < text.size(); ++i) every[i] = i;
  if (!same(run(text, mode, every), "byte by byte")) return;
  std::mt19937_64 rng(12345);
  for (int t = 0; t < 300; ++t) {
    std::vector<size_t> cuts;
    for (size_t at = 0;;) {
      at += 1 + static_cast<size_t>(rng() % 24);
      if (at >= text.size()) break;
      cuts.push_back(at);
    }
    if (!same(run(text, mode, cuts), "random chunking " + std::to_string(t))) return;
  }
}

const std::string EOS = "<｜end▁of▁sentence｜>";

TEST(ChatParse, ThinkingThenContent) {
  check_all_splits("Let me think: 6×7.</think>The answer is 42." + EOS, chat_mode::thinking,
                   {"Let me think: 6×7.", "The answer is 42.", {}, true, {}});
  check_all_splits("Hello, 世界!" + EOS + "ignored after EOS", chat_mode::chat, {"", "Hello, 世界!", {}, true, {}});
}

// The first assistant turn of the official golden case 1, as the model generates it.
TEST(ChatParse, OfficialToolCallAfterThinking) {
  const std::string out =
      "The user wants to know the weather in Beijing. I should use the get_weather tool.</think>\n\n"
      "<｜DSML｜tool_calls>\n<｜DSML｜invoke name=\"get_weather\">\n"
      "<｜DSML｜parameter name=\"location\" string=\"true\">Beijing</｜DSML｜parameter>\n"
      "<｜DSML｜parameter name=\"unit\" string=\"true\">celsius</｜DSML｜parameter>\n</｜DSML｜invoke>\n"
      "</｜DSML｜tool_calls>" + EOS;
  check_all_splits(out, chat_mode::thinking,
                   {"The user wants to know the weather in Beijing. I should use the get_weather tool.", "",
                    {{"call_0", "get_weather", R"({"location": "Beijing", "unit": "celsius"})"}}, true, {}});
  const auto c = cmfx::chat_parse_completion(out, chat_mode::thinking, "call_x");
  ASSERT_EQ(c.tool_calls.size(), 1u);
  EXPECT_EQ(c.tool_calls[0].id, "call_x0");
  EXPECT_TRUE(c.finished_by_eos);
  EXPECT_TRUE(c.warnings.empty());
}

TEST(ChatParse, ToolCallBeforeThinkingClosed) {
  const std::string out =
      "I need data.\n\n<｜DSML｜tool_calls>\n<｜DSML｜invoke name=\"search\">\n"
      "<｜DSML｜parameter name=\"query\" string=\"true\">a < b > c</｜DSML｜parameter>\n"
      "<｜DSML｜parameter name=\"n\" string=\"false\">3</｜DSML｜parameter>\n</｜DSML｜invoke>\n</｜DSML｜tool_calls>" + EOS;
  check_all_splits(out, chat_mode::thinking, {"I need data.", "", {{"call_0", "search", R"({"query": "a < b > c", "n": 3})"}}, true, {}});
  // Without the "\n\n" and with other whitespace between the elements.
  const std::string terse =
      "Plan<｜DSML｜tool_calls><｜DSML｜invoke name=\"f\">  <｜DSML｜parameter name=\"k\" string=\"false\">{\"a\": [1]}"
      "</｜DSML｜parameter>\r\n\t</｜DSML｜invoke></｜DSML｜tool_calls>" + EOS;
  check_all_splits(terse, chat_mode::thinking, {"Plan", "", {{"call_0", "f", R"({"k": {"a": [1]}})"}}, true, {}});
}

TEST(ChatParse, ContentAndTwoCallsWithAwkwardValues) {
  const std::string out =
      "Sure — calling two tools.\n\n<｜DSML｜tool_calls>\n<｜DSML｜invoke name=\"write\">\n"
      "<｜DSML｜parameter name=\"path\" string=\"true\">/tmp/é.txt</｜DSML｜parameter>\n"
      "<｜DSML｜parameter name=\"body\" string=\"true\">line1\n\"quoted\"\t\\\n</think> <｜DSML｜invoke name=\"no\">\n"
      "</｜DSML｜parameter>\n</｜DSML｜invoke>\n<｜DSML｜invoke name=\"calc\">\n"
      "<｜DSML｜parameter name=\"xs\" string=\"false\">[1, 2.5, {\"k\": null}]</｜DSML｜parameter>\n"
      "<｜DSML｜parameter name=\"flag\" string=\"false\">true</｜DSML｜parameter>\n</｜DSML｜invoke>\n</｜DSML｜tool_calls>" + EOS;
  const std::string body = R"("line1\n\"quoted\"\t\\\n</think> <｜DSML｜invoke name=\"no\">\n")";
  check_all_splits(out, chat_mode::chat,
                   {"", "Sure — calling two tools.",
                    {{"call_0", "write", R"({"path": "/tmp/é.txt", "body": )" + body + "}"},
                     {"call_1", "calc", R"({"xs": [1, 2.5, {"k": null}], "flag": true})"}},
                    true, {}});
}

TEST(ChatParse, StrayMarkupDroppedNearMissesKept) {
  check_all_splits("</think>a <b> </thin <think>x</think> y <｜end▁of▁sentenc z\n\n<｜DSML｜tool_call w\n" + EOS + "more",
                   chat_mode::chat, {"", "a <b> </thin x y <｜end▁of▁sentenc z\n\n<｜DSML｜tool_call w\n", {}, true, {}});
  check_all_splits("<think>deep <｜begin▁of▁sentence｜>thought</think>\n\nok" + EOS, chat_mode::thinking,
                   {"deep thought", "\n\nok", {}, true, {}});
}

TEST(ChatParse, EndWithoutEos) {
  // Generation stopped (max tokens) inside a call: the finished call stays, the unfinished one is discarded.
  check_all_splits("R</think>C\n\n<｜DSML｜tool_calls>\n<｜DSML｜invoke name=\"a\">\n</｜DSML｜invoke>\n"
                   "<｜DSML｜invoke name=\"b\">\n<｜DSML｜parameter name=\"x\" string=\"true\">unfinished",
                   chat_mode::thinking, {"R", "C", {{"call_0", "a", "{}"}}, false, {"unfinished", "not closed"}});
  // Reasoning that never closed; a tail that may be a marker is released unless it holds "<｜".
  check_all_splits("thinking...</thi", chat_mode::thinking, {"thinking...</thi", "", {}, false, {}});
  check_all_splits("abc\n\n<｜DSML｜tool", chat_mode::thinking, {"abc", "", {}, false, {"unfinished marker"}});
  check_all_splits("text ending in newline\n", chat_mode::chat, {"", "text ending in newline\n", {}, false, {}});
  // EOS inside a block: the block is cut short.
  check_all_splits("<｜DSML｜tool_calls>\n<｜DSML｜invoke name=\"a\">\n</｜DSML｜invoke>\n" + EOS, chat_mode::chat,
                   {"", "", {{"call_0", "a", "{}"}}, true, {"not closed"}});
}

TEST(ChatParse, MalformedBlockSkipped) {
  check_all_splits("X\n\n<｜DSML｜tool_calls>\ngarbage</｜DSML｜tool_calls>Y" + EOS, chat_mode::chat,
                   {"", "XY", {}, true, {"malformed"}});
  check_all_splits("<｜DSML｜tool_calls><｜DSML｜invoke nom=\"f\"></｜DSML｜invoke></｜DSML｜tool_calls>Z" + EOS,
                   chat_mode::chat, {"", "Z", {}, true, {"malformed"}});
  // Not JSON though string="false": quoted rather than emitted as broken JSON; a repeated name keeps the first.
  check_all_splits("<｜DSML｜tool_calls><｜DSML｜invoke name=\"f\"><｜DSML｜parameter name=\"v\" string=\"false\">"
                   "hello</｜DSML｜parameter><｜DSML｜parameter name=\"v\" string=\"true\">2</｜DSML｜parameter>"
                   "</｜DSML｜invoke></｜DSML｜tool_calls>" + EOS,
                   chat_mode::chat, {"", "", {{"call_0", "f", R"({"v": "hello"})"}}, true, {"not JSON", "repeated"}});
}

// Random soups of markers, partial markers, whitespace and text: whatever the parser makes of them, it makes the
// same of every chunking, and no markup reaches the content unless the text itself was not markup.
TEST(ChatParse, MarkerSoupChunkInvariance) {
  const std::vector<std::string> pieces = {
      "</think>", "<think>", "\n\n<｜DSML｜tool_calls>", "<｜DSML｜tool_calls>", "</｜DSML｜tool_calls>",
      "<｜DSML｜invoke name=\"f\">", "<｜DSML｜invoke", " name=\"g\">", "</｜DSML｜invoke>",
      "<｜DSML｜parameter name=\"k\" string=\"true\">", "<｜DSML｜parameter name=\"n\" string=\"false\">",
      "</｜DSML｜parameter>", "<｜end▁of▁sentence｜>", "<｜begin▁of▁sentence｜>", "<｜", "</", "\n", "\n\n", " ", "x",
      "42", "é", "<", ">", "\"", "｜DSML｜", "</thi"};
  std::mt19937_64 rng(2026);
  for (int t = 0; t < 400; ++t) {
    std::string s;
    const size_t n = 1 + rng() % 24;
    for (size_t i = 0; i < n; ++i) s += pieces[rng() % pieces.size()];
    const chat_mode mode = (t & 1) ? chat_mode::thinking : chat_mode::chat;
    const result whole = run(s, mode, {});
    std::vector<size_t> every;
    for (size_t i = 1; i < s.size(); ++i) every.push_back(i);
    for (const auto& cuts : {every, std::vector<size_t>{s.size() / 3, s.size() / 2}}) {
      const result r = run(s, mode, cuts);
      ASSERT_EQ(r.reasoning, whole.reasoning) << s;
      ASSERT_EQ(r.content, whole.content) << s;
      ASSERT_TRUE(same_calls(r.calls, whole.calls)) << s;
      ASSERT_EQ(r.finished_before_finish, whole.finished_before_finish) << s;
      ASSERT_EQ(r.warnings, whole.warnings) << s;
    }
    for (const std::string_view m : {"</think>", "<think>", "<｜DSML｜tool_calls>", "<｜end▁of▁sentence｜>"}) {
      ASSERT_EQ(whole.content.find(m), std::string::npos) << s;
      ASSERT_EQ(whole.reasoning.find(m), std::string::npos) << s;
    }
  }
}

TEST(ChatParse, ParserState) {
  cmfx::chat_output_parser p(chat_mode::thinking);
  EXPECT_TRUE(p.in_reasoning());
  auto d = p.feed("abc</think>de\n\n<｜DSML｜tool_calls>\n<｜DSML｜inv");
  EXPECT_EQ(d.reasoning, "abc");
  EXPECT_EQ(d.content, "de");
  EXPECT_TRUE(p.in_tool_calls());
  d = p.feed("oke name=\"f\">\n</｜DSML｜invoke>\n");
  ASSERT_EQ(d.tool_calls.size(), 1u);
  EXPECT_EQ(p.tool_call_count(), 1u);
  d = p.feed("</｜DSML｜tool_calls>" + EOS);
  EXPECT_TRUE(d.finished);
  EXPECT_TRUE(p.done());
  EXPECT_TRUE(p.feed("late").empty());
  EXPECT_TRUE(p.warnings().empty());
}

}  // namespace
