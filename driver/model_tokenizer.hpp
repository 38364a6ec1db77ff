#pragma once
// The tokenizer that belongs to a model: a CMF file's vocab section (the tokenizer.json verbatim), or the
// tokenizer.json beside a release-layout checkpoint, or a file named on the command line.
#include <string>
#include <vector>

#include "cmfx/text/tokenizer.hpp"
#include "model/dsv4_config.hpp"

namespace cmfx::driver {

struct model_tokenizer {
  tokenizer tok;
  std::string source;  // where it came from, for messages
};

/// Loads the tokenizer for `model` (a CMF file or a release directory / index / shard). `explicit_path`, when not
/// empty, is a tokenizer.json that takes precedence. Throws usage_error saying where it looked when there is none.
model_tokenizer load_model_tokenizer(const std::string& model, const std::string& explicit_path);

/// Checks a tokenizer against a model: an error when it has ids the model cannot embed; returns warnings (one per
/// chat marker of spec §7 that is missing or has another id, e.g. with the DeepSeek-V3 tokenizer.json).
std::vector<std::string> check_model_tokenizer(const model_tokenizer& t, const dsv4_config& cfg);

}  // namespace cmfx::driver
