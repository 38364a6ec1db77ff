#pragma once
/// @file stop_strings.hpp
/// @brief Stop strings on streamed text (OpenAI `stop`): text that could be the start of a stop string is held
///        back until the next chunk decides; the stop string itself (and everything after it) is never released.
///
/// @code
///   cmfx::stop_string_matcher stops({"\n\nUser:", "###"});
///   for (each decoded chunk) {
///     auto r = stops.push(chunk);
///     send(r.text);
///     if (r.stopped) break;         // finish_reason "stop"; r.which names the stop string
///   }
///   send(stops.flush());             // end of generation without a stop: release what was held back
/// @endcode
///
/// Which stop wins: the one whose occurrence ENDS first in the text (on a tie, the longer one, which starts
/// earlier). That is what a byte-by-byte check would see first, so the result does not depend on how the text was
/// chunked. Empty stop strings are ignored. The returned views stay valid until the next call. No allocation once
/// the internal buffers have grown to the largest chunk.
#include <string>
#include <string_view>
#include <vector>

#include "cmfx/core/marker_scan.hpp"

namespace cmfx {

class stop_string_matcher {
 public:
  static constexpr size_t npos = static_cast<size_t>(-1);
  struct result {
    std::string_view text;  // safe to emit now
    bool stopped = false;   // a stop string completed: nothing more will be released
    size_t which = npos;    // index of the stop string that matched
  };

  stop_string_matcher() = default;
  explicit stop_string_matcher(std::vector<std::string> stops) : stops_(std::move(stops)) {}

  result push(std::string_view chunk) {
    out_.clear();
    if (stopped_) return {out_, true, which_};
    pending_.append(chunk);
    size_t best_end = npos, best_start = 0, best = npos;
    for (size_t i = 0; i < stops_.size(); ++i) {
      if (stops_[i].empty()) continue;
      const size_t p = pending_.find(stops_[i]);
      if (p == std::string::npos) continue;
      const size_t e = p + stops_[i].size();
      if (e < best_end || (e == best_end && p < best_start)) {
        best_end = e;
        best_start = p;
        best = i;
      }
    }
    if (best != npos) {
      out_.assign(pending_, 0, best_start);
      pending_.clear();
      stopped_ = true;
      which_ = best;
      return {out_, true, best};
    }
    const size_t keep = partial_marker_suffix(pending_, stops_);
    out_.assign(pending_, 0, pending_.size() - keep);
    pending_.erase(0, pending_.size() - keep);
    return {out_, false, npos};
  }

  /// End of the stream: the held-back text (empty after a stop).
  std::string_view flush() {
    out_.swap(pending_);
    pending_.clear();
    if (stopped_) out_.clear();
    return out_;
  }

  bool stopped() const noexcept { return stopped_; }
  size_t held_back() const noexcept { return pending_.size(); }
  void reset() {
    pending_.clear();
    out_.clear();
    stopped_ = false;
    which_ = npos;
  }

 private:
  std::vector<std::string> stops_;
  std::string pending_, out_;
  bool stopped_ = false;
  size_t which_ = npos;
};

}  // namespace cmfx
