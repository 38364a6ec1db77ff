#pragma once
// Glue the DeepSeek-V4 and V4.1 graphs share: typed reads of config.json keys, the check that a chunk's segments
// tile it (one state per sequence, in order, each state once, token ids inside the vocabulary), and the scratch
// buffers that only grow (no per-call allocation on the forward passes' hot paths).
#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <limits>
#include <span>
#include <string>
#include <string_view>
#include <type_traits>
#include <vector>

#include <nlohmann/json.hpp>

#include "cmfx/core/error.hpp"

namespace cmfx::driver {

/// v.resize(n) with the capacity grown geometrically: a buffer whose size goes up and down between uses (entries of
/// layers with different compression ratios) while its largest size creeps up by one entry per decode step would
/// otherwise reallocate at every new largest size (std::vector grows from its size, not its capacity).
template <class T>
void resize_grow(std::vector<T>& v, size_t n) {
  if (n > v.capacity()) v.reserve(std::max(n, 2 * v.capacity()));
  v.resize(n);
}

/// The first n values of the caller's scratch `v`, which only grows (resize_grow): a call that needs no more than an
/// earlier one allocates nothing. The values are whatever an earlier call left, not the zeros of std::vector<T>(n):
/// a buffer that is accumulated into, or read where this call did not write, takes grown_filled.
template <class T>
std::span<T> grown(std::vector<T>& v, size_t n) {
  if (v.size() < n) resize_grow(v, n);
  return std::span<T>(v.data(), n);
}

/// grown with every one of the n values set to x (what std::vector<T>(n, x) held).
template <class T>
std::span<T> grown_filled(std::vector<T>& v, size_t n, const std::type_identity_t<T>& x = T{}) {
  const std::span<T> s = grown(v, n);
  std::fill(s.begin(), s.end(), x);
  return s;
}

/// v as T, strictly: an integer type takes a JSON integer inside its range (no floats, no negative values for an
/// unsigned type — nlohmann's own conversion would truncate or wrap them), a floating type any number, a vector
/// each element by the same rule; anything else (a string for a number, …) is a usage_error naming `what` and `key`.
template <class T>
struct config_convert {
  static T get(const nlohmann::json& v, std::string_view what, std::string_view key) {
    auto fail = [&](std::string_view why) {
      std::string m(what);
      m += ": key '";
      m += key;
      m += "' ";
      m += why;
      throw usage_error(m);
    };
    if constexpr (std::is_same_v<T, bool>) {
      if (!v.is_boolean()) fail("is not a boolean");
      return v.get<bool>();
    } else if constexpr (std::is_integral_v<T>) {
      if (!v.is_number_integer()) fail("is not an integer");
      if (v.is_number_unsigned()) {
        const uint64_t u = v.get<uint64_t>();
        if (u > static_cast<uint64_t>(std::numeric_limits<T>::max())) fail("is out of range");
        return static_cast<T>(u);
      }
      const int64_t i = v.get<int64_t>();
      if (i < static_cast<int64_t>(std::numeric_limits<T>::min())) fail("is out of range");
      return static_cast<T>(i);
    } else if constexpr (std::is_floating_point_v<T>) {
      if (!v.is_number()) fail("is not a number");
      return v.get<T>();
    } else if constexpr (std::is_same_v<T, std::string>) {
      if (!v.is_string()) fail("is not a string");
      return v.get<std::string>();
    } else {
      if (!v.is_array()) fail("is not an array");
      T out;
      out.reserve(v.size());
      for (const auto& e : v) out.push_back(config_convert<typename T::value_type>::get(e, what, key));
      return out;
    }
  }
};

/// j[key] as T (config_convert's rules), or `fallback` when j is not an object or the key is absent or null.
template <class T>
T config_get_or(const nlohmann::json& j, const char* key, T fallback, std::string_view what) {
  if (!j.is_object()) return fallback;
  auto it = j.find(key);
  if (it == j.end() || it->is_null()) return fallback;
  return config_convert<T>::get(*it, what, key);
}

/// j[key] as T; an absent key is a usage_error naming `what` and the key.
template <class T>
T config_need(const nlohmann::json& j, const char* key, std::string_view what) {
  if (!j.is_object() || j.find(key) == j.end() || j.find(key)->is_null()) {
    std::string m(what);
    m += ": missing key '";
    m += key;
    m += "'";
    throw usage_error(m);
  }
  return config_get_or<T>(j, key, T{}, what);
}

/// Checks that `segs` (each with .st, .first, .count) tile the chunk `ids` in order, every state made for this
/// model (layers, head_dim) and used once, every token id < vocab. Throws usage_error (prefixed by `tag`)
/// before anything changes.
template <class Segment>
void check_segments(std::span<const uint32_t> ids, std::span<const Segment> segs, uint64_t layers, uint64_t head_dim,
                    uint64_t vocab, std::string_view tag) {
  const std::string t(tag);
  uint64_t covered = 0;
  for (size_t k = 0; k < segs.size(); ++k) {
    const Segment& sg = segs[k];
    if (!sg.st || sg.first != covered || sg.count == 0)
      throw usage_error(t + ": segments must cover the chunk in order, each with tokens and a state");
    if (sg.st->layers().size() != layers || sg.st->head_dim() != head_dim)
      throw usage_error(t + ": the state was made for another model");
    for (size_t j = 0; j < k; ++j)
      if (segs[j].st == sg.st) throw usage_error(t + ": a state appears in two segments of one chunk");
    for (uint64_t i = sg.first; i < sg.first + sg.count && i < ids.size(); ++i)
      if (ids[i] >= vocab) {
        std::string m = "token id ";
        m += std::to_string(ids[i]);
        m += " is outside the vocabulary (";
        m += std::to_string(vocab);
        m += ")";
        throw usage_error(m);
      }
    covered += sg.count;
  }
  if (covered != ids.size()) throw usage_error(t + ": segments do not cover the chunk");
}

}  // namespace cmfx::driver
