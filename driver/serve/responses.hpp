#pragma once
// Response JSON in OpenAI's shapes (chat.completion, chat.completion.chunk, text_completion), with DeepSeek's
// additions: reasoning_content, usage.prompt_cache_hit_tokens / prompt_cache_miss_tokens,
// completion_tokens_details.reasoning_tokens.
#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "cmfx/text/tokenizer.hpp"
#include "serve/job.hpp"

namespace cmfx::driver::serve {

/// Everything a request produced so far (the non-streaming response is built from it).
struct accumulated {
  std::string reasoning, content;
  std::vector<chat_tool_call> tool_calls;
  std::vector<token_info> tokens;
  void add(gen_event&& e);
};

struct response_meta {
  const gen_request* req = nullptr;
  int64_t created = 0;
  const tokenizer* tok = nullptr;
};

nlohmann::ordered_json usage_json(const gen_result& r);

/// Non-streaming bodies.
nlohmann::ordered_json chat_response(const response_meta& m, const accumulated& a, const gen_result& r);
nlohmann::ordered_json completion_response(const response_meta& m, const accumulated& a, const gen_result& r);

/// Streaming chunks. For chat, `first` adds the role; tool_index numbers the tool calls across the stream.
nlohmann::ordered_json chat_chunk(const response_meta& m, const gen_event* e, bool first, const char* finish_reason,
                                  size_t& tool_index);
nlohmann::ordered_json completion_chunk(const response_meta& m, const gen_event* e, const char* finish_reason,
                                        size_t& text_offset);
/// Streamed chunks that carry only text — the per-token case — as SSE ("data: {…}\n\n"), from a prefix and suffix
/// rendered once per stream: the same bytes as "data: " + dump_json(chat_chunk / completion_chunk) + "\n\n"
/// (tests/serve/serve_output_test.cpp), without building a JSON tree per token.
class text_chunks {
 public:
  explicit text_chunks(const response_meta& m);
  /// Appends the chunk of `e` to out; false (out untouched) when e needs the general path (tool calls, logprobs,
  /// no text).
  bool render(const gen_event& e, std::string& out) const;

 private:
  const gen_request* req_;
  std::string head_, tail_;
};

/// The final usage chunk (choices: []) of stream_options.include_usage.
nlohmann::ordered_json usage_chunk(const response_meta& m, const gen_result& r);

}  // namespace cmfx::driver::serve
