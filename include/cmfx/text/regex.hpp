#pragma once
/// @file regex.hpp
/// @brief PCRE2 (8-bit, UTF + UCP, JIT when available) behind a small RAII class, and the translation of the
///        Oniguruma-syntax patterns found in Hugging Face tokenizer.json files into PCRE2 patterns that mean the same.
///
/// Hugging Face tokenizers compiles `Split` and `ByteLevel` patterns with Oniguruma. PCRE2 reads the same syntax,
/// but a few escapes mean something else there, so `onig_to_pcre2` rewrites them (Oniguruma's meanings from its
/// doc/RE, "3. Character types", Unicode case):
///   - `\s` is 0009-000D, 0085 and the categories Zl, Zp, Zs — i.e. Unicode White_Space. PCRE2 10.42 with UCP also
///     matches U+180E (a Zs character before Unicode 6.3), so `\s`/`\S` become explicit classes.
///   - `\w` is Letter | Mark | Number | Connector_Punctuation. PCRE2 10.42's UCP `\w` is [\p{L}\p{N}_].
///   - `\h` is a hexadecimal digit [0-9a-fA-F] (PCRE2: horizontal white space).
/// `\d` (Nd), `\p{..}` and everything else pass through unchanged. Oniguruma's nested classes (`[a[b]]`) and class
/// intersections (`&&`) have no PCRE2 equivalent and are refused, as are `\S`, `\W`, `\H` inside a class.
/// The Unicode tables are PCRE2's own (Unicode 14.0 in Debian 12's PCRE2 10.42): no table is hand-written here.
#ifndef PCRE2_CODE_UNIT_WIDTH
#define PCRE2_CODE_UNIT_WIDTH 8
#endif
#include <pcre2.h>

#include <cstddef>
#include <new>
#include <stdexcept>
#include <string>
#include <string_view>
#include <utility>

#include "cmfx/core/error.hpp"

static_assert(PCRE2_CODE_UNIT_WIDTH == 8, "cmfx's tokenizer uses the 8-bit PCRE2 library");

namespace cmfx::text {

/// Unicode White_Space (PropList.txt; unchanged since Unicode 6.3): what Oniguruma's `\s` and Rust's
/// `char::is_whitespace` match. Used for `\s` in patterns and for the lstrip/rstrip of added tokens.
inline bool is_white_space(char32_t c) noexcept {
  return (c >= 0x09 && c <= 0x0D) || c == 0x20 || c == 0x85 || c == 0xA0 || c == 0x1680 ||
         (c >= 0x2000 && c <= 0x200A) || c == 0x2028 || c == 0x2029 || c == 0x202F || c == 0x205F || c == 0x3000;
}

namespace detail {
// The same set as is_white_space, as the body of a PCRE2 character class.
inline constexpr std::string_view pcre2_white_space =
    "\\x{9}-\\x{D}\\x{20}\\x{85}\\x{A0}\\x{1680}\\x{2000}-\\x{200A}\\x{2028}\\x{2029}\\x{202F}\\x{205F}\\x{3000}";
inline constexpr std::string_view pcre2_word = "\\p{L}\\p{M}\\p{N}\\p{Pc}";
inline constexpr std::string_view pcre2_hex = "0-9a-fA-F";
}  // namespace detail

/// Rewrites an Oniguruma pattern (as stored in tokenizer.json) into PCRE2 syntax with the same meaning (see the
/// file comment). Throws std::invalid_argument for constructs PCRE2 cannot express.
inline std::string onig_to_pcre2(std::string_view p) {
  std::string out;
  out.reserve(p.size() + 64);
  bool in_class = false;
  size_t class_start = 0;  // index in p just after '[' or '[^'
  for (size_t i = 0; i < p.size(); ++i) {
    const char c = p[i];
    if (c == '\\') {
      if (i + 1 >= p.size()) throw std::invalid_argument("pattern ends with a lone backslash");
      const char e = p[++i];
      if (e == 'Q') {  // \Q...\E quotes literally in both dialects: copy through unchanged
        const size_t end = p.find("\\E", i + 1);
        const size_t stop = end == std::string_view::npos ? p.size() : end + 2;
        out.append("\\Q").append(p.substr(i + 1, stop - (i + 1)));
        i = stop - 1;
        continue;
      }
      std::string_view set;
      bool negated = false;
      switch (e) {
        case 's': set = detail::pcre2_white_space; break;
        case 'S': set = detail::pcre2_white_space; negated = true; break;
        case 'w': set = detail::pcre2_word; break;
        case 'W': set = detail::pcre2_word; negated = true; break;
        case 'h': set = detail::pcre2_hex; break;
        case 'H': set = detail::pcre2_hex; negated = true; break;
        default: break;
      }
      if (set.empty()) {
        out.push_back('\\');
        out.push_back(e);
        continue;
      }
      if (in_class) {
        if (negated)
          throw std::invalid_argument(std::string("\\") + e + " inside a character class is not supported");
        out.append(set);
      } else {
        out.append(negated ? "[^" : "[").append(set).push_back(']');
      }
      continue;
    }
    if (in_class) {
      if (c == ']' && i != class_start) {
        in_class = false;
      } else if (c == '[') {
        if (i + 1 < p.size() && p[i + 1] == ':') {  // POSIX [:name:] — same in both dialects
          const size_t end = p.find(":]", i + 2);
          if (end == std::string_view::npos) throw std::invalid_argument("unterminated [: in a character class");
          out.append(p.substr(i, end + 2 - i));
          i = end + 1;
          continue;
        }
        throw std::invalid_argument("nested character classes are not supported");
      } else if (c == '&' && i + 1 < p.size() && p[i + 1] == '&') {
        throw std::invalid_argument("character class intersection (&&) is not supported");
      }
      out.push_back(c);
      continue;
    }
    out.push_back(c);
    if (c == '[') {
      in_class = true;
      if (i + 1 < p.size() && p[i + 1] == '^') out.push_back(p[++i]);
      class_start = i + 1;
    }
  }
  if (in_class) throw std::invalid_argument("unterminated character class");
  return out;
}

/// A compiled PCRE2 pattern (UTF, UCP; JIT-compiled when the library supports it). Immutable after
/// construction and safe to share between threads; each caller brings its own match_data.
class regex {
 public:
  /// Per-caller scratch for matches (PCRE2 match data must not be shared between concurrent matches).
  class match_data {
   public:
    match_data() : md_(pcre2_match_data_create(1, nullptr)) {
      if (!md_) throw std::bad_alloc();
    }
    match_data(const match_data&) = delete;
    match_data& operator=(const match_data&) = delete;
    ~match_data() { pcre2_match_data_free(md_); }
    pcre2_match_data* get() const noexcept { return md_; }

