// Validation of /v1/chat/completions and /v1/completions bodies (types, ranges, unsupported options), the chat
// encoding (chat_encode with the thinking mode, effort and tools) and the context check.
#include "serve/request_parse.hpp"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <mutex>
#include <optional>
#include <random>

#include "cmfx/core/error.hpp"
#include "cmfx/text/chat.hpp"
#include "cmfx/text/chat_json.hpp"

namespace cmfx::driver::serve {

using json = nlohmann::ordered_json;

namespace {

const json* field(const json& b, const char* key) {
  const auto it = b.find(key);
  return it == b.end() || it->is_null() ? nullptr : &*it;
}

const char* type_name(const json& v) {
  if (v.is_string()) return "a string";
  if (v.is_boolean()) return "a boolean";
  if (v.is_number()) return "a number";
  if (v.is_array()) return "an array";
  if (v.is_object()) return "an object";
  return "null";
}

api_error wrong_type(const char* key, const char* expected, const json& v) {
  return bad_request(
      std::string("Invalid type for '") + key + "': expected " + expected + ", but got " + type_name(v) + " instead.",
      key, "invalid_type");
}

std::string num_text(double v) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%g", v);
  return buf;
}

/// A number in [lo, hi] (lo excluded when lo_open).
std::optional<double> get_number(const json& b, const char* key, double lo, double hi, bool lo_open = false) {
  const json* v = field(b, key);
  if (!v) return std::nullopt;
  if (!v->is_number()) throw wrong_type(key, "a number", *v);
  const double x = v->get<double>();
  if (!std::isfinite(x) || x > hi || x < lo || (lo_open && x == lo))
    throw bad_request(std::string("Invalid '") + key + "': expected a value " + (lo_open ? "> " : ">= ") +
                          num_text(lo) + " and <= " + num_text(hi) + ", but got " + num_text(x) + " instead.",
                      key, "invalid_value");
  return x;
}

/// An integer in [lo, hi] (integral floats such as 16.0 are accepted).
std::optional<int64_t> get_int(const json& b, const char* key, int64_t lo, int64_t hi) {
  const json* v = field(b, key);
  if (!v) return std::nullopt;
  int64_t x = 0;
  if (v->is_number_unsigned()) {
    const uint64_t u = v->get<uint64_t>();
    x = u > static_cast<uint64_t>(INT64_MAX) ? INT64_MAX : static_cast<int64_t>(u);
  } else if (v->is_number_integer()) {
    x = v->get<int64_t>();
  } else if (v->is_number_float() && std::isfinite(v->get<double>()) &&
             std::floor(v->get<double>()) == v->get<double>() && std::fabs(v->get<double>()) < 9e18) {
    x = static_cast<int64_t>(v->get<double>());
  } else {
    throw wrong_type(key, "an integer", *v);
  }
  if (x < lo || x > hi)
    throw bad_request(std::string("Invalid '") + key + "': expected an integer >= " + std::to_string(lo) +
                          " and <= " + std::to_string(hi) + ", but got " + std::to_string(x) + " instead.",
                      key, "invalid_value");
  return x;
}

std::optional<bool> get_bool(const json& b, const char* key) {
  const json* v = field(b, key);
  if (!v) return std::nullopt;
  if (!v->is_boolean()) throw wrong_type(key, "a boolean", *v);
  return v->get<bool>();
}

std::optional<std::string> get_string(const json& b, const char* key) {
  const json* v = field(b, key);
  if (!v) return std::nullopt;
  if (!v->is_string()) throw wrong_type(key, "a string", *v);
  return v->get<std::string>();
}

uint64_t random_seed() {
  static std::mutex m;
  static std::mt19937_64 g{std::random_device{}()};
  std::lock_guard lk(m);
  return g();
}

// What both endpoints share: model, n, stream, sampling parameters, stop strings, seed.
void parse_common(const json& b, const request_context& c, gen_request& r) {
  if (const json* m = field(b, "model")) {
    if (!m->is_string()) throw wrong_type("model", "a string", *m);
    if (m->get<std::string>() != c.model_name)
      throw api_error(404,
                      "The model '" + m->get<std::string>() + "' does not exist; this server serves '" + c.model_name +
                          "' (GET /v1/models).",
                      "invalid_request_error", "model", "model_not_found");
  }
  r.model = c.model_name;
  if (const auto n = get_int(b, "n", INT64_MIN, INT64_MAX); n && *n != 1)
    throw bad_request(
        "Invalid 'n': only n = 1 is supported (one choice per request); send several requests "
        "with different seeds instead.",
        "n", "unsupported_value");
  r.stream = get_bool(b, "stream").value_or(false);
  if (const json* so = field(b, "stream_options")) {
    if (!so->is_object()) throw wrong_type("stream_options", "an object", *so);
    if (const json* iu = field(*so, "include_usage")) {
      if (!iu->is_boolean()) throw wrong_type("stream_options.include_usage", "a boolean", *iu);
      r.include_usage = iu->get<bool>();
    }
  }
  sampling_params& sp = r.sp;
  sp.temperature = static_cast<float>(get_number(b, "temperature", 0.0, 2.0).value_or(1.0));
  // Tiny positive values must stay positive as floats (the sampler rejects 0).
  sp.top_p = std::max(static_cast<float>(get_number(b, "top_p", 0.0, 1.0, true).value_or(1.0)), 1e-9f);
  const int64_t top_k = get_int(b, "top_k", -1, INT32_MAX).value_or(0);
  sp.top_k = top_k < 0 ? 0 : static_cast<int32_t>(top_k);
  sp.min_p = static_cast<float>(get_number(b, "min_p", 0.0, 1.0).value_or(0.0));
  sp.presence_penalty = static_cast<float>(get_number(b, "presence_penalty", -2.0, 2.0).value_or(0.0));
  sp.frequency_penalty = static_cast<float>(get_number(b, "frequency_penalty", -2.0, 2.0).value_or(0.0));
  sp.repetition_penalty =
      std::max(static_cast<float>(get_number(b, "repetition_penalty", 0.0, 10.0, true).value_or(1.0)), 1e-9f);
  if (const json* s = field(b, "seed")) {
    if (s->is_number_unsigned())
      sp.seed = s->get<uint64_t>();
    else if (s->is_number_integer())
      sp.seed = static_cast<uint64_t>(s->get<int64_t>());
    else
      throw wrong_type("seed", "an integer", *s);
  } else {
    sp.seed = random_seed();
  }
  if (const json* st = field(b, "stop")) {
    if (st->is_string()) {
      r.stop.push_back(st->get<std::string>());
    } else if (st->is_array()) {
      if (st->size() > 16) throw bad_request("Invalid 'stop': at most 16 stop strings.", "stop", "invalid_value");
      for (const auto& s : *st) {
        if (!s.is_string()) throw wrong_type("stop", "a string or an array of strings", s);
        r.stop.push_back(s.get<std::string>());
      }
    } else {
      throw wrong_type("stop", "a string or an array of strings", *st);
    }
    for (const auto& s : r.stop)
      if (s.size() > 1024) throw bad_request("Invalid 'stop': a stop string is longer than 1024 bytes.", "stop");
  }
  r.ignore_eos = get_bool(b, "ignore_eos").value_or(false);
  r.tokens_as_ids = get_bool(b, "return_tokens_as_token_ids").value_or(false);
  if (const json* lb = field(b, "logit_bias")) {
    if (!lb->is_object()) throw wrong_type("logit_bias", "an object", *lb);
    if (!lb->empty())
      throw bad_request("'logit_bias' is not supported by this server.", "logit_bias", "unsupported_parameter");
  }
}

// prompt + completion must fit the context; max_tokens defaults to what is left (capped by `cap`).
void fit_context(gen_request& r, const request_context& c, std::optional<int64_t> max_tokens, uint64_t cap,
                 const char* what) {
  for (const int32_t id : r.prompt)
    if (id < 0 || static_cast<uint64_t>(id) >= c.vocab)
      throw bad_request("The tokenizer produced token id " + std::to_string(id) +
                            ", outside the model's vocabulary of " + std::to_string(c.vocab) +
                            " (does --tokenizer belong to this model?).",
                        {}, "invalid_prompt");
  const uint64_t p = r.prompt.size();
  if (p >= c.ctx)
    throw bad_request("This model's maximum context length is " + std::to_string(c.ctx) + " tokens (--ctx). However, " +
                          what + " resulted in " + std::to_string(p) + " tokens.",
                      "messages", "context_length_exceeded");
  if (max_tokens) {
    const uint64_t m = static_cast<uint64_t>(*max_tokens);
    if (p + m > c.ctx)
      throw bad_request("This model's maximum context length is " + std::to_string(c.ctx) +
                            " tokens (--ctx). However, " + "you requested " + std::to_string(p + m) + " tokens (" +
                            std::to_string(p) + " in " + what + ", " + std::to_string(m) +
                            " in the completion). Please reduce the prompt or max_tokens.",
                        "max_tokens", "context_length_exceeded");
    r.max_tokens = m;
  } else {
    r.max_tokens = std::min<uint64_t>(cap, c.ctx - p);
  }
}

void check_tools(const json& tools) {
  if (!tools.is_array()) throw wrong_type("tools", "an array", tools);
  for (const auto& t : tools) {
    // (a "type" that is not a string must not reach json::value, which throws a type_error: a 500 — request_fuzz)
    const json* type = t.is_object() ? field(t, "type") : nullptr;
    if (!t.is_object() || (type && (!type->is_string() || type->get_ref<const std::string&>() != "function")))
      throw bad_request("Invalid 'tools': each tool must be {\"type\": \"function\", \"function\": {...}}.", "tools");
    const auto f = t.find("function");
    if (f == t.end() || !f->is_object() || !f->contains("name") || !f->at("name").is_string())
      throw bad_request("Invalid 'tools': a tool has no function.name string.", "tools");
  }
}

// Thinking on/off: thinking.type, then enable_thinking, then chat_template_kwargs, then reasoning_effort "none".
chat_mode thinking_mode(const json& b, const request_context& c, chat_effort& effort) {
  std::optional<bool> on;
  if (const json* t = field(b, "thinking")) {
    if (!t->is_object()) throw wrong_type("thinking", "an object", *t);
    const auto type = get_string(*t, "type");
    if (!type || (*type != "enabled" && *type != "disabled"))
      throw bad_request("Invalid 'thinking.type': expected \"enabled\" or \"disabled\".", "thinking");
    on = *type == "enabled";
  }
  if (const auto e = get_bool(b, "enable_thinking"); e && !on) on = e;
  if (const json* k = field(b, "chat_template_kwargs")) {
    if (!k->is_object()) throw wrong_type("chat_template_kwargs", "an object", *k);
    for (const char* key : {"enable_thinking", "thinking"})
      if (const auto e = get_bool(*k, key); e && !on) on = e;
  }
  effort = chat_effort::unset;
  if (const auto re = get_string(b, "reasoning_effort")) {
    const std::string& s = *re;
    if (s == "none") {
      if (!on) on = false;
    } else if (s == "minimal" || s == "low") {
      effort = chat_effort::low;
    } else if (s == "medium" || s == "high" || s == "xhigh") {
      effort = chat_effort::high;
    } else if (s == "max" || s == "ultra") {
      effort = chat_effort::max;
    } else {
      throw bad_request("Invalid 'reasoning_effort': expected none, minimal, low, medium, high, xhigh, max or ultra.",
                        "reasoning_effort");
    }
  }
  return on.value_or(c.thinking_default) ? chat_mode::thinking : chat_mode::chat;
}

}  // namespace

