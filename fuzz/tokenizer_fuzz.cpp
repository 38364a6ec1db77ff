// libFuzzer target for the tokenizer.json loader: any bytes either load (then encoding and decoding a fixed
// text and the input itself must not crash) or raise input_error / usage_error. No round-trip check: a file may
// legitimately declare lstrip/rstrip added tokens, which drop whitespace by design.
#include <cstdint>
#include <string>
#include <string_view>

#include "cmfx/core/utf8.hpp"
#include "cmfx/text/tokenizer.hpp"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string_view json(reinterpret_cast<const char*>(data), size);
  try {
    const auto tok = cmfx::tokenizer::from_json(json, "fuzz.json");
    const std::string text = "hello world 123 <｜User｜> ✓ 😀";
    volatile size_t sink = tok.decode(tok.encode(text)).size();
    if (cmfx::utf8_valid(data, size) && size < 4096) sink = sink + tok.decode(tok.encode(json)).size();
  } catch (const cmfx::input_error&) {
  } catch (const cmfx::usage_error&) {
  }
  return 0;
}
