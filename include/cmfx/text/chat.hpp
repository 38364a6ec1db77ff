#pragma once
/// @file chat.hpp
/// @brief The DeepSeek-V4 chat encoding: messages → prompt text (token ids come from the tokenizer afterwards:
///        `tok.encode(cmfx::chat_encode(msgs, opt))`, which matches the markers as added tokens).
///
/// A transcription of the official encoder `encoding/encoding_dsv4.py` shipped with the DeepSeek-V4 checkpoints
/// (read from the copies vendored in supermy/ds4rs:encoding/encoding_dsv4.py, identical to the file the spec cites,
/// Nicooo-Wang/DeepSeek-V4-Pro-code:encoding/encoding_dsv4.py; and vllm-project/vllm:vllm/tokenizers/
/// deepseek_v4_encoding.py). Function by function:
///   encode_messages        → chat_encode: BOS once, tool messages merged into user turns, tool results sorted,
///                            reasoning dropped, then every message rendered;
///   merge_tool_messages    → a `tool` message becomes a `<tool_result>` block of a user turn; consecutive user
///                            messages (and tool results) merge into one turn joined by "\n\n";
///   sort_tool_results_by_call_order → the tool results of a turn follow the order of the preceding assistant's calls;
///   _drop_thinking_messages → thinking mode, unless any message carries tools: assistant turns before the last
///                            user/developer message lose their reasoning, developer messages there are dropped;
///   render_message         → per role, then the transition `<｜Assistant｜>` + `<think>` | `</think>` after a
///                            user/developer turn (see chat_encode);
///   render_tools, encode_arguments_to_dsml → the "## Tools" section and the DSML tool-call block.
/// Request-level tools (an OpenAI request's `tools`) are attached as vLLM's DeepSeek-V4 tokenizer does
/// (vllm-project/vllm:vllm/tokenizers/deepseek_v4.py): to a leading system/developer message, else to a new
/// system message inserted first.
///
/// Differences from the Python, all for inputs it rejects or mangles: content is a string, never None (the Python
/// renders a null tool/reminder content as "None"); a tool call's `arguments` that parses to a non-object throws
/// usage_error (the Python raises AttributeError); `name` is accepted and ignored, as by the Python.
#include <nlohmann/json.hpp>

#include <algorithm>
#include <map>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "cmfx/core/error.hpp"
#include "cmfx/text/py_json.hpp"

