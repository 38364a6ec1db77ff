#pragma once
/// @file byte_level.hpp
/// @brief The byte-level alphabet of GPT-2-style BPE vocabularies, and the UTF-8 helpers the tokenizer needs:
///        code-point iteration over valid UTF-8, lossy conversion (U+FFFD for ill-formed sequences) and the
///        length of an incomplete trailing sequence (what a streaming decoder must hold back).
///
/// Byte-level BPE never sees raw bytes: each byte 0..255 is first replaced by one printable code point. The
/// printable ranges '!'..'~', U+00A1..U+00AC and U+00AE..U+00FF stand for themselves; the remaining 68 bytes
/// (controls, space, U+007F..U+00A0, U+00AD) map, in increasing byte order, to U+0100, U+0101, ... U+0143.
/// (Fact from `bytes_to_unicode` in openai/gpt-2:src/encoder.py, which Hugging Face tokenizers' ByteLevel uses.)
#include <array>
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

namespace cmfx::text {

/// The byte <-> code point tables of the byte-level alphabet.
struct byte_level_table {
  std::array<char32_t, 256> to_cp{};    ///< byte -> code point
  std::array<int16_t, 0x144> to_byte{};  ///< code point (< U+0144) -> byte, or -1
  std::array<std::array<char, 2>, 256> utf8{};  ///< the code point of each byte as UTF-8 (always 1 or 2 bytes)
  std::array<uint8_t, 256> utf8_len{};
};

inline const byte_level_table& byte_level() {
  static const byte_level_table t = [] {
    byte_level_table r;
    r.to_byte.fill(-1);
    auto printable = [](unsigned b) {
      return (b >= 0x21 && b <= 0x7E) || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE && b <= 0xFF);
    };
    unsigned extra = 0;
    for (unsigned b = 0; b < 256; ++b) r.to_cp[b] = printable(b) ? char32_t(b) : char32_t(0x100 + extra++);
    for (unsigned b = 0; b < 256; ++b) {
      const char32_t cp = r.to_cp[b];
      r.to_byte[cp] = static_cast<int16_t>(b);
      if (cp < 0x80) {
        r.utf8[b][0] = static_cast<char>(cp);
        r.utf8_len[b] = 1;
      } else {
        r.utf8[b][0] = static_cast<char>(0xC0 | (cp >> 6));
        r.utf8[b][1] = static_cast<char>(0x80 | (cp & 0x3F));
        r.utf8_len[b] = 2;
      }
    }
    return r;
  }();
  return t;
}

/// Appends the code point cp (a Unicode scalar value) to out as UTF-8.
inline void utf8_append(std::string& out, char32_t cp) {
  if (cp < 0x80) {
    out.push_back(static_cast<char>(cp));
  } else if (cp < 0x800) {
    out.push_back(static_cast<char>(0xC0 | (cp >> 6)));
    out.push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  } else if (cp < 0x10000) {
    out.push_back(static_cast<char>(0xE0 | (cp >> 12)));
    out.push_back(static_cast<char>(0x80 | ((cp >> 6) & 0x3F)));
    out.push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  } else {
    out.push_back(static_cast<char>(0xF0 | (cp >> 18)));
    out.push_back(static_cast<char>(0x80 | ((cp >> 12) & 0x3F)));
    out.push_back(static_cast<char>(0x80 | ((cp >> 6) & 0x3F)));
    out.push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  }
}

/// Decodes the code point at s[i] of a string already known to be valid UTF-8 and advances i past it.
inline char32_t utf8_next(std::string_view s, size_t& i) noexcept {
  const auto b = [&](size_t k) { return static_cast<uint8_t>(s[i + k]); };
  const uint8_t c = b(0);
  char32_t cp;
  if (c < 0x80) {
    cp = c;
    i += 1;
  } else if (c < 0xE0) {
    cp = (char32_t(c & 0x1F) << 6) | (b(1) & 0x3F);
    i += 2;
  } else if (c < 0xF0) {
    cp = (char32_t(c & 0x0F) << 12) | (char32_t(b(1) & 0x3F) << 6) | (b(2) & 0x3F);
    i += 3;
  } else {
    cp = (char32_t(c & 0x07) << 18) | (char32_t(b(1) & 0x3F) << 12) | (char32_t(b(2) & 0x3F) << 6) | (b(3) & 0x3F);
    i += 4;
  }
  return cp;
}