size_t json_nesting_depth(std::string_view text) {
  size_t depth = 0, deepest = 0;
  bool in_string = false, escaped = false;
  for (const char ch : text) {
    if (in_string) {
      if (escaped)
        escaped = false;
      else if (ch == '\\')
        escaped = true;
      else if (ch == '"')
        in_string = false;
    } else if (ch == '"') {
      in_string = true;
    } else if (ch == '[' || ch == '{') {
      deepest = std::max(deepest, ++depth);
    } else if ((ch == ']' || ch == '}') && depth > 0) {
      --depth;
    }
  }
  return deepest;
}

json parse_body(const std::string& body) {
  if (json_nesting_depth(body) > max_json_depth)
    throw bad_request(
        "The request body nests arrays/objects deeper than " + std::to_string(max_json_depth) + " levels.", {},
        "invalid_json");
  json j;
  try {
    j = json::parse(body);
  } catch (const json::parse_error& e) {
    throw bad_request(std::string("The request body is not valid JSON: ") + e.what(), {}, "invalid_json");
  } catch (const json::exception& e) {  // e.g. out_of_range: a number too large for a double (1e400)
    throw bad_request(std::string("The request body is not valid JSON: ") + e.what(), {}, "invalid_json");
  }
  if (!j.is_object()) throw bad_request("The request body must be a JSON object.", {}, "invalid_json");
  return j;
}