namespace cmfx {

/// The chat markers (spec §7; ids as in the V4 tokenizer.json: BOS 0, EOS 1, User 128803, Assistant 128804,
/// <think> 128821, </think> 128822, ｜DSML｜ 128825, <｜latest_reminder｜> 128828).
namespace chat_tokens {
inline constexpr std::string_view bos = "<｜begin▁of▁sentence｜>";
inline constexpr std::string_view eos = "<｜end▁of▁sentence｜>";
inline constexpr std::string_view user = "<｜User｜>";
inline constexpr std::string_view assistant = "<｜Assistant｜>";
inline constexpr std::string_view latest_reminder = "<｜latest_reminder｜>";
inline constexpr std::string_view think_open = "<think>";
inline constexpr std::string_view think_close = "</think>";
inline constexpr std::string_view dsml = "｜DSML｜";
inline constexpr std::string_view tool_calls_open = "<｜DSML｜tool_calls>";
inline constexpr std::string_view tool_calls_close = "</｜DSML｜tool_calls>";
inline constexpr std::string_view invoke_open = "<｜DSML｜invoke";
inline constexpr std::string_view invoke_close = "</｜DSML｜invoke>";
inline constexpr std::string_view parameter_open = "<｜DSML｜parameter";
inline constexpr std::string_view parameter_close = "</｜DSML｜parameter>";
}  // namespace chat_tokens

enum class chat_role { system, user, assistant, tool, developer, latest_reminder };
/// chat: the prompt ends with `<｜Assistant｜></think>` (no reasoning); thinking: with `<｜Assistant｜><think>`.
enum class chat_mode { chat, thinking };
/// Reasoning effort (thinking mode only; a fixed paragraph before message 0).
enum class chat_effort { unset, low, high, max };
/// Which effort paragraphs: v4_0731 — the 0731 encoder's three levels (low and unset: nothing; high: "Absolute
/// maximum …"; max: "Beyond maximum …"), as vendored in sfxnz/DeepSeek-V4-Flash-Vision-Exp-vLLM-2x-DGX-Spark:
/// encoding/encoding_dsv4.py (REASONING_EFFORT_PROMPTS) and described as the 0731 GA semantics by its vLLM patch;
/// v4_0424 — the first V4 release (REASONING_EFFORT_MAX): only max adds a paragraph (the "Absolute maximum" one),
/// high and unset add nothing, low is rejected.
enum class chat_effort_table { v4_0731, v4_0424 };

struct chat_tool_call {
  std::string id;               // OpenAI call id (used only to order tool results; never rendered)
  std::string name;
  std::string arguments = "{}"; // JSON object text, as in OpenAI's function.arguments
};

struct chat_message {
  chat_role role = chat_role::user;
  std::string content;
  std::string reasoning_content;          // assistant
  std::vector<chat_tool_call> tool_calls; // assistant
  std::string tool_call_id;               // tool
  std::string name;                       // ignored (as by the official encoder)
  nlohmann::ordered_json tools;           // OpenAI tool list, rendered on system/developer messages
  nlohmann::ordered_json response_format; // JSON schema, rendered on system/developer messages
  std::string task;                       // internal quick-instruction task: action|query|authority|domain|title|read_url
  bool wo_eos = false;                    // assistant: no EOS (an unfinished turn the model continues)
};

struct chat_options {
  chat_mode mode = chat_mode::thinking;
  chat_effort effort = chat_effort::unset;
  chat_effort_table effort_table = chat_effort_table::v4_0731;
  bool drop_thinking = true;   // encode_messages(drop_thinking=True), the default
  bool add_bos = true;         // add_default_bos_token
  nlohmann::ordered_json tools;  // request-level OpenAI tool list (attached as vLLM does, see the file comment)
};

namespace chat_detail {

// encoding_dsv4.py TOOLS_TEMPLATE with dsml_token, thinking_start_token and thinking_end_token filled in; the tool
// schemas go between the two halves.
inline constexpr std::string_view tools_head = R"(## Tools

You have access to a set of tools to help answer the user's question. You can invoke tools by writing a "<｜DSML｜tool_calls>" block like the following:

<｜DSML｜tool_calls>
<｜DSML｜invoke name="$TOOL_NAME">
<｜DSML｜parameter name="$PARAMETER_NAME" string="true|false">$PARAMETER_VALUE</｜DSML｜parameter>
...
</｜DSML｜invoke>
<｜DSML｜invoke name="$TOOL_NAME2">
...
</｜DSML｜invoke>
</｜DSML｜tool_calls>

String parameters should be specified as is and set `string="true"`. For all other types (numbers, booleans, arrays, objects), pass the value in JSON format and set `string="false"`.

If thinking_mode is enabled (triggered by <think>), you MUST output your complete reasoning inside <think>...</think> BEFORE any tool calls or final response.

Otherwise, output directly after </think> with tool calls or final response.

### Available Tool Schemas

)";
inline constexpr std::string_view tools_tail = R"(

You MUST strictly follow the above defined tool name and parameter schemas to invoke tool calls.
)";
inline constexpr std::string_view response_format_head =
    "## Response Format:\n\nYou MUST strictly adhere to the following schema to reply:\n";

// REASONING_EFFORT_MAX (0424) = REASONING_EFFORT_PROMPTS["high"] (0731).
inline constexpr std::string_view effort_absolute_max =
    "Reasoning Effort: Absolute maximum with no shortcuts permitted.\n"
    "You MUST be very thorough in your thinking and comprehensively decompose the problem to resolve the root cause, "
    "rigorously stress-testing your logic against all potential paths, edge cases, and adversarial scenarios.\n"
    "Explicitly write out your entire deliberation process, documenting every intermediate step, considered "
    "alternative, and rejected hypothesis to ensure absolutely no assumption is left unchecked.\n\n";
// REASONING_EFFORT_PROMPTS["max"] (0731).
inline constexpr std::string_view effort_beyond_max =
    "Reasoning Effort: Beyond maximum — exhaustive, relentless, and uncompromising.\n"
    "You MUST reason with the utmost depth and rigor, leaving absolutely nothing to chance: exhaustively decompose "
    "the problem into its most fundamental components, trace every causal chain to its root, and resolve the "
    "underlying cause rather than any surface symptom.\n"
    "Do not stop reasoning until you have independently verified the solution from multiple angles and are certain "
    "that no assumption remains unchecked and no error remains undiscovered.\n\n";

