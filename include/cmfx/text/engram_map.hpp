#pragma once
/// @file engram_map.hpp
/// @brief DeepSeek-V4.1 Engram's compressed token map (spec §4.4): every token id → a compressed id shared by the
///        tokens whose texts normalise alike (" The", "the", "THE" → one id), built from the model's tokenizer.
///
/// The official `inference/engram.py` `build_compressed_token_map` (read as transcribed by the sglang DeepSeek-V4.1
/// Engram module and other ports; found with `find_string "def build_compressed_token_map"`) does, for each id in
/// 0 .. len(tokenizer)−1:
///   text = decode([id], skip_special_tokens=False)            (Hugging Face `tokenizers`, ByteLevel decoder)
///   if "\uFFFD" in text: key = id_to_token(id)                  (a partial UTF-8 byte token: its raw piece)
///   else: key = N(text) if N(text) != "" else text
/// and numbers the distinct keys in first-appearance order. N is a `tokenizers` normalizer Sequence:
///   NFKC → NFD → StripAccents → Lowercase → Replace(Regex "[ \t\r\n]+", " ") → Replace(Regex "^ $", U+E000)
///   → Strip() → Replace(U+E000, " ").
/// Semantics taken from the `tokenizers` Rust source (huggingface/tokenizers normalizers/strip.rs, normalizer.rs),
/// which differ from Python's unicodedata / str methods in three ways that change keys:
///   - StripAccents drops every General_Category Mark (Mn, Mc, Me: `is_combining_mark`), not only characters with a
///     non-zero combining class (its own test strips U+0E4D THAI NIKHAHIT, class 0);
///   - Lowercase maps each character on its own (Rust `char::to_lowercase`: full mapping, so U+0130 → "i\u0307",
///     but no Final_Sigma context, unlike Python's str.lower);
///   - Strip trims Rust `char::is_whitespace` (the White_Space property: also \v, \f, U+0085, U+1680, U+2028,
///     U+2029 …), not Python's str.isspace (which also trims U+001C..U+001F).
/// "^ $" (Oniguruma, '\n' the only line terminator) can only match a text that is exactly one space, since the
/// previous step removed every '\n'. Unicode tables: libutf8proc (Debian 12: 2.8.0, Unicode 15.0); docs/V41.md says
/// what was compared against what. The U+FFFD test: our decode gives the token's raw bytes, which Hugging Face
/// turns into text with from_utf8_lossy, so the text holds U+FFFD exactly when the bytes are not valid UTF-8 or
/// encode U+FFFD themselves.
#include <utf8proc.h>

#include <climits>
#include <cstdint>
#include <cstdlib>
#include <stdexcept>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "cmfx/core/utf8.hpp"
#include "cmfx/text/tokenizer.hpp"

