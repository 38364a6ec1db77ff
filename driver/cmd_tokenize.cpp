// `cmfx tokenize [--tokenizer FILE | MODEL] [--chat [--think]] TEXT` prints the ids as a JSON array (with
// --chat, TEXT is one user message rendered with the DeepSeek-V4 chat encoding, generation prompt included).
// `cmfx detokenize [--tokenizer FILE | MODEL] IDS...` prints the text (ids as arguments or one JSON array).
#include <cstdio>
#include <nlohmann/json.hpp>

#include "cmfx/core/error.hpp"
#include "cmfx/text/chat.hpp"
#include "commands.hpp"
#include "model_tokenizer.hpp"

namespace cmfx::driver {

namespace {
tokenizer load_for(const tokenize_args& a) {
  if (a.model.empty() && a.tokenizer.empty()) throw usage_error("give a MODEL or --tokenizer FILE");
  if (a.model.empty()) return tokenizer::from_file(a.tokenizer);
  return load_model_tokenizer(a.model, a.tokenizer).tok;
}
}  // namespace

int run_tokenize(const tokenize_args& a) {
  const tokenizer tok = load_for(a);
  std::string text = a.text;
  if (a.chat) {
    chat_message m;
    m.role = chat_role::user;
    m.content = a.text;
    chat_options o;
    o.mode = a.think ? chat_mode::thinking : chat_mode::chat;
    text = chat_encode({m}, o);
  }
  const std::vector<int32_t> ids = tok.encode(text);
  std::printf("%s\n", nlohmann::json(ids).dump().c_str());
  return 0;
}

int run_detokenize(const tokenize_args& a) {
  const tokenizer tok = load_for(a);
  std::vector<int32_t> ids;
  for (const std::string& s : a.ids) {
    if (!s.empty() && s.front() == '[') {
      nlohmann::json j;
      try {
        j = nlohmann::json::parse(s);
      } catch (const nlohmann::json::exception& e) {
        throw usage_error(std::string("detokenize: not a JSON array of ids: ") + e.what());
      }
      for (const auto& v : j) {
        if (!v.is_number_integer()) throw usage_error("detokenize: ids must be integers");
        ids.push_back(v.get<int32_t>());
      }
    } else {
      size_t used = 0;
      long v = 0;
      try {
        v = std::stol(s, &used);
      } catch (const std::exception&) {
        used = 0;
      }
      if (used != s.size() || v < 0 || v > INT32_MAX) throw usage_error("detokenize: bad id '" + s + "'");
      ids.push_back(int32_t(v));
    }
  }
  for (int32_t id : ids)
    if (size_t(id) >= tok.vocab_size()) throw usage_error("detokenize: id " + std::to_string(id) + " is out of the vocabulary");
  const std::string text = tok.decode(ids);
  std::fwrite(text.data(), 1, text.size(), stdout);
  std::fputc('\n', stdout);
  return 0;
}

}  // namespace cmfx::driver
