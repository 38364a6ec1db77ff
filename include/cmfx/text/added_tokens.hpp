#pragma once
/// @file added_tokens.hpp
/// @brief Matching a tokenizer.json's `added_tokens` in raw text, before any pre-tokenization.
///
/// Semantics follow Hugging Face tokenizers (tokenizers/src/tokenizer/added_vocabulary.rs):
///   - matching is leftmost-longest and non-overlapping: at the leftmost position where some token matches, the
///     longest token wins, and scanning resumes after it;
///   - tokens with `normalized: false` are matched first, in the raw text; tokens with `normalized: true` are then
///     matched in each remaining (normalized) gap — two passes;
///   - `single_word`: a match is dropped (and scanning still resumes after it) when a word character touches it
///     on either side; word characters are approximated as [\p{L}\p{Nl}\p{M}\p{Nd}\p{Pc}\x{200C}\x{200D}]
///     (Rust's `\w`, whose Alphabetic part also has a few So/Other_Alphabetic symbols this misses);
///   - `lstrip` / `rstrip`: the white space (Unicode White_Space) just left / right of the match is absorbed
///     into the token, so it never reaches the BPE model; lstrip never reaches back into a previous match.
#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "cmfx/text/byte_level.hpp"
#include "cmfx/text/regex.hpp"

namespace cmfx::text {

/// One entry of tokenizer.json's `added_tokens`.
struct added_token {
  int32_t id = 0;
  std::string content;
  bool special = false;
  bool single_word = false;
  bool lstrip = false;
  bool rstrip = false;
  bool normalized = true;
};

/// A part of the input: either text for the normalizer / pre-tokenizer / BPE (token < 0) or one added token
/// (token = index into the added-token list).
struct text_segment {
  size_t begin, end;
  int32_t token;
};

/// Leftmost-longest matcher over one subset of the added tokens (a byte trie).
class added_token_matcher {
 public:
  added_token_matcher() = default;
  /// Builds the trie over the tokens whose `normalized` flag equals `normalized`.
  added_token_matcher(const std::vector<added_token>& tokens, bool normalized) {
    terminal_.push_back(-1);
    flags_.reserve(tokens.size());
    for (const auto& tok : tokens) flags_.push_back({tok.single_word, tok.lstrip, tok.rstrip});
    for (size_t t = 0; t < tokens.size(); ++t) {
      const auto& tok = tokens[t];
      if (tok.normalized != normalized || tok.content.empty()) continue;
      uint32_t node = 0;
      for (const char ch : tok.content) {
        const auto b = static_cast<uint8_t>(ch);
        const uint64_t key = (uint64_t(node) << 8) | b;
        auto it = edges_.find(key);
        if (it == edges_.end()) {
          const auto child = static_cast<uint32_t>(terminal_.size());
          terminal_.push_back(-1);
          it = edges_.emplace(key, child).first;
        }
        node = it->second;
      }
      terminal_[node] = static_cast<int32_t>(t);  // a duplicate content keeps the later entry
      first_[static_cast<uint8_t>(tok.content[0])] = true;
      any_ = true;
      if (tok.single_word) needs_word_regex_ = true;
    }
    if (needs_word_regex_) word_ = regex(R"([\p{L}\p{Nl}\p{M}\p{Nd}\p{Pc}\x{200C}\x{200D}])");
  }

  bool empty() const noexcept { return !any_; }

  /// Splits text[begin, end) into segments, appending them to out. text must be valid UTF-8.
  void split(std::string_view text, size_t begin, size_t end, std::vector<text_segment>& out,
             std::optional<regex::match_data>& md) const {
    size_t start_offset = begin;
    size_t i = begin;
    while (i < end) {
      if (!first_[static_cast<uint8_t>(text[i])]) {
        ++i;
        continue;
      }
      // Longest token starting at i.
      uint32_t node = 0;
      int32_t best = -1;
      size_t best_end = i;
      for (size_t j = i; j < end; ++j) {
        const auto it = edges_.find((uint64_t(node) << 8) | static_cast<uint8_t>(text[j]));
        if (it == edges_.end()) break;
        node = it->second;
        if (terminal_[node] >= 0) {
          best = terminal_[node];
          best_end = j + 1;
        }
      }
      if (best < 0) {
        ++i;
        continue;
      }
      const token_flags& tok = flags_[static_cast<size_t>(best)];
      size_t s = i, e = best_end;
      if (tok.single_word) {
        if (!md) md.emplace();
        const bool word_before = s > begin && is_word_before(text, begin, s, *md);
        const bool word_after = e < end && is_word_at(text.substr(0, end), e, *md);
        if (word_before || word_after) {
          i = e;
          continue;
        }
      }
      if (tok.lstrip) {
        size_t k = s;
        while (k > start_offset) {
          size_t p = k;
          if (!is_white_space(utf8_prev(text, p))) break;
          k = p;
        }
        s = k;
      }
      if (tok.rstrip) {
        while (e < end) {
          size_t p = e;
          if (!is_white_space(utf8_next(text, p))) break;
          e = p;
        }
      }
      if (s > start_offset) out.push_back({start_offset, s, -1});
      out.push_back({s, e, best});
      start_offset = e;
      i = e;
    }
    if (end > start_offset) out.push_back({start_offset, end, -1});
  }

 private:
  bool is_word_at(std::string_view text, size_t at, regex::match_data& md) const {
    size_t mb = 0, me = 0;
    const size_t next = at + utf8_char_len(static_cast<uint8_t>(text[at]));
    return word_.find(text.substr(0, next), at, md, mb, me) && mb == at;
  }
  bool is_word_before(std::string_view text, size_t begin, size_t at, regex::match_data& md) const {
    size_t p = at;
    utf8_prev(text, p);
    if (p < begin) return false;
    return is_word_at(text, p, md);
  }

  struct token_flags {
    bool single_word, lstrip, rstrip;
  };
  std::vector<token_flags> flags_;                ///< per added token (indexed like the tokenizer's list)
  std::unordered_map<uint64_t, uint32_t> edges_;  ///< (node << 8 | byte) -> child node
  std::vector<int32_t> terminal_;                 ///< node -> token index ending there, or -1
  bool first_[256] = {};                          ///< bytes some token starts with
  bool any_ = false;
  bool needs_word_regex_ = false;
  regex word_;
};

}  // namespace cmfx::text
