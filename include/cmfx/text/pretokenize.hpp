#pragma once
/// @file pretokenize.hpp
/// @brief The pre-tokenizers of byte-level BPE tokenizer.json files: a chain of `Split` rules (regex or literal
///        pattern; behaviors Removed, Isolated, MergedWithPrevious, MergedWithNext, Contiguous; invert) ending in
///        `ByteLevel` (optional prefix space, optional GPT-2 regex split).
///
/// Semantics follow Hugging Face tokenizers (tokenizers/src/pre_tokenizers/split.rs and byte_level.rs,
/// tokenizers/src/tokenizer/normalizer.rs `split`): every rule is applied to every piece the previous rule
/// produced, each piece as a string of its own (so look-arounds never see a neighbouring piece); the pattern's
/// matches and the gaps between them cover the piece; `invert` swaps the two roles; the behavior decides what
/// is kept and what is merged; empty pieces are dropped. ByteLevel's byte-to-symbol mapping itself happens in
/// the BPE model (bpe.hpp), which works on raw bytes.
#include <cstddef>
#include <deque>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "cmfx/text/byte_level.hpp"
#include "cmfx/text/regex.hpp"

namespace cmfx::text {

enum class split_behavior { removed, isolated, merged_with_previous, merged_with_next, contiguous };

/// The regex of the ByteLevel pre-tokenizer when use_regex is true (the GPT-2 pattern, from Hugging Face
/// tokenizers/src/pre_tokenizers/byte_level.rs), in Oniguruma syntax.
inline constexpr std::string_view gpt2_pattern =
    R"('s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+)";

/// Scratch space for one encode call (not shared between threads).
struct pretokenize_scratch {
  regex::match_data md;
  std::vector<std::string_view> a, b;
  struct range {
    size_t begin, end;
    bool match;
  };
  std::vector<range> ranges, merged;
  std::deque<std::string> owned;  ///< storage for pieces that are not substrings of the input (prefix space)
};

/// One `Split` pre-tokenizer.
struct split_rule {
  regex re;              ///< the compiled pattern when is_regex
  std::string literal;   ///< the pattern when it is a `String`
  bool is_regex = true;
  split_behavior behavior = split_behavior::isolated;
  bool invert = false;

  /// Appends the pieces of s to out.
  void apply(std::string_view s, std::vector<std::string_view>& out, pretokenize_scratch& sc) const {
    if (s.empty()) return;
    if (is_regex && behavior == split_behavior::isolated && !invert) {  // the common case, without a range list
      size_t pos = 0, prev = 0, mb = 0, me = 0;
      while (re.find(s, pos, sc.md, mb, me)) {
        if (mb > prev) out.push_back(s.substr(prev, mb - prev));
        if (me > mb) out.push_back(s.substr(mb, me - mb));
        prev = me;
        if (me == mb) {
          if (me >= s.size()) break;
          pos = me + utf8_char_len(static_cast<uint8_t>(s[me]));
        } else {
          pos = me;
        }
      }
      if (prev < s.size()) out.push_back(s.substr(prev));
      return;
    }
    auto& r = sc.ranges;
    r.clear();
    size_t prev = 0;
    if (is_regex) {
      size_t pos = 0, mb = 0, me = 0;
      while (re.find(s, pos, sc.md, mb, me)) {
        if (mb != prev) r.push_back({prev, mb, false});
        r.push_back({mb, me, true});
        prev = me;
        if (me == mb) {
          if (me >= s.size()) break;
          pos = me + utf8_char_len(static_cast<uint8_t>(s[me]));
        } else {
          pos = me;
        }
      }
    } else if (!literal.empty()) {
      for (size_t at = s.find(literal); at != std::string_view::npos; at = s.find(literal, at + literal.size())) {
        if (at != prev) r.push_back({prev, at, false});
        r.push_back({at, at + literal.size(), true});
        prev = at + literal.size();
      }
    }
    if (prev != s.size()) r.push_back({prev, s.size(), false});
    if (invert)
      for (auto& x : r) x.match = !x.match;

    auto& m = sc.merged;
    m.clear();
    bool previous_match = false;
    switch (behavior) {
      case split_behavior::removed:
        for (const auto& x : r)
          if (!x.match) m.push_back(x);
        break;
      case split_behavior::isolated:
        m = r;
        break;
      case split_behavior::merged_with_previous:  // a match joins the piece before it
        for (const auto& x : r) {
          if (x.match && !previous_match && !m.empty())
            m.back().end = x.end;
          else
            m.push_back(x);
          previous_match = x.match;
        }
        break;
      case split_behavior::merged_with_next:  // a match joins the piece after it
        for (size_t k = r.size(); k-- > 0;) {
          const auto& x = r[k];
          if (x.match && !previous_match && !m.empty())
            m.back().begin = x.begin;
          else
            m.push_back(x);
          previous_match = x.match;
        }
        for (size_t i = 0, j = m.size(); i + 1 < j; ++i, --j) std::swap(m[i], m[j - 1]);
        break;
      case split_behavior::contiguous:  // runs of matches (and runs of non-matches) become one piece each
        for (const auto& x : r) {
          if (x.match == previous_match && !m.empty())
            m.back().end = x.end;
          else
            m.push_back(x);
          previous_match = x.match;
        }
        break;
    }
    for (const auto& x : m)
      if (x.end > x.begin) out.push_back(s.substr(x.begin, x.end - x.begin));
  }
};

/// A Sequence of Split rules followed by ByteLevel.
struct pre_tokenizer {
  std::vector<split_rule> splits;
  bool add_prefix_space = false;  ///< ByteLevel: prepend ' ' to every piece that does not start with one
  bool use_regex = false;         ///< ByteLevel: split every piece with the GPT-2 pattern
  regex gpt2;                     ///< compiled gpt2_pattern when use_regex

  /// Splits one segment (text between added tokens) into pieces for the BPE model. The views point into
  /// segment or into sc.owned, and stay valid until the next call with the same scratch.
  const std::vector<std::string_view>& run(std::string_view segment, pretokenize_scratch& sc) const {
    auto* cur = &sc.a;
    auto* nxt = &sc.b;
    cur->clear();
    sc.owned.clear();
    if (!segment.empty()) cur->push_back(segment);
    for (const auto& rule : splits) {
      nxt->clear();
      for (const auto p : *cur) rule.apply(p, *nxt, sc);
      std::swap(cur, nxt);
    }
    if (add_prefix_space) {
      for (auto& p : *cur) {
        if (!p.empty() && p.front() != ' ') {
          sc.owned.emplace_back(" ");
          sc.owned.back().append(p);
          p = sc.owned.back();
        }
      }
    }
    if (use_regex) {  // the GPT-2 regex, Isolated, not inverted
      nxt->clear();
      for (const auto p : *cur) {
        size_t pos = 0, prev = 0, mb = 0, me = 0;
        while (gpt2.find(p, pos, sc.md, mb, me)) {
          if (mb > prev) nxt->push_back(p.substr(prev, mb - prev));
          if (me > mb) nxt->push_back(p.substr(mb, me - mb));
          prev = me;
          pos = me > mb ? me : me + (me < p.size() ? utf8_char_len(static_cast<uint8_t>(p[me])) : 1);
          if (pos > p.size()) break;
        }
        if (prev < p.size()) nxt->push_back(p.substr(prev));
      }
      std::swap(cur, nxt);
    }
    return *cur;
  }
};

}  // namespace cmfx::text