   private:
    pcre2_match_data* md_;
  };

  regex() = default;
  /// Compiles a PCRE2 pattern; throws std::invalid_argument with PCRE2's message and offset on failure.
  explicit regex(std::string_view pattern) {
    int err = 0;
    PCRE2_SIZE off = 0;
    code_ = pcre2_compile(reinterpret_cast<PCRE2_SPTR>(pattern.data()), pattern.size(), PCRE2_UTF | PCRE2_UCP, &err,
                          &off, nullptr);
    if (!code_) {
      PCRE2_UCHAR buf[256];
      pcre2_get_error_message(err, buf, sizeof buf);
      throw std::invalid_argument("regex error at pattern offset " + std::to_string(off) + ": " +
                                  reinterpret_cast<const char*>(buf));
    }
    jit_ = pcre2_jit_compile(code_, PCRE2_JIT_COMPLETE) == 0;
  }
  regex(const regex&) = delete;
  regex& operator=(const regex&) = delete;
  regex(regex&& o) noexcept : code_(std::exchange(o.code_, nullptr)), jit_(o.jit_) {}
  regex& operator=(regex&& o) noexcept {
    if (this != &o) {
      pcre2_code_free(code_);
      code_ = std::exchange(o.code_, nullptr);
      jit_ = o.jit_;
    }
    return *this;
  }
  ~regex() { pcre2_code_free(code_); }

  bool jit() const noexcept { return jit_; }

  /// Finds the first match in subject that starts at or after `start` (a character boundary). Subject must be
  /// valid UTF-8 (not re-checked). Returns false when there is none; otherwise [begin, end) of the match.
  bool find(std::string_view subject, size_t start, match_data& md, size_t& begin, size_t& end) const {
    if (start > subject.size() || subject.empty()) return false;
    const auto* s = reinterpret_cast<PCRE2_SPTR>(subject.data());
    int rc = jit_ ? pcre2_jit_match(code_, s, subject.size(), start, 0, md.get(), nullptr)
                  : pcre2_match(code_, s, subject.size(), start, PCRE2_NO_UTF_CHECK, md.get(), nullptr);
    if (rc == PCRE2_ERROR_JIT_STACKLIMIT)  // deep backtracking: the interpreter keeps its stack on the heap
      rc = pcre2_match(code_, s, subject.size(), start, PCRE2_NO_UTF_CHECK | PCRE2_NO_JIT, md.get(), nullptr);
    if (rc == PCRE2_ERROR_NOMATCH) return false;
    if (rc < 0) {  // 0 only means "ovector too small for the groups": group 0 is still set
      PCRE2_UCHAR buf[256];
      pcre2_get_error_message(rc, buf, sizeof buf);
      throw usage_error(std::string("tokenizer: regex match failed: ") + reinterpret_cast<const char*>(buf));
    }
    const PCRE2_SIZE* ov = pcre2_get_ovector_pointer(md.get());
    begin = ov[0];
    end = ov[1];
    return true;
  }

 private:
  pcre2_code* code_ = nullptr;
  bool jit_ = false;
};

}  // namespace cmfx::text