gen_request parse_chat_request(const json& b, const request_context& c, std::string id) {
  gen_request r;
  r.kind = job_kind::chat;
  r.id = std::move(id);
  parse_common(b, c, r);
  std::optional<int64_t> max_tokens = get_int(b, "max_completion_tokens", 1, INT64_MAX);
  if (!max_tokens) max_tokens = get_int(b, "max_tokens", 1, INT64_MAX);
  const bool logprobs = get_bool(b, "logprobs").value_or(false);
  const auto top = get_int(b, "top_logprobs", 0, 20);
  if (top && !logprobs) throw bad_request("'top_logprobs' needs 'logprobs': true.", "top_logprobs", "invalid_value");
  r.top_logprobs = logprobs ? static_cast<int>(top.value_or(0)) : -1;
  r.sp.logprobs = logprobs;
  r.sp.top_logprobs = logprobs ? static_cast<int32_t>(top.value_or(0)) : 0;

  const json* msgs_json = field(b, "messages");
  if (!msgs_json)
    throw bad_request("Missing required parameter: 'messages'.", "messages", "missing_required_parameter");
  if (!msgs_json->is_array()) throw wrong_type("messages", "an array", *msgs_json);
  if (msgs_json->empty()) throw bad_request("'messages' must not be empty.", "messages", "invalid_value");
  for (const auto& m : *msgs_json)
    if (const json* calls = m.is_object() ? field(m, "tool_calls") : nullptr; calls && calls->is_array())
      for (const auto& tc : *calls)
        if (tc.is_object() && tc.contains("function") && tc["function"].is_object() &&
            tc["function"].contains("arguments") && tc["function"]["arguments"].is_string() &&
            json_nesting_depth(tc["function"]["arguments"].get_ref<const std::string&>()) > max_json_depth)
          throw bad_request("A tool call's arguments nest deeper than " + std::to_string(max_json_depth) + " levels.",
                            "messages");

  chat_options opt;
  opt.mode = thinking_mode(b, c, opt.effort);
  if (const json* tools = field(b, "tools")) {
    check_tools(*tools);
    std::string choice = "auto";
    if (const json* tc = field(b, "tool_choice")) {
      if (!tc->is_string())
        throw bad_request("'tool_choice' naming a function is not supported; use \"auto\" or \"none\".", "tool_choice",
                          "unsupported_value");
      choice = tc->get<std::string>();
      if (choice != "auto" && choice != "none")
        throw bad_request("'tool_choice' \"" + choice + "\" is not supported; use \"auto\" or \"none\".", "tool_choice",
                          "unsupported_value");
    }
    if (choice == "auto" && !tools->empty()) opt.tools = *tools;
  }
  if (const json* rf = field(b, "response_format")) {
    if (!rf->is_object()) throw wrong_type("response_format", "an object", *rf);
    if (rf->value("type", std::string("text")) != "text")
      throw bad_request("Only response_format {\"type\": \"text\"} is supported.", "response_format",
                        "unsupported_value");
  }
  std::string text;
  try {
    const std::vector<chat_message> msgs = chat_messages_from_json(*msgs_json);
    text = chat_encode(msgs, opt);
  } catch (const usage_error& e) {
    throw bad_request(std::string("Invalid 'messages': ") + e.what(), "messages");
  } catch (const json::exception& e) {
    throw bad_request(std::string("Invalid 'messages': ") + e.what(), "messages");
  }
  try {
    r.prompt = c.tok->encode(text, true);
  } catch (const input_error& e) {
    throw bad_request(std::string("Invalid 'messages': ") + e.what(), "messages");
  }
  r.mode = opt.mode;
  r.log_text = std::move(text);
  fit_context(r, c, max_tokens, UINT64_MAX, "your messages");
  return r;
}