namespace cmfx {

namespace detail {

/// Unicode White_Space (what Rust's char::is_whitespace tests; PropList.txt, unchanged since Unicode 6.3).
inline bool engram_white_space(char32_t c) noexcept {
  return (c >= 0x09 && c <= 0x0D) || c == 0x20 || c == 0x85 || c == 0xA0 || c == 0x1680 ||
         (c >= 0x2000 && c <= 0x200A) || c == 0x2028 || c == 0x2029 || c == 0x202F || c == 0x205F || c == 0x3000;
}

/// utf8proc_map of valid UTF-8 (explicit length, no NULLTERM: NUL is a character); unassigned code points pass.
inline std::string engram_utf8proc(std::string_view in, int options) {
  utf8proc_uint8_t* dst = nullptr;
  const utf8proc_ssize_t n = utf8proc_map(reinterpret_cast<const utf8proc_uint8_t*>(in.data()),
                                          utf8proc_ssize_t(in.size()), &dst, utf8proc_option_t(options));
  if (n < 0) throw std::runtime_error(std::string("engram token map: utf8proc: ") + utf8proc_errmsg(n));
  std::string out(reinterpret_cast<const char*>(dst), size_t(n));
  std::free(dst);
  return out;
}

inline constexpr char32_t engram_sentinel = 0xE000;  ///< the official code's private-use stand-in for " "

}  // namespace detail

/// The normaliser N of the official map (see the file comment) applied to valid UTF-8 text; may return "".
inline std::string engram_normalize(std::string_view text) {
  const std::string nfkc = detail::engram_utf8proc(text, UTF8PROC_STABLE | UTF8PROC_COMPOSE | UTF8PROC_COMPAT);
  const std::string nfd = detail::engram_utf8proc(nfkc, UTF8PROC_STABLE | UTF8PROC_DECOMPOSE);
  // StripAccents, Lowercase and "[ \t\r\n]+" → " " in one pass over the code points.
  std::u32string s;
  s.reserve(nfd.size() + 1);
  bool in_run = false;
  for (size_t i = 0; i < nfd.size();) {
    const char32_t c = text::utf8_next(nfd, i);
    const utf8proc_category_t cat = utf8proc_category(utf8proc_int32_t(c));
    if (cat == UTF8PROC_CATEGORY_MN || cat == UTF8PROC_CATEGORY_MC || cat == UTF8PROC_CATEGORY_ME) continue;
    // Full lowercase mapping = the simple one except U+0130 (SpecialCasing.txt's only unconditional lowercase
    // expansion; char::to_lowercase applies no conditional rule such as Final_Sigma).
    const char32_t l = c == 0x130 ? char32_t('i') : char32_t(utf8proc_tolower(utf8proc_int32_t(c)));
    if (l == ' ' || l == '\t' || l == '\r' || l == '\n') {
      if (!in_run) s.push_back(U' ');
      in_run = true;
      continue;
    }
    in_run = false;
    s.push_back(l);
    if (c == 0x130) s.push_back(char32_t(0x307));
  }
  if (s == U" ") s[0] = detail::engram_sentinel;  // Replace(Regex "^ $", sentinel)
  size_t b = 0, e = s.size();                        // Strip(): White_Space at both ends
  while (b < e && detail::engram_white_space(s[b])) ++b;
  while (e > b && detail::engram_white_space(s[e - 1])) --e;
  std::string out;
  out.reserve(e - b);
  for (size_t i = b; i < e; ++i) text::utf8_append(out, s[i] == detail::engram_sentinel ? U' ' : s[i]);
  return out;
}

/// The key of one token (file comment): its raw piece when its bytes are not valid UTF-8 or hold U+FFFD, else
/// engram_normalize of its text, or the text itself when that normalises to "". An id naming no token has key "".
inline std::string engram_token_key(const tokenizer& tok, int32_t id) {
  const std::string_view bytes = tok.token_bytes(id);
  const auto* u = reinterpret_cast<const uint8_t*>(bytes.data());
  if (!utf8_valid(u, bytes.size()) || bytes.find("\xEF\xBF\xBD") != std::string_view::npos)
    return std::string(tok.token_text(id));
  std::string k = engram_normalize(bytes);
  return k.empty() ? std::string(bytes) : k;
}

/// A built map: compressed id of every token id 0 .. ids−1, and the number of compressed ids.
struct engram_compressed_map {
  std::vector<int32_t> map;
  uint32_t compressed = 0;
};

/// Builds the map over the tokenizer's ids 0 .. vocab_size()−1 (the official loop runs over len(tokenizer)),
/// numbering distinct keys in first-appearance order.
inline engram_compressed_map engram_build_token_map(const tokenizer& tok) {
  const size_t n = tok.vocab_size();
  if (n > size_t(INT32_MAX)) throw std::invalid_argument("engram token map: tokenizer has too many ids");
  engram_compressed_map r;
  r.map.resize(n);
  std::unordered_map<std::string, int32_t> ids;
  ids.reserve(n);
  for (size_t i = 0; i < n; ++i) {
    const auto [it, added] = ids.try_emplace(engram_token_key(tok, int32_t(i)), int32_t(ids.size()));
    r.map[i] = it->second;
  }
  r.compressed = uint32_t(ids.size());
  return r;
}

}  // namespace cmfx
