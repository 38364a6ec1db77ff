#include "model_tokenizer.hpp"

#include <cstring>
#include <filesystem>
#include <fstream>
#include <string_view>

#include "cmfx/core/error.hpp"
#include "cmfx/io/cmf_reader.hpp"
#include "cmfx/text/chat.hpp"

namespace cmfx::driver {

namespace fs = std::filesystem;

model_tokenizer load_model_tokenizer(const std::string& model, const std::string& explicit_path) {
  if (!explicit_path.empty()) return {tokenizer::from_file(explicit_path), explicit_path};
  const std::string hint = "; pass --tokenizer PATH (a Hugging Face tokenizer.json)";
  std::error_code ec;
  if (has_cmf_magic(model)) {
    const cmf_file f = cmf_file::open(model);
    const auto v = f.vocab();
    if (v.empty())
      throw usage_error(model + ": no tokenizer: the CMF file has no vocab section (cmfx make-toy --tokenizer "
                        "writes one)" + hint);
    const std::string name = model + " (vocab section)";
    return {tokenizer::from_json(std::string_view(reinterpret_cast<const char*>(v.data()), v.size()), name), name};
  }
  const fs::path dir = fs::is_directory(model, ec) ? fs::path(model) : fs::path(model).parent_path();
  const fs::path tj = (dir.empty() ? fs::path(".") : dir) / "tokenizer.json";
  if (!fs::is_regular_file(tj, ec)) throw usage_error(model + ": no tokenizer: " + tj.string() + " does not exist" + hint);
  return {tokenizer::from_file(tj.string()), tj.string()};
}

std::vector<std::string> check_model_tokenizer(const model_tokenizer& t, const dsv4_config& cfg) {
  if (t.tok.vocab_size() > cfg.vocab)
    throw usage_error(t.source + ": the tokenizer has ids up to " + std::to_string(t.tok.vocab_size() - 1) +
                      ", the model embeds only " + std::to_string(cfg.vocab) + " (wrong tokenizer?)");
  std::vector<std::string> w;
  for (const std::string& m : chat_token_id_mismatches(t.tok)) w.push_back(t.source + ": chat marker " + m);
  return w;
}

}  // namespace cmfx::driver