/// Python truthiness of a JSON value (`if tools:`).
inline bool truthy(const nlohmann::ordered_json& j) {
  if (j.is_null()) return false;
  if (j.is_boolean()) return j.get<bool>();
  if (j.is_number()) return j.get<double>() != 0.0;
  return !j.empty();  // string, array, object
}

inline std::string_view effort_prompt(const chat_options& o) {
  if (o.effort_table == chat_effort_table::v4_0424) {
    if (o.effort == chat_effort::low) throw usage_error("chat_encode: reasoning effort 'low' is not valid for the 0424 table");
    return o.effort == chat_effort::max ? effort_absolute_max : std::string_view();
  }
  switch (o.effort) {
    case chat_effort::high: return effort_absolute_max;
    case chat_effort::max: return effort_beyond_max;
    default: return {};
  }
}

// render_tools: one json.dumps line per tool["function"].
inline void append_tools(std::string& out, const nlohmann::ordered_json& tools) {
  if (!tools.is_array()) throw usage_error("chat_encode: tools must be a JSON array of OpenAI tool objects");
  out += tools_head;
  bool first = true;
  for (const auto& t : tools) {
    if (!t.is_object() || !t.contains("function"))
      throw usage_error("chat_encode: a tool has no \"function\" object (OpenAI format expected)");
    if (!first) out.push_back('\n');
    first = false;
    text::py_json_append(out, t.at("function"));
  }
  out += tools_tail;
}

// encode_arguments_to_dsml: a JSON object's members as DSML parameters; unparseable text becomes one string
// parameter named "arguments".
inline void append_dsml_arguments(std::string& out, const std::string& arguments) {
  nlohmann::ordered_json args = nlohmann::ordered_json::parse(arguments, nullptr, false);
  if (args.is_discarded()) args = nlohmann::ordered_json::object({{"arguments", arguments}});
  if (!args.is_object()) throw usage_error("chat_encode: tool-call arguments are JSON but not an object: " + arguments);
  bool first = true;
  for (auto it = args.begin(); it != args.end(); ++it) {
    if (!first) out.push_back('\n');
    first = false;
    const bool is_str = it.value().is_string();
    out += "<｜DSML｜parameter name=\"";
    out += it.key();
    out += is_str ? "\" string=\"true\">" : "\" string=\"false\">";
    if (is_str)
      out += it.value().get_ref<const std::string&>();
    else
      text::py_json_append(out, it.value());
    out += chat_tokens::parameter_close;
  }
}

inline void append_tool_calls(std::string& out, const std::vector<chat_tool_call>& calls) {
  out += "\n\n";
  out += chat_tokens::tool_calls_open;
  out.push_back('\n');
  for (size_t i = 0; i < calls.size(); ++i) {
    if (i) out.push_back('\n');
    out += "<｜DSML｜invoke name=\"";
    out += calls[i].name;
    out += "\">\n";
    append_dsml_arguments(out, calls[i].arguments);
    out += "\n";
    out += chat_tokens::invoke_close;
  }
  out.push_back('\n');
  out += chat_tokens::tool_calls_close;
}

struct block {
  bool tool_result = false;
  const std::string* text = nullptr;
  const std::string* tool_use_id = nullptr;
};

// A message after merge_tool_messages.
struct merged {
  chat_role role = chat_role::user;
  const chat_message* src = nullptr;  // null for a user turn made only of tool results
  std::vector<block> blocks;          // user turns
  bool has_tools = false;             // m.get("tools") truthy after the merge (user turns lose theirs)
  bool drop_reasoning = false;
  const std::string& task() const {
    static const std::string none;
    return src ? src->task : none;
  }
};

inline std::string_view task_token(const std::string& task) {
  static const std::map<std::string, std::string_view, std::less<>> tokens = {
      {"action", "<｜action｜>"}, {"query", "<｜query｜>"}, {"authority", "<｜authority｜>"},
      {"domain", "<｜domain｜>"}, {"title", "<｜title｜>"},   {"read_url", "<｜read_url｜>"}};
  const auto it = tokens.find(task);
  if (it == tokens.end()) throw usage_error("chat_encode: invalid task '" + task + "'");
  return it->second;
}

inline long last_user_index(const std::vector<merged>& m) {
  for (size_t i = m.size(); i-- > 0;)
    if (m[i].role == chat_role::user || m[i].role == chat_role::developer) return static_cast<long>(i);
  return -1;
}

