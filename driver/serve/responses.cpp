// OpenAI / DeepSeek response shapes.
#include "serve/responses.hpp"

#include <cmath>

#include "cmfx/text/byte_level.hpp"
#include "serve/api_error.hpp"

namespace cmfx::driver::serve {

using json = nlohmann::ordered_json;

namespace {

constexpr const char* fingerprint = "cmfx-0.1.0";

// OpenAI reports -9999.0 for probabilities that underflow; JSON has no -inf.
double finite_logprob(float lp) { return std::isfinite(lp) ? static_cast<double>(lp) : -9999.0; }

std::string token_text(const tokenizer& tok, int32_t id) { return text::utf8_lossy(tok.token_bytes(id)); }

json token_bytes(const tokenizer& tok, int32_t id) {
  json b = json::array();
  for (const char ch : tok.token_bytes(id)) b.push_back(static_cast<unsigned char>(ch));
  return b;
}

// A logprob entry's token: its text, or "token_id:<id>" with return_tokens_as_token_ids (vLLM's extension: every
// token identifiable, whatever its bytes).
std::string logprob_token(const tokenizer& tok, int32_t id, bool as_ids) {
  return as_ids ? "token_id:" + std::to_string(id) : token_text(tok, id);
}

json chat_logprob_entry(const tokenizer& tok, int32_t id, float lp, bool as_ids) {
  return json{{"token", logprob_token(tok, id, as_ids)},
              {"logprob", finite_logprob(lp)},
              {"bytes", token_bytes(tok, id)}};
}

json chat_logprobs(const tokenizer& tok, const std::vector<token_info>& tokens, bool as_ids) {
  json content = json::array();
  for (const auto& t : tokens) {
    json e = chat_logprob_entry(tok, t.id, t.logprob, as_ids);
    json top = json::array();
    for (const auto& alt : t.top) top.push_back(chat_logprob_entry(tok, alt.token, alt.logprob, as_ids));
    e["top_logprobs"] = std::move(top);
    content.push_back(std::move(e));
  }
  return json{{"content", std::move(content)}};
}

json completion_logprobs(const tokenizer& tok, const std::vector<token_info>& tokens, size_t& offset, bool as_ids) {
  json toks = json::array(), lps = json::array(), tops = json::array(), offs = json::array();
  for (const auto& t : tokens) {
    const std::string s = token_text(tok, t.id);  // text_offset counts the text's bytes either way
    toks.push_back(as_ids ? logprob_token(tok, t.id, true) : s);
    lps.push_back(finite_logprob(t.logprob));
    json top = json::object();
    for (const auto& alt : t.top) top[logprob_token(tok, alt.token, as_ids)] = finite_logprob(alt.logprob);
    tops.push_back(std::move(top));
    offs.push_back(offset);
    offset += s.size();
  }
  return json{{"tokens", std::move(toks)},
              {"token_logprobs", std::move(lps)},
              {"top_logprobs", std::move(tops)},
              {"text_offset", std::move(offs)}};
}

json tool_call_json(const chat_tool_call& c) {
  return json{{"id", c.id}, {"type", "function"}, {"function", {{"name", c.name}, {"arguments", c.arguments}}}};
}

json envelope(const response_meta& m, const char* object) {
  return json{{"id", m.req->id},
              {"object", object},
              {"created", m.created},
              {"model", m.req->model},
              {"system_fingerprint", fingerprint}};
}

json finish_value(const char* finish_reason) { return finish_reason ? json(finish_reason) : json(); }

}  // namespace

void accumulated::add(gen_event&& e) {
  reasoning += e.reasoning;
  content += e.content;
  for (auto& c : e.tool_calls) tool_calls.push_back(std::move(c));
  for (auto& t : e.tokens) tokens.push_back(std::move(t));
}

json usage_json(const gen_result& r) {
  return json{{"prompt_tokens", r.prompt_tokens},
              {"completion_tokens", r.completion_tokens},
              {"total_tokens", r.prompt_tokens + r.completion_tokens},
              {"prompt_tokens_details", {{"cached_tokens", r.cached_tokens}}},
              {"completion_tokens_details", {{"reasoning_tokens", r.reasoning_tokens}}},
              {"prompt_cache_hit_tokens", r.cached_tokens},
              {"prompt_cache_miss_tokens", r.prompt_tokens - r.cached_tokens}};
}

json chat_response(const response_meta& m, const accumulated& a, const gen_result& r) {
  json msg{{"role", "assistant"}};
  msg["content"] = (a.content.empty() && !a.tool_calls.empty()) ? json() : json(a.content);
  if (m.req->mode == chat_mode::thinking) msg["reasoning_content"] = a.reasoning;
  if (!a.tool_calls.empty()) {
    json calls = json::array();
    for (const auto& c : a.tool_calls) calls.push_back(tool_call_json(c));
    msg["tool_calls"] = std::move(calls);
  }
  json choice{{"index", 0}, {"message", std::move(msg)}};
  choice["logprobs"] = m.req->top_logprobs >= 0 ? chat_logprobs(*m.tok, a.tokens, m.req->tokens_as_ids) : json();
  choice["finish_reason"] = r.finish_reason;
  json out = envelope(m, "chat.completion");
  out["choices"] = json::array({std::move(choice)});
  out["usage"] = usage_json(r);
  return out;
}

json completion_response(const response_meta& m, const accumulated& a, const gen_result& r) {
  size_t offset = 0;
  json choice{{"index", 0}, {"text", a.content}};
  choice["logprobs"] = m.req->top_logprobs >= 0 ? completion_logprobs(*m.tok, a.tokens, offset, m.req->tokens_as_ids) : json();
  choice["finish_reason"] = r.finish_reason;
  json out = envelope(m, "text_completion");
  out["choices"] = json::array({std::move(choice)});
  out["usage"] = usage_json(r);
  return out;
}

json chat_chunk(const response_meta& m, const gen_event* e, bool first, const char* finish_reason, size_t& tool_index) {
  json delta = json::object();
  if (first) {
    delta["role"] = "assistant";
    delta["content"] = "";
  }
  json logprobs;
  if (e) {
    if (!e->reasoning.empty()) delta["reasoning_content"] = e->reasoning;
    if (!e->content.empty()) delta["content"] = e->content;
    if (!e->tool_calls.empty()) {
      json calls = json::array();
      for (const auto& c : e->tool_calls) {
        json j = tool_call_json(c);
        j["index"] = tool_index++;
        calls.push_back(std::move(j));
      }
      delta["tool_calls"] = std::move(calls);
    }
    if (m.req->top_logprobs >= 0 && !e->tokens.empty())
      logprobs = chat_logprobs(*m.tok, e->tokens, m.req->tokens_as_ids);
  }
  json choice{{"index", 0}, {"delta", std::move(delta)}, {"logprobs", std::move(logprobs)}};
  choice["finish_reason"] = finish_value(finish_reason);
  json out = envelope(m, "chat.completion.chunk");
  out["choices"] = json::array({std::move(choice)});
  if (m.req->include_usage) out["usage"] = json();
  return out;
}

json completion_chunk(const response_meta& m, const gen_event* e, const char* finish_reason, size_t& text_offset) {
  json choice{{"index", 0}, {"text", e ? e->content : std::string()}};
  choice["logprobs"] = (e && m.req->top_logprobs >= 0 && !e->tokens.empty())
                           ? completion_logprobs(*m.tok, e->tokens, text_offset, m.req->tokens_as_ids)
                           : json();
  choice["finish_reason"] = finish_value(finish_reason);
  json out = envelope(m, "text_completion");
  out["choices"] = json::array({std::move(choice)});
  if (m.req->include_usage) out["usage"] = json();
  return out;
}

text_chunks::text_chunks(const response_meta& m) : req_(m.req) {
  const bool chat = m.req->kind == job_kind::chat;
  std::string env = dump_json(envelope(m, chat ? "chat.completion.chunk" : "text_completion"));
  env.pop_back();  // the closing brace: the chunk goes on with "choices"
  head_ = "data: " + env;
  head_ += chat ? ",\"choices\":[{\"index\":0,\"delta\":{" : ",\"choices\":[{\"index\":0,\"text\":";
  tail_ = chat ? "},\"logprobs\":null,\"finish_reason\":null}]" : ",\"logprobs\":null,\"finish_reason\":null}]";
  if (m.req->include_usage) tail_ += ",\"usage\":null";
  tail_ += "}\n\n";
}

bool text_chunks::render(const gen_event& e, std::string& out) const {
  if (req_->top_logprobs >= 0 && !e.tokens.empty()) return false;
  if (req_->kind == job_kind::completion) {
    out += head_;
    out += dump_json(json(e.content));
    out += tail_;
    return true;
  }
  if (!e.tool_calls.empty() || (e.reasoning.empty() && e.content.empty())) return false;
  out += head_;
  if (!e.reasoning.empty()) {
    out += "\"reasoning_content\":";
    out += dump_json(json(e.reasoning));
  }
  if (!e.content.empty()) {
    if (!e.reasoning.empty()) out += ',';
    out += "\"content\":";
    out += dump_json(json(e.content));
  }
  out += tail_;
  return true;
}

json usage_chunk(const response_meta& m, const gen_result& r) {
  json out = envelope(m, m.req->kind == job_kind::chat ? "chat.completion.chunk" : "text_completion");
  out["choices"] = json::array();
  out["usage"] = usage_json(r);
  return out;
}

}  // namespace cmfx::driver::serve
