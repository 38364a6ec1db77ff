#pragma once
/// @file utf8.hpp
/// @brief Strict UTF-8 validation (RFC 3629: no overlongs, no surrogates, nothing above U+10FFFF).
#include <cstddef>
#include <cstdint>

namespace cmfx {

/// Returns the index of the first invalid byte, or len when the whole range is valid UTF-8.
inline size_t utf8_invalid_at(const uint8_t* s, size_t len) noexcept {
  size_t i = 0;
  while (i < len) {
    const uint8_t c = s[i];
    if (c < 0x80) {
      ++i;
      continue;
    }
    size_t n;
    uint32_t cp;
    if ((c & 0xE0) == 0xC0) {
      n = 1;
      cp = c & 0x1F;
    } else if ((c & 0xF0) == 0xE0) {
      n = 2;
      cp = c & 0x0F;
    } else if ((c & 0xF8) == 0xF0) {
      n = 3;
      cp = c & 0x07;
    } else {
      return i;
    }
    if (len - i <= n) return i;
    for (size_t k = 1; k <= n; ++k) {
      if ((s[i + k] & 0xC0) != 0x80) return i;
      cp = (cp << 6) | (s[i + k] & 0x3F);
    }
    static constexpr uint32_t min_cp[4] = {0, 0x80, 0x800, 0x10000};
    if (cp < min_cp[n] || cp > 0x10FFFF || (cp >= 0xD800 && cp <= 0xDFFF)) return i;
    i += n + 1;
  }
  return len;
}

inline bool utf8_valid(const uint8_t* s, size_t len) noexcept { return utf8_invalid_at(s, len) == len; }

}  // namespace cmfx