// render_message(index, messages, thinking_mode, drop_thinking, reasoning_effort).
inline void render(std::string& out, const std::vector<merged>& msgs, size_t index, const chat_options& o, bool drop) {
  const merged& m = msgs[index];
  const bool thinking = o.mode == chat_mode::thinking;
  const long last_user = last_user_index(msgs);
  static const chat_message empty_msg;
  const chat_message& src = m.src ? *m.src : empty_msg;

  const std::string_view effort = effort_prompt(o);  // validated for every message, as the Python asserts
  if (index == 0 && thinking) out += effort;

  switch (m.role) {
    case chat_role::system:
    case chat_role::developer:
      if (m.role == chat_role::developer) {
        if (src.content.empty()) throw usage_error("chat_encode: a developer message needs content");
        out += chat_tokens::user;
      }
      out += src.content;
      if (truthy(src.tools)) {
        out += "\n\n";
        append_tools(out, src.tools);
      }
      if (truthy(src.response_format)) {
        out += "\n\n";
        out += response_format_head;
        text::py_json_append(out, src.response_format);
      }
      break;
    case chat_role::user:
      out += chat_tokens::user;
      for (size_t b = 0; b < m.blocks.size(); ++b) {
        if (b) out += "\n\n";
        if (m.blocks[b].tool_result) {
          out += "<tool_result>";
          out += *m.blocks[b].text;
          out += "</tool_result>";
        } else {
          out += *m.blocks[b].text;
        }
      }
      break;
    case chat_role::latest_reminder:
      out += chat_tokens::latest_reminder;
      out += src.content;
      break;
    case chat_role::assistant: {
      const bool prev_has_task = index > 0 && !msgs[index - 1].task().empty();
      if (thinking && !prev_has_task && (!drop || static_cast<long>(index) > last_user)) {
        if (!m.drop_reasoning) out += src.reasoning_content;
        out += chat_tokens::think_close;
      }
      out += src.content;
      if (!src.tool_calls.empty()) append_tool_calls(out, src.tool_calls);
      if (!src.wo_eos) out += chat_tokens::eos;
      break;
    }
    case chat_role::tool: throw usage_error("chat_encode: internal error, unmerged tool message");
  }

  // Transition: nothing when the next message is not an assistant/latest_reminder turn.
  if (index + 1 < msgs.size() && msgs[index + 1].role != chat_role::assistant &&
      msgs[index + 1].role != chat_role::latest_reminder)
    return;
  if (!m.task().empty()) {
    const std::string_view tt = task_token(m.task());
    if (m.task() != "action") {
      out += tt;
    } else {
      out += chat_tokens::assistant;
      out += thinking ? chat_tokens::think_open : chat_tokens::think_close;
      out += tt;
    }
  } else if (m.role == chat_role::user || m.role == chat_role::developer) {
    out += chat_tokens::assistant;
    const bool open = thinking && (!drop || static_cast<long>(index) >= last_user);
    out += open ? chat_tokens::think_open : chat_tokens::think_close;
  }
}

}  // namespace chat_detail

