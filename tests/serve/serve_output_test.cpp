// The text side of `cmfx serve` without a model: token ids → output_pipeline (decoder, stop strings, chat parser)
// → response JSON. The toy model's random weights never write a DSML tool call, so this is where tool calls,
// reasoning/content separation and stop strings are checked end to end (label `serve`).
#include <gtest/gtest.h>

#include <cstdlib>
#include <filesystem>
#include <string>

#include "serve/api_error.hpp"
#include "serve/output.hpp"
#include "serve/responses.hpp"

namespace {

using namespace cmfx::driver::serve;
using json = nlohmann::ordered_json;

const cmfx::tokenizer* tok() {
  static const std::unique_ptr<cmfx::tokenizer> t = [] {
    if (!std::filesystem::exists(CMFX_TOKENIZER_JSON)) return std::unique_ptr<cmfx::tokenizer>();
    return std::make_unique<cmfx::tokenizer>(cmfx::tokenizer::from_file(CMFX_TOKENIZER_JSON));
  }();
  return t.get();
}

#define NEED_TOKENIZER()                                                                         \
  if (!tok()) {                                                                                  \
    const char* ci = std::getenv("CI");                                                          \
    if (ci && std::string(ci) == "true") FAIL() << "tokenizer missing: " << CMFX_TOKENIZER_JSON; \
    GTEST_SKIP() << "tokenizer missing (scripts/tokenizer_cases.sh): " << CMFX_TOKENIZER_JSON;   \
  }

// Feeds the tokens of `text` one at a time, as the scheduler does; returns everything released.
accumulated run(const gen_request& r, const std::string& text, bool& stopped) {
  output_pipeline out(*tok(), r);
  accumulated acc;
  stopped = false;
  for (const int32_t id : tok()->encode(text)) {
    gen_event ev;
    stopped = out.push(id, ev);
    acc.add(std::move(ev));
    if (stopped) break;
  }
  gen_event last;
  out.finish(last);
  acc.add(std::move(last));
  return acc;
}

const std::string tool_text =
    "Let me look it up.</think>Checking the weather.\n\n<｜DSML｜tool_calls>\n"
    "<｜DSML｜invoke name=\"get_weather\">\n"
    "<｜DSML｜parameter name=\"city\" string=\"true\">Paris</｜DSML｜parameter>\n"
    "<｜DSML｜parameter name=\"days\" string=\"false\">3</｜DSML｜parameter>\n"
    "</｜DSML｜invoke>\n</｜DSML｜tool_calls>";

TEST(ServeOutput, ThinkingToolCallNeverReachesContent) {
  NEED_TOKENIZER();
  gen_request r;
  r.kind = job_kind::chat;
  r.mode = cmfx::chat_mode::thinking;
  r.id = "chatcmpl-abc";
  r.model = "toy";
  bool stopped = false;
  const accumulated a = run(r, tool_text, stopped);
  EXPECT_EQ(a.reasoning, "Let me look it up.");
  EXPECT_EQ(a.content, "Checking the weather.");
  ASSERT_EQ(a.tool_calls.size(), 1u);
  EXPECT_EQ(a.tool_calls[0].name, "get_weather");
  EXPECT_EQ(json::parse(a.tool_calls[0].arguments), json::parse(R"({"city": "Paris", "days": 3})"));
  EXPECT_EQ(a.tool_calls[0].id.rfind("call_abc_", 0), 0u) << a.tool_calls[0].id;

  gen_result res;
  res.finish_reason = "tool_calls";
  const response_meta m{&r, 0, tok()};
  const json body = chat_response(m, a, res);
  const json& msg = body["choices"][0]["message"];
  EXPECT_EQ(msg["reasoning_content"], "Let me look it up.");
  EXPECT_EQ(msg["content"], "Checking the weather.");
  EXPECT_EQ(msg["tool_calls"][0]["type"], "function");
  EXPECT_EQ(msg["tool_calls"][0]["function"]["name"], "get_weather");
  EXPECT_EQ(body["choices"][0]["finish_reason"], "tool_calls");
  EXPECT_EQ(body.dump().find("DSML"), std::string::npos);
}

TEST(ServeOutput, StreamChunksNumberToolCalls) {
  NEED_TOKENIZER();
  gen_request r;
  r.kind = job_kind::chat;
  r.mode = cmfx::chat_mode::chat;
  r.id = "chatcmpl-x";
  r.include_usage = true;
  const response_meta m{&r, 0, tok()};
  gen_event e;
  e.tool_calls = {{"call_1", "f", "{}"}, {"call_2", "g", "{\"a\": 1}"}};
  size_t index = 0;
  const json c = chat_chunk(m, &e, false, nullptr, index);
  EXPECT_EQ(index, 2u);
  EXPECT_EQ(c["choices"][0]["delta"]["tool_calls"][1]["index"], 1);
  EXPECT_EQ(c["choices"][0]["delta"]["tool_calls"][1]["function"]["arguments"], "{\"a\": 1}");
  EXPECT_TRUE(c["usage"].is_null());
  EXPECT_TRUE(c["choices"][0]["finish_reason"].is_null());
  const json first = chat_chunk(m, nullptr, true, nullptr, index);
  EXPECT_EQ(first["choices"][0]["delta"]["role"], "assistant");
}

TEST(ServeOutput, ChatModeHasNoReasoning) {
  NEED_TOKENIZER();
  gen_request r;
  r.kind = job_kind::chat;
  r.mode = cmfx::chat_mode::chat;
  bool stopped = false;
  const accumulated a = run(r, "Plain answer.<｜end▁of▁sentence｜>ignored", stopped);
  EXPECT_TRUE(stopped);  // EOS written as text (ignore_eos) ends the message
  EXPECT_EQ(a.reasoning, "");
  EXPECT_EQ(a.content, "Plain answer.");
}

TEST(ServeOutput, StopStringsCutTheText) {
  NEED_TOKENIZER();
  gen_request r;
  r.kind = job_kind::completion;
  r.stop = {"\n\nUser:", "STOP"};
  bool stopped = false;
  const accumulated a = run(r, "one two three STOP four five", stopped);
  EXPECT_TRUE(stopped);
  EXPECT_EQ(a.content, "one two three ");
  const accumulated b = run(r, "no stop here at all", stopped);
  EXPECT_FALSE(stopped);
  EXPECT_EQ(b.content, "no stop here at all");
}

TEST(ServeOutput, UsageCarriesDeepSeekCacheFields) {
  gen_result r;
  r.prompt_tokens = 10;
  r.cached_tokens = 7;
  r.completion_tokens = 4;
  r.reasoning_tokens = 3;
  const json u = usage_json(r);
  EXPECT_EQ(u["total_tokens"], 14);
  EXPECT_EQ(u["prompt_cache_hit_tokens"], 7);
  EXPECT_EQ(u["prompt_cache_miss_tokens"], 3);
  EXPECT_EQ(u["prompt_tokens_details"]["cached_tokens"], 7);
  EXPECT_EQ(u["completion_tokens_details"]["reasoning_tokens"], 3);
}

// The per-token fast path of streamed chunks gives the bytes of the JSON-tree path, for chat and completions,
// with and without the usage field, on text that needs escaping (quotes, backslash, control characters,
// non-ASCII, invalid UTF-8); events it must not take (tool calls, logprobs, no text) go to the general path.
TEST(ServeOutput, TextChunkFastPathEqualsJsonPath) {
  const std::vector<std::string> texts = {"plain",  "quote \" and \\ backslash", "tab\tnew\nline\x01\x1f",
                                          "caf\xc3\xa9 \xe2\x82\xac \xf0\x9f\x98\x80", "bad \xff\xfe utf-8", ""};
  for (const job_kind kind : {job_kind::chat, job_kind::completion}) {
    for (const bool usage : {false, true}) {
      gen_request r;
      r.kind = kind;
      r.include_usage = usage;
      r.id = "chatcmpl-0123456789abcdef";
      r.model = "toy \"model\"";
      const response_meta m{&r, 1764400000, nullptr};
      const text_chunks fast(m);
      size_t checked = 0;
      for (const auto& reasoning : texts) {
        for (const auto& content : texts) {
          gen_event e;
          e.reasoning = kind == job_kind::chat ? reasoning : std::string();
          e.content = content;
          std::string got;
          size_t tool_index = 0, text_offset = 0;
          const std::string want =
              "data: " +
              dump_json(kind == job_kind::chat ? chat_chunk(m, &e, false, nullptr, tool_index)
                                               : completion_chunk(m, &e, nullptr, text_offset)) +
              "\n\n";
          if (!fast.render(e, got)) {
            EXPECT_TRUE(kind == job_kind::chat && e.reasoning.empty() && e.content.empty());
            continue;
          }
          EXPECT_EQ(got, want);
          ++checked;
        }
      }
      EXPECT_GE(checked, 30u);
    }
  }
  // Events the fast path leaves to the general one.
  gen_request r;
  r.top_logprobs = 2;
  const response_meta m{&r, 0, nullptr};
  const text_chunks fast(m);
  gen_event with_lp;
  with_lp.content = "x";
  with_lp.tokens.push_back({5, -0.5f, {}});
  std::string out;
  EXPECT_FALSE(fast.render(with_lp, out));
  gen_event with_tool;
  with_tool.tool_calls.push_back({});
  EXPECT_FALSE(fast.render(with_tool, out));
  EXPECT_TRUE(out.empty());
}

}  // namespace
