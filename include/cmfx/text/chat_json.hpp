#pragma once
/// @file chat_json.hpp
/// @brief OpenAI-format chat JSON (a request's `messages`) → cmfx::chat_message, for chat_encode.
///
/// Accepted per message: role (system|user|assistant|tool|developer|latest_reminder), content (string, null, or an
/// array of {"type":"text","text":…} parts, concatenated), reasoning_content (or vLLM's newer name `reasoning`),
/// tool_calls [{id, type, function:{name, arguments}}] (arguments a JSON string; an object is serialized the way
/// Python's json.dumps would), tool_call_id, name, tools, response_format, task, wo_eos. Unknown keys are ignored
/// (the official encoder ignores them too, e.g. `mask`). Anything of the wrong type throws usage_error.
#include <nlohmann/json.hpp>

#include <string>
#include <string_view>
#include <vector>

#include "cmfx/core/error.hpp"
#include "cmfx/text/chat.hpp"
#include "cmfx/text/py_json.hpp"

namespace cmfx {

inline chat_role chat_role_from_string(std::string_view s) {
  if (s == "system") return chat_role::system;
  if (s == "user") return chat_role::user;
  if (s == "assistant") return chat_role::assistant;
  if (s == "tool") return chat_role::tool;
  if (s == "developer") return chat_role::developer;
  if (s == "latest_reminder") return chat_role::latest_reminder;
  throw usage_error("chat message: unknown role '" + std::string(s) + "'");
}

inline std::string_view chat_role_name(chat_role r) {
  switch (r) {
    case chat_role::system: return "system";
    case chat_role::user: return "user";
    case chat_role::assistant: return "assistant";
    case chat_role::tool: return "tool";
    case chat_role::developer: return "developer";
    case chat_role::latest_reminder: return "latest_reminder";
  }
  return "?";
}

namespace chat_detail {

inline std::string json_text(const nlohmann::ordered_json& m, const char* key, std::string_view what) {
  const auto it = m.find(key);
  if (it == m.end() || it->is_null()) return {};
  if (it->is_string()) return it->get<std::string>();
  if (it->is_array() && std::string_view(key) == "content") {
    std::string out;
    for (const auto& part : *it) {
      if (part.is_string()) {
        out += part.get<std::string>();
        continue;
      }
      if (!part.is_object() || part.value("type", std::string()) != "text" || !part.contains("text") ||
          !part.at("text").is_string())
        throw usage_error(std::string(what) + ": only text content parts are supported");
      out += part.at("text").get<std::string>();
    }
    return out;
  }
  throw usage_error(std::string(what) + ": \"" + key + "\" must be a string");
}

}  // namespace chat_detail

inline chat_message chat_message_from_json(const nlohmann::ordered_json& j) {
  using chat_detail::json_text;
  if (!j.is_object()) throw usage_error("chat message: not a JSON object");
  if (!j.contains("role") || !j.at("role").is_string()) throw usage_error("chat message: no \"role\" string");
  chat_message m;
  m.role = chat_role_from_string(j.at("role").get<std::string>());
  const std::string what = "chat message (" + std::string(chat_role_name(m.role)) + ")";
  m.content = json_text(j, "content", what);
  m.reasoning_content = json_text(j, "reasoning_content", what);
  if (m.reasoning_content.empty()) m.reasoning_content = json_text(j, "reasoning", what);
  m.tool_call_id = json_text(j, "tool_call_id", what);
  m.name = json_text(j, "name", what);
  m.task = json_text(j, "task", what);
  if (const auto it = j.find("tools"); it != j.end()) m.tools = *it;
  if (const auto it = j.find("response_format"); it != j.end()) m.response_format = *it;
  if (const auto it = j.find("wo_eos"); it != j.end() && it->is_boolean()) m.wo_eos = it->get<bool>();
  if (const auto it = j.find("tool_calls"); it != j.end() && !it->is_null()) {
    if (!it->is_array()) throw usage_error(what + ": \"tool_calls\" must be an array");
    for (const auto& tc : *it) {
      if (!tc.is_object() || !tc.contains("function") || !tc.at("function").is_object())
        throw usage_error(what + ": a tool call has no \"function\" object");
      const auto& f = tc.at("function");
      chat_tool_call c;
      c.id = json_text(tc, "id", what);
      c.name = json_text(f, "name", what);
      const auto a = f.find("arguments");
      if (a == f.end() || a->is_null())
        c.arguments = "{}";
      else if (a->is_string())
        c.arguments = a->get<std::string>();
      else
        c.arguments = text::py_json_dumps(*a);
      m.tool_calls.push_back(std::move(c));
    }
  }
  return m;
}

/// A request's `messages` array.
inline std::vector<chat_message> chat_messages_from_json(const nlohmann::ordered_json& messages) {
  if (!messages.is_array()) throw usage_error("chat messages: not a JSON array");
  std::vector<chat_message> out;
  out.reserve(messages.size());
  for (const auto& m : messages) out.push_back(chat_message_from_json(m));
  return out;
}

}  // namespace cmfx