/// The prompt for messages (encode_messages(messages, thinking_mode, drop_thinking, add_default_bos_token,
/// reasoning_effort) of encoding_dsv4.py). After the last user/developer turn the prompt ends with
/// `<｜Assistant｜><think>` (thinking) or `<｜Assistant｜></think>` (chat); a conversation ending with an assistant
/// turn ends with its EOS (or without, for wo_eos). Throws usage_error for what the official encoder rejects.
inline std::string chat_encode(std::span<const chat_message> messages, const chat_options& opt = {}) {
  using namespace chat_detail;
  // Request-level tools (vLLM deepseek_v4.py): onto a leading system/developer message, else a new system message.
  std::vector<chat_message> with_tools;
  if (truthy(opt.tools)) {
    with_tools.assign(messages.begin(), messages.end());
    if (!with_tools.empty() &&
        (with_tools[0].role == chat_role::system || with_tools[0].role == chat_role::developer)) {
      with_tools[0].tools = opt.tools;
    } else {
      chat_message sys;
      sys.role = chat_role::system;
      sys.tools = opt.tools;
      with_tools.insert(with_tools.begin(), std::move(sys));
    }
    messages = with_tools;
  }

  // merge_tool_messages.
  std::vector<merged> msgs;
  msgs.reserve(messages.size());
  for (const chat_message& m : messages) {
    if (m.role == chat_role::tool) {
      const block b{true, &m.content, &m.tool_call_id};
      if (!msgs.empty() && msgs.back().role == chat_role::user)
        msgs.back().blocks.push_back(b);
      else
        msgs.push_back({chat_role::user, nullptr, {b}, false, false});
    } else if (m.role == chat_role::user) {
      const block b{false, &m.content, nullptr};
      if (!msgs.empty() && msgs.back().role == chat_role::user && msgs.back().task().empty())
        msgs.back().blocks.push_back(b);
      else
        msgs.push_back({chat_role::user, &m, {b}, false, false});
    } else {
      msgs.push_back({m.role, &m, {}, truthy(m.tools), false});
    }
  }

  // sort_tool_results_by_call_order (a stable sort; ids unknown to the last assistant's calls rank 0).
  std::map<std::string_view, size_t> order;
  for (merged& m : msgs) {
    if (m.role == chat_role::assistant && !m.src->tool_calls.empty()) {
      order.clear();
      for (size_t i = 0; i < m.src->tool_calls.size(); ++i)
        if (!m.src->tool_calls[i].id.empty()) order[m.src->tool_calls[i].id] = i;
    } else if (m.role == chat_role::user && !order.empty()) {
      std::vector<block> results;
      for (const block& b : m.blocks)
        if (b.tool_result) results.push_back(b);
      if (results.size() < 2) continue;
      auto rank = [&](const block& b) {
        const auto it = order.find(*b.tool_use_id);
        return it == order.end() ? size_t{0} : it->second;
      };
      std::stable_sort(results.begin(), results.end(),
                       [&](const block& a, const block& b) { return rank(a) < rank(b); });
      size_t k = 0;
      for (block& b : m.blocks)
        if (b.tool_result) b = results[k++];
    }
  }

  // Reasoning of earlier turns is dropped unless some message carries tools.
  bool drop = opt.drop_thinking;
  for (const merged& m : msgs)
    if (m.has_tools) drop = false;
  if (opt.mode == chat_mode::thinking && drop) {  // _drop_thinking_messages
    const long last_user = last_user_index(msgs);
    std::vector<merged> kept;
    kept.reserve(msgs.size());
    for (size_t i = 0; i < msgs.size(); ++i) {
      merged& m = msgs[i];
      if (static_cast<long>(i) >= last_user || m.role == chat_role::user || m.role == chat_role::system ||
          m.role == chat_role::latest_reminder) {
        kept.push_back(std::move(m));
      } else if (m.role == chat_role::assistant) {
        m.drop_reasoning = true;
        kept.push_back(std::move(m));
      }  // developer messages before the last user turn are dropped
    }
    msgs.swap(kept);
  }

  std::string out;
  if (opt.add_bos) out += chat_tokens::bos;
  for (size_t i = 0; i < msgs.size(); ++i) render(out, msgs, i, opt, drop);
  return out;
}

inline std::string chat_encode(std::initializer_list<chat_message> messages, const chat_options& opt = {}) {
  return chat_encode(std::span<const chat_message>(messages.begin(), messages.size()), opt);
}

/// Checks the §7 marker ids against a loaded tokenizer (cmfx::tokenizer or anything with
/// `std::optional<int32_t> token_id(std::string_view)`): returns one line per marker that is missing or has
/// another id. V4 checkpoints must return nothing; the V3 tokenizer.json lacks <think>, </think>, ｜DSML｜ and
/// <｜latest_reminder｜>.
template <class Tokenizer>
std::vector<std::string> chat_token_id_mismatches(const Tokenizer& tok) {
  const std::pair<std::string_view, int> expected[] = {
      {chat_tokens::bos, 0},           {chat_tokens::eos, 1},          {chat_tokens::user, 128803},
      {chat_tokens::assistant, 128804}, {chat_tokens::think_open, 128821}, {chat_tokens::think_close, 128822},
      {chat_tokens::dsml, 128825},      {chat_tokens::latest_reminder, 128828}};
  std::vector<std::string> bad;
  for (const auto& [text, id] : expected) {
    const auto got = tok.token_id(text);
    if (!got)
      bad.push_back(std::string(text) + ": absent (expected id " + std::to_string(id) + ")");
    else if (*got != id)
      bad.push_back(std::string(text) + ": id " + std::to_string(*got) + " (expected " + std::to_string(id) + ")");
  }
  return bad;
}

}  // namespace cmfx