/// Decodes the code point that ends at s[i-1] of valid UTF-8 (i > 0) and moves i back to its first byte.
inline char32_t utf8_prev(std::string_view s, size_t& i) noexcept {
  size_t j = i - 1;
  while (j > 0 && (static_cast<uint8_t>(s[j]) & 0xC0) == 0x80) --j;
  size_t k = j;
  const char32_t cp = utf8_next(s, k);
  i = j;
  return cp;
}

/// The byte length of the character starting with lead byte c of valid UTF-8.
inline size_t utf8_char_len(uint8_t c) noexcept { return c < 0x80 ? 1 : c < 0xE0 ? 2 : c < 0xF0 ? 3 : 4; }

namespace detail {
/// For a lead byte: how many continuation bytes follow (0 for ASCII, -1 for a byte that cannot start a
/// character) and the allowed range of the FIRST continuation byte (Unicode Table 3-7, "Well-Formed UTF-8 Byte
/// Sequences": E0 needs A0..BF, ED needs 80..9F, F0 needs 90..BF, F4 needs 80..8F).
struct utf8_lead {
  int more;
  uint8_t lo, hi;
};
inline utf8_lead utf8_lead_info(uint8_t c) noexcept {
  if (c < 0x80) return {0, 0, 0};
  if (c >= 0xC2 && c <= 0xDF) return {1, 0x80, 0xBF};
  if (c == 0xE0) return {2, 0xA0, 0xBF};
  if (c == 0xED) return {2, 0x80, 0x9F};
  if (c >= 0xE1 && c <= 0xEF) return {2, 0x80, 0xBF};
  if (c == 0xF0) return {3, 0x90, 0xBF};
  if (c >= 0xF1 && c <= 0xF3) return {3, 0x80, 0xBF};
  if (c == 0xF4) return {3, 0x80, 0x8F};
  return {-1, 0, 0};
}
/// Length of the well-formed prefix of a character starting at s[i] (>= 1 when s[i] is a valid lead byte), and
/// whether that character is complete.
inline size_t utf8_subpart(std::string_view s, size_t i, bool& complete) noexcept {
  const utf8_lead L = utf8_lead_info(static_cast<uint8_t>(s[i]));
  complete = false;
  if (L.more < 0) return 0;
  if (L.more == 0) {
    complete = true;
    return 1;
  }
  size_t n = 1;
  for (int k = 0; k < L.more; ++k) {
    if (i + n >= s.size()) return n;
    const uint8_t c = static_cast<uint8_t>(s[i + n]);
    const uint8_t lo = k == 0 ? L.lo : 0x80, hi = k == 0 ? L.hi : 0xBF;
    if (c < lo || c > hi) return n;
    ++n;
  }
  complete = true;
  return n;
}
}  // namespace detail

/// Converts bytes to valid UTF-8, replacing each maximal ill-formed subpart by U+FFFD ("U+FFFD Substitution of
/// Maximal Subparts", Unicode §3.9; the same policy as the WHATWG TextDecoder and Rust's from_utf8_lossy).
inline std::string utf8_lossy(std::string_view s) {
  std::string out;
  out.reserve(s.size());
  size_t i = 0;
  while (i < s.size()) {
    const auto c = static_cast<uint8_t>(s[i]);
    if (c < 0x80) {
      out.push_back(static_cast<char>(c));
      ++i;
      continue;
    }
    bool complete = false;
    const size_t n = detail::utf8_subpart(s, i, complete);
    if (complete) {
      out.append(s.substr(i, n));
      i += n;
    } else {
      out.append("\xEF\xBF\xBD");
      i += n == 0 ? 1 : n;
    }
  }
  return out;
}

/// Length of the trailing bytes of s that form a well-formed but incomplete character (0..3): the bytes a
/// streaming decoder holds back until the next token completes (or breaks) the character.
inline size_t utf8_incomplete_tail(std::string_view s) noexcept {
  const size_t n = s.size();
  for (size_t back = 1; back <= 3 && back <= n; ++back) {
    const size_t i = n - back;
    const auto c = static_cast<uint8_t>(s[i]);
    if ((c & 0xC0) == 0x80) continue;  // a continuation byte: look further back for the lead
    bool complete = false;
    const size_t len = detail::utf8_subpart(s, i, complete);
    return (!complete && len == back) ? back : 0;
  }
  return 0;
}

}  // namespace cmfx::text
