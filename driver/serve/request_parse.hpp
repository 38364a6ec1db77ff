#pragma once
// Request bodies → validated gen_request. Every problem is an api_error (400 with the parameter's name, 404 for
// an unknown model) — nothing a client sends reaches the scheduler unchecked.
#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>
#include <string_view>

#include "cmfx/text/tokenizer.hpp"
#include "serve/api_error.hpp"
#include "serve/job.hpp"

namespace cmfx::driver::serve {

/// Deepest nesting of arrays/objects accepted in a body (and in tool-call argument strings).
inline constexpr size_t max_json_depth = 128;

struct request_context {
  const tokenizer* tok = nullptr;
  std::string model_name;
  uint64_t ctx = 4096;
  uint64_t vocab = 0;
  int32_t bos = 0;
  bool thinking_default = true;
};

/// Nesting depth of JSON text ([ and { outside strings), without parsing it.
size_t json_nesting_depth(std::string_view text);
/// Parses a request body: 400 for malformed JSON, a non-object, or nesting deeper than max_json_depth.
nlohmann::ordered_json parse_body(const std::string& body);

/// POST /v1/chat/completions.
gen_request parse_chat_request(const nlohmann::ordered_json& body, const request_context& c, std::string id);
/// POST /v1/completions.
gen_request parse_completion_request(const nlohmann::ordered_json& body, const request_context& c, std::string id);

}  // namespace cmfx::driver::serve
