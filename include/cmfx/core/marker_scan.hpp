#pragma once
/// @file marker_scan.hpp
/// @brief Finding markers (stop strings, chat markup) in streamed text: the first complete marker, and how much of
///        a text's tail must be held back because it could be the start of a marker that the next chunk completes.
///
/// Used by the stop-string matcher (sample/stop_strings.hpp) and the chat output parser (text/chat_parse.hpp).
/// Byte-level: markers and text are compared as bytes (for valid UTF-8 markers a held-back tail always starts on a
/// character boundary of the text, since a marker never starts with a continuation byte).
#include <algorithm>
#include <cstddef>
#include <iterator>
#include <string_view>

namespace cmfx {

/// A marker occurrence: `which` indexes the marker list; npos when none was found.
struct marker_hit {
  static constexpr size_t npos = static_cast<size_t>(-1);
  size_t pos = npos;
  size_t which = npos;
  bool found() const noexcept { return which != npos; }
};

/// Leftmost occurrence of any marker in text[from..]; on a tie (two markers starting at the same byte) the longer
/// one wins, so "\n\n<x>" beats "<x>" only when it starts earlier, and "ab" loses to "abc" at the same start.
/// Empty markers are ignored.
/// markers: any indexable range of string-like values (std::string, std::string_view).
template <class Markers>
marker_hit find_first_marker(std::string_view text, const Markers& markers, size_t from = 0) noexcept {
  marker_hit best;
  size_t best_len = 0;
  for (size_t m = 0; m < std::size(markers); ++m) {
    const std::string_view mk(markers[m]);
    if (mk.empty()) continue;
    const size_t p = text.find(mk, from);
    if (p == std::string_view::npos) continue;
    if (!best.found() || p < best.pos || (p == best.pos && mk.size() > best_len)) {
      best = {p, m};
      best_len = mk.size();
    }
  }
  return best;
}

/// Length of the longest suffix of text that is a proper prefix of some marker (0 when none): the bytes a streaming
/// consumer must hold back, since the next chunk may complete a marker that starts there.
template <class Markers>
size_t partial_marker_suffix(std::string_view text, const Markers& markers) noexcept {
  size_t best = 0;
  for (const auto& mk : markers) {
    const std::string_view m(mk);
    if (m.size() < 2) continue;
    for (size_t len = std::min(m.size() - 1, text.size()); len > best; --len)
      if (text.substr(text.size() - len) == m.substr(0, len)) {
        best = len;
        break;
      }
  }
  return best;
}

/// Whether text is a (possibly empty, possibly whole) prefix of m.
inline bool is_prefix_of(std::string_view text, std::string_view m) noexcept {
  return text.size() <= m.size() && m.substr(0, text.size()) == text;
}

}  // namespace cmfx
