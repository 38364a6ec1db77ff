#pragma once
/// @file bpe.hpp
/// @brief The byte-level BPE model: a pre-tokenized piece (raw UTF-8 bytes) -> token ids.
///
/// Each byte starts as the symbol of its byte-level character (byte_level.hpp); then, as in Hugging Face
/// tokenizers (tokenizers/src/models/bpe/word.rs `merge_all`), the adjacent pair with the lowest merge rank is
/// merged, ties going to the leftmost pair, until no adjacent pair has a merge. A binary heap over a linked list
/// of symbols keeps this O(n log n) in the piece length. Bytes without a symbol become `unk` (consecutive ones
/// fused when fuse_unk) or, without an unk token, are dropped — HF's behaviour. `ignore_merges` first looks the
/// whole piece up in the vocabulary. Results for pieces up to 255 bytes are cached (bounded; cleared when full).
#include <algorithm>
#include <array>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

namespace cmfx::text {

/// Hash for heterogeneous (std::string_view) lookup in string-keyed unordered maps.
struct string_hash {
  using is_transparent = void;
  size_t operator()(std::string_view s) const noexcept { return std::hash<std::string_view>{}(s); }
};
template <class V>
using string_map = std::unordered_map<std::string, V, string_hash, std::equal_to<>>;

class bpe_model {
 public:
  struct merge_entry {
    int32_t rank;
    int32_t result;
  };
  static uint64_t pair_key(int32_t a, int32_t b) noexcept {
    return (uint64_t(static_cast<uint32_t>(a)) << 32) | static_cast<uint32_t>(b);
  }

  std::unordered_map<uint64_t, merge_entry> merges;  ///< (left id, right id) -> rank and merged id
  std::array<int32_t, 256> byte_id{};                ///< id of each byte's symbol, or -1
  string_map<int32_t> raw_vocab;                     ///< raw bytes of each byte-level token -> id
  bool ignore_merges = false;
  int32_t unk = -1;  ///< id of unk_token, or -1
  bool fuse_unk = false;

  static constexpr size_t max_cached_bytes = 255;
  static constexpr size_t max_cache_entries = 1 << 16;

  /// Appends the ids of one piece to out.
  void encode_piece(std::string_view w, std::vector<int32_t>& out) const {
    if (w.empty()) return;
    if (w.size() == 1) {
      push_byte(static_cast<uint8_t>(w[0]), out);
      return;
    }
    if (ignore_merges) {
      if (const auto it = raw_vocab.find(w); it != raw_vocab.end()) {
        out.push_back(it->second);
        return;
      }
    }
    const bool cacheable = w.size() <= max_cached_bytes;
    if (cacheable) {
      std::lock_guard<std::mutex> lock(cache_->mu);
      if (const auto it = cache_->map.find(w); it != cache_->map.end()) {
        out.insert(out.end(), it->second.begin(), it->second.end());
        return;
      }
    }
    const size_t before = out.size();
    merge_word(w, out);
    if (cacheable) {
      std::vector<int32_t> ids(out.begin() + static_cast<std::ptrdiff_t>(before), out.end());
      std::lock_guard<std::mutex> lock(cache_->mu);
      if (cache_->map.size() >= max_cache_entries) cache_->map.clear();
      cache_->map.emplace(std::string(w), std::move(ids));
    }
  }

  void clear_cache() const {
    std::lock_guard<std::mutex> lock(cache_->mu);
    cache_->map.clear();
  }

 private:
  struct symbol {
    int32_t id;
    int32_t prev, next;  ///< neighbour indices, -1 at the ends
    bool alive;
  };
  struct candidate {
    int32_t rank;
    int32_t pos;  ///< index of the left symbol (merged symbols keep the left index, so order is preserved)
    int32_t left_id, right_id, right_pos, result;
    bool operator>(const candidate& o) const noexcept {
      return rank != o.rank ? rank > o.rank : pos > o.pos;
    }
  };

  void push_byte(uint8_t b, std::vector<int32_t>& out) const {
    const int32_t id = byte_id[b];
    if (id >= 0)
      out.push_back(id);
    else if (unk >= 0)
      out.push_back(unk);
  }

  void merge_word(std::string_view w, std::vector<int32_t>& out) const {
    thread_local std::vector<symbol> syms;
    thread_local std::vector<candidate> heap_storage;
    syms.clear();
    for (const char ch : w) {
      int32_t id = byte_id[static_cast<uint8_t>(ch)];
      if (id < 0) {
        if (unk < 0) continue;  // no unk token: the byte is dropped
        if (fuse_unk && !syms.empty() && syms.back().id == unk) continue;
        id = unk;
      }
      const auto n = static_cast<int32_t>(syms.size());
      syms.push_back({id, n - 1, -1, true});
      if (n > 0) syms[static_cast<size_t>(n - 1)].next = n;
    }
    auto& heap = heap_storage;  // a min-heap on (rank, pos)
    heap.clear();
    const std::greater<> later;
    auto consider = [&](int32_t pos) {
      if (pos < 0) return;
      const symbol& l = syms[static_cast<size_t>(pos)];
      if (l.next < 0) return;
      const symbol& r = syms[static_cast<size_t>(l.next)];
      const auto it = merges.find(pair_key(l.id, r.id));
      if (it == merges.end()) return;
      heap.push_back({it->second.rank, pos, l.id, r.id, l.next, it->second.result});
      std::push_heap(heap.begin(), heap.end(), later);
    };
    for (int32_t i = 0; i + 1 < static_cast<int32_t>(syms.size()); ++i) consider(i);
    while (!heap.empty()) {
      std::pop_heap(heap.begin(), heap.end(), later);
      const candidate c = heap.back();
      heap.pop_back();
      symbol& l = syms[static_cast<size_t>(c.pos)];
      if (!l.alive || l.id != c.left_id || l.next != c.right_pos) continue;
      symbol& r = syms[static_cast<size_t>(c.right_pos)];
      if (!r.alive || r.id != c.right_id) continue;
      l.id = c.result;
      l.next = r.next;
      if (r.next >= 0) syms[static_cast<size_t>(r.next)].prev = c.pos;
      r.alive = false;
      consider(l.prev);
      consider(c.pos);
    }
    for (const auto& s : syms)
      if (s.alive) out.push_back(s.id);
  }

  struct cache_state {
    std::mutex mu;
    string_map<std::vector<int32_t>> map;
  };
  std::unique_ptr<cache_state> cache_ = std::make_unique<cache_state>();
};

}  // namespace cmfx::text
