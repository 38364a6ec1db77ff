#pragma once
// Glue the DeepSeek-V4 and V4.1 graphs share: typed reads of config.json keys, and the check that a chunk's
// segments tile it (one state per sequence, in order, each state once, token ids inside the vocabulary).
#include <cstdint>
#include <span>
#include <string>
#include <string_view>

#include <nlohmann/json.hpp>

#include "cmfx/core/error.hpp"

namespace cmfx::driver {

/// j[key] as T, or `fallback` when the key is absent or null; a value of the wrong type is a usage_error naming
/// `what` (e.g. "V4.1 model config") and the key.
template <class T>
T config_get_or(const nlohmann::json& j, const char* key, T fallback, std::string_view what) {
  auto it = j.find(key);
  if (it == j.end() || it->is_null()) return fallback;
  try {
    return it->get<T>();
  } catch (const nlohmann::json::exception& e) {
    std::string m(what);
    m += ": key '";
    m += key;
    m += "' has the wrong type: ";
    m += e.what();
    throw usage_error(m);
  }
}

/// j[key] as T; an absent key is a usage_error naming `what` and the key.
template <class T>
T config_need(const nlohmann::json& j, const char* key, std::string_view what) {
  if (j.find(key) == j.end()) {
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
