// libFuzzer target for the HTTP request bodies of `cmfx serve` (driver/serve/request_parse.cpp): any bytes either
// parse into a request of both endpoints or raise api_error — the contract the server relies on to answer 4xx with
// the parameter's name. Any other exception (which the server would report as a 500) or a crash is a finding. The
// prompt is encoded with the small tokenizer of fuzz/seeds/tokenizer (CMFX_FUZZ_TOKENIZER, set by CMake).
#include <cstdint>
#include <fstream>
#include <sstream>
#include <string>

#include "cmfx/text/tokenizer.hpp"
#include "serve/request_parse.hpp"

namespace {

const cmfx::tokenizer& fuzz_tokenizer() {
  static const cmfx::tokenizer tok = [] {
    std::ifstream f(CMFX_FUZZ_TOKENIZER, std::ios::binary);
    std::ostringstream ss;
    ss << f.rdbuf();
    return cmfx::tokenizer::from_json(ss.str(), CMFX_FUZZ_TOKENIZER);
  }();
  return tok;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace cmfx::driver::serve;
  const std::string body(reinterpret_cast<const char*>(data), size);
  request_context c;
  c.tok = &fuzz_tokenizer();
  c.model_name = "fuzz-model";
  c.ctx = 8192;  // the seeds' prompts fit (the small tokenizer is near byte level), longer ones hit the context check
  c.vocab = c.tok->vocab_size();
  c.bos = 262;
  try {
    const nlohmann::ordered_json j = parse_body(body);
    try {
      volatile size_t n = parse_chat_request(j, c, "chatcmpl-fuzz").prompt.size();
      (void)n;
    } catch (const api_error&) {
    }
    volatile size_t n = parse_completion_request(j, c, "cmpl-fuzz").prompt.size();
    (void)n;
  } catch (const api_error&) {
  }
  return 0;
}