gen_request parse_completion_request(const json& b, const request_context& c, std::string id) {
  gen_request r;
  r.kind = job_kind::completion;
  r.id = std::move(id);
  parse_common(b, c, r);
  const std::optional<int64_t> max_tokens = get_int(b, "max_tokens", 1, INT64_MAX);
  if (const auto best_of = get_int(b, "best_of", INT64_MIN, INT64_MAX); best_of && *best_of != 1)
    throw bad_request("Invalid 'best_of': only 1 is supported.", "best_of", "unsupported_value");
  if (get_bool(b, "echo").value_or(false))
    throw bad_request("'echo' is not supported by this server.", "echo", "unsupported_value");
  if (const auto suffix = get_string(b, "suffix"); suffix && !suffix->empty())
    throw bad_request("'suffix' is not supported by this server.", "suffix", "unsupported_value");
  if (const auto lp = get_int(b, "logprobs", 0, 5)) {
    r.top_logprobs = static_cast<int>(*lp);
    r.sp.logprobs = true;
    r.sp.top_logprobs = static_cast<int32_t>(*lp);
  }

  const json* p = field(b, "prompt");
  if (!p) throw bad_request("Missing required parameter: 'prompt'.", "prompt", "missing_required_parameter");
  const json* one = p;
  if (p->is_array() && !p->empty() && (p->at(0).is_string() || p->at(0).is_array())) {
    if (p->size() != 1) throw bad_request("Only one prompt per request is supported.", "prompt", "unsupported_value");
    one = &p->at(0);
  }
  if (one->is_string()) {
    const std::string& text = one->get_ref<const std::string&>();
    try {
      r.prompt = c.tok->encode(text, true);
    } catch (const input_error& e) {
      throw bad_request(std::string("Invalid 'prompt': ") + e.what(), "prompt");
    }
    if (r.prompt.empty() || r.prompt[0] != c.bos) r.prompt.insert(r.prompt.begin(), c.bos);
    r.log_text = text;
  } else if (one->is_array()) {
    if (one->empty()) throw bad_request("'prompt' must not be empty.", "prompt", "invalid_value");
    for (const auto& t : *one) {
      if (!t.is_number_integer() || t.get<int64_t>() < 0 || static_cast<uint64_t>(t.get<int64_t>()) >= c.vocab)
        throw bad_request("Invalid 'prompt': token ids must be integers in [0, " + std::to_string(c.vocab) + ").",
                          "prompt", "invalid_value");
      r.prompt.push_back(static_cast<int32_t>(t.get<int64_t>()));
    }
    r.log_text = "(" + std::to_string(r.prompt.size()) + " token ids)";
  } else {
    throw wrong_type("prompt", "a string, an array of token ids, or an array of one of them", *one);
  }
  fit_context(r, c, max_tokens, 16, "your prompt");
  return r;
}

}  // namespace cmfx::driver::serve
