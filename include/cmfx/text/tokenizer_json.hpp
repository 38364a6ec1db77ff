#pragma once
/// @file tokenizer_json.hpp
/// @brief Reading a Hugging Face tokenizer.json into the tokenizer's tables, with every structural rule checked
///        (the public class is cmfx::tokenizer in tokenizer.hpp).
///
/// Accepted (what byte-level BPE files of the DeepSeek-V3/V4 family declare, and close relatives):
///   normalizer     null, or Sequence (possibly nested) of nothing — identity
///   pre_tokenizer  ByteLevel, or Sequence (possibly nested) of Split... followed by one ByteLevel
///   model          BPE: vocab, merges ("a b" strings or [a, b] pairs; rank = position; a later duplicate wins),
///                  unk_token, fuse_unk, ignore_merges; dropout, byte_fallback, continuing_subword_prefix and
///                  end_of_word_suffix only at their neutral values
///   decoder        ByteLevel
///   added_tokens   id, content, special, single_word, lstrip, rstrip, normalized
///   post_processor, truncation, padding: null or an object, not used (encode adds no special tokens)
/// Anything else is refused with input_error rather than silently mis-tokenized.
#include <nlohmann/json.hpp>

#include <cstdint>
#include <stdexcept>
#include <string>
#include <string_view>
#include <vector>

#include "cmfx/core/error.hpp"
#include "cmfx/core/utf8.hpp"
#include "cmfx/text/added_tokens.hpp"
#include "cmfx/text/bpe.hpp"
#include "cmfx/text/byte_level.hpp"
#include "cmfx/text/pretokenize.hpp"
#include "cmfx/text/regex.hpp"

namespace cmfx::text {

inline constexpr uint64_t max_tokenizer_json_bytes = uint64_t(256) << 20;
inline constexpr int64_t max_token_id = (int64_t(1) << 24) - 1;  ///< ids above are refused (hostile sizes)
inline constexpr int max_sequence_depth = 16;                   ///< nesting of Sequence components

inline constexpr uint8_t token_kind_model = 1, token_kind_added = 2, token_kind_special = 4;

/// Everything a loaded tokenizer holds.
struct tokenizer_data {
  std::string name;
  std::vector<std::string> text;   ///< id -> token text as written in the file ("" for unused ids)
  std::vector<std::string> bytes;  ///< id -> raw bytes it decodes to
  std::vector<uint8_t> kind;       ///< id -> token_kind_* bits (0: the id names no token)
  string_map<int32_t> id_of;       ///< token text -> id (model vocabulary and added tokens)
  std::vector<added_token> added;
  added_token_matcher raw_matcher;         ///< added tokens with normalized = false
  added_token_matcher normalized_matcher;  ///< added tokens with normalized = true
  pre_tokenizer pre;
  bpe_model bpe;
};

namespace detail {

using json = nlohmann::json;

class json_loader {
 public:
  explicit json_loader(std::string name) : name_(std::move(name)) {}
  [[noreturn]] void fail(const std::string& what, uint64_t offset = 0) const { throw input_error(name_, offset, what); }

  const json& member(const json& obj, const char* key, const std::string& where) const {
    const auto it = obj.find(key);
    if (it == obj.end()) fail(where + ": missing \"" + key + "\"");
    return *it;
  }
  bool opt_bool(const json& obj, const char* key, bool def, const std::string& where) const {
    const auto it = obj.find(key);
    if (it == obj.end() || it->is_null()) return def;
    if (!it->is_boolean()) fail(where + "." + key + " must be a boolean");
    return it->get<bool>();
  }
  const std::string& string_of(const json& v, const std::string& where) const {
    if (!v.is_string()) fail(where + " must be a string");
    return v.get_ref<const std::string&>();
  }
  const std::string& type_of(const json& obj, const std::string& where) const {
    if (!obj.is_object()) fail(where + " must be an object");
    return string_of(member(obj, "type", where), where + ".type");
  }
  /// A token's text for an error message: at most 48 bytes, cut at a character boundary.
  static std::string clip(std::string_view t) {
    if (t.size() <= 48) return std::string(t);
    size_t n = 48;
    while (n > 0 && (static_cast<uint8_t>(t[n]) & 0xC0) == 0x80) --n;
    return std::string(t.substr(0, n)) + "…";
  }
  /// A token id: an integer in [0, min(2^24, id_limit_)). `where` (and `token`, when given) name it in errors.
  int32_t id_of(const json& v, std::string_view where, std::string_view token = {}) const {
    const auto name = [&] {
      return std::string(where) + (token.empty() ? std::string() : "[\"" + clip(token) + "\"]");
    };
    if (!v.is_number_integer() || (!v.is_number_unsigned() && v.get<int64_t>() < 0))
      fail(name() + " must be a non-negative integer id");
    const uint64_t id = v.get<uint64_t>();
    if (id > static_cast<uint64_t>(max_token_id))
      fail(name() + " = " + std::to_string(id) + " exceeds the largest supported id " + std::to_string(max_token_id));
    if (id >= id_limit_)
      fail(name() + " = " + std::to_string(id) + ": ids too sparse (the file has " + std::to_string(token_count_) +
           " tokens)");
    return static_cast<int32_t>(id);
  }
  /// Bounds ids by the number of tokens the file declares (before any table is sized by an id), so a sparse,
  /// hostile id space cannot make the loader allocate gigabytes.
  void set_token_count(uint64_t n) {
    token_count_ = n;
    id_limit_ = 2 * n + 1024;
  }

  // Identity normalizers only: null or (nested) empty Sequences.
  void check_normalizer(const json& n, const std::string& where, int depth) const {
    if (n.is_null()) return;
    const std::string& type = type_of(n, where);
    if (type != "Sequence")
      fail(where + ": normalizer type \"" + clip(type) + "\" is not supported (only identity normalizers are)");
    if (depth >= max_sequence_depth) fail(where + ": Sequence nested too deeply");
    const json& list = member(n, "normalizers", where);
    if (!list.is_array()) fail(where + ".normalizers must be an array");
    for (size_t i = 0; i < list.size(); ++i)
      check_normalizer(list[i], where + ".normalizers[" + std::to_string(i) + "]", depth + 1);
  }

  void flatten_pre_tokenizer(const json& p, const std::string& where, int depth,
                             std::vector<std::pair<const json*, std::string>>& out) const {
    const std::string& type = type_of(p, where);
    if (type == "Sequence") {
      if (depth >= max_sequence_depth) fail(where + ": Sequence nested too deeply");
      const json& list = member(p, "pretokenizers", where);
      if (!list.is_array()) fail(where + ".pretokenizers must be an array");
      for (size_t i = 0; i < list.size(); ++i)
        flatten_pre_tokenizer(list[i], where + ".pretokenizers[" + std::to_string(i) + "]", depth + 1, out);
    } else if (type == "Split" || type == "ByteLevel") {
      out.emplace_back(&p, where);
    } else {
      fail(where + ": pre_tokenizer type \"" + clip(type) + "\" is not supported");
    }
  }

  split_rule make_split(const json& p, const std::string& where) const {
    split_rule r;
    const json& pat = member(p, "pattern", where);
    if (!pat.is_object() || pat.size() != 1) fail(where + ".pattern must be {\"Regex\": ...} or {\"String\": ...}");
    if (const auto it = pat.find("Regex"); it != pat.end()) {
      const std::string& src = string_of(*it, where + ".pattern.Regex");
      try {
        r.re = regex(onig_to_pcre2(src));
      } catch (const std::invalid_argument& e) {
        fail(where + ".pattern.Regex: " + e.what());
      }
    } else if (const auto is = pat.find("String"); is != pat.end()) {
      r.is_regex = false;
      r.literal = string_of(*is, where + ".pattern.String");
      if (r.literal.empty()) fail(where + ".pattern.String is empty");
    } else {
      fail(where + ".pattern must be {\"Regex\": ...} or {\"String\": ...}");
    }
    const std::string& b = string_of(member(p, "behavior", where), where + ".behavior");
    if (b == "Removed") r.behavior = split_behavior::removed;
    else if (b == "Isolated") r.behavior = split_behavior::isolated;
    else if (b == "MergedWithPrevious") r.behavior = split_behavior::merged_with_previous;
    else if (b == "MergedWithNext") r.behavior = split_behavior::merged_with_next;
    else if (b == "Contiguous") r.behavior = split_behavior::contiguous;
    else fail(where + ".behavior \"" + clip(b) + "\" is unknown");
    r.invert = opt_bool(p, "invert", false, where);
    return r;
  }

  void load_pre_tokenizer(const json& root, pre_tokenizer& pre) const {
    std::vector<std::pair<const json*, std::string>> parts;
    flatten_pre_tokenizer(member(root, "pre_tokenizer", "tokenizer"), "pre_tokenizer", 0, parts);
    for (size_t i = 0; i < parts.size(); ++i) {
      const json& p = *parts[i].first;
      const std::string& where = parts[i].second;
      if (p["type"] == "Split") {
        pre.splits.push_back(make_split(p, where));
        continue;
      }
      if (i + 1 != parts.size()) fail(where + ": ByteLevel must be the last pre-tokenizer");
      pre.add_prefix_space = opt_bool(p, "add_prefix_space", true, where);
      pre.use_regex = opt_bool(p, "use_regex", true, where);
      if (pre.use_regex) pre.gpt2 = regex(onig_to_pcre2(gpt2_pattern));
      return;
    }
    fail("pre_tokenizer: a byte-level BPE needs a ByteLevel pre-tokenizer (last)");
  }

  void set_token(tokenizer_data& d, int32_t id, const std::string& text, uint8_t kind, std::string_view where) const {
    const auto i = static_cast<size_t>(id);
    if (i >= d.kind.size()) {
      d.kind.resize(i + 1, 0);
      d.text.resize(i + 1);
    }
    if (d.kind[i] != 0 && d.text[i] != text)
      fail(std::string(where) + ": id " + std::to_string(id) + " is used by both \"" + clip(d.text[i]) + "\" and \"" +
           clip(text) + "\"");
    const auto [it, fresh] = d.id_of.emplace(text, id);
    if (!fresh && it->second != id)
      fail(std::string(where) + ": token \"" + clip(text) + "\" has ids " + std::to_string(it->second) + " and " +
           std::to_string(id));
    d.text[i] = text;
    d.kind[i] = static_cast<uint8_t>(d.kind[i] | kind);
  }

  void load_model(const json& root, tokenizer_data& d) {
    const json& m = member(root, "model", "tokenizer");
    if (!m.is_object()) fail("model must be an object");
    if (const auto t = m.find("type"); t != m.end() && !(t->is_string() && *t == "BPE"))
      fail("model.type must be \"BPE\"");
    if (const auto it = m.find("dropout");
        it != m.end() && !it->is_null() && !(it->is_number() && it->get<double>() == 0.0))
      fail("model.dropout is not supported (must be null)");
    for (const char* k : {"continuing_subword_prefix", "end_of_word_suffix"}) {
      const auto it = m.find(k);
      if (it != m.end() && !it->is_null() && !(it->is_string() && it->get_ref<const std::string&>().empty()))
        fail(std::string("model.") + k + " is not supported (must be null)");
    }
    if (opt_bool(m, "byte_fallback", false, "model")) fail("model.byte_fallback is not supported with byte-level BPE");
    d.bpe.ignore_merges = opt_bool(m, "ignore_merges", false, "model");
    d.bpe.fuse_unk = opt_bool(m, "fuse_unk", false, "model");

    const json& vocab = member(m, "vocab", "model");
    if (!vocab.is_object()) fail("model.vocab must be an object");
    const auto added = root.find("added_tokens");
    set_token_count(vocab.size() + (added != root.end() && added->is_array() ? added->size() : 0));
    for (const auto& [token, idv] : vocab.items()) {
      if (token.empty()) fail("model.vocab has an empty token");
      set_token(d, id_of(idv, "model.vocab", token), token, token_kind_model, "model.vocab");
    }
    size_t r = 0;  // the merge being read, for error messages
    const auto where = [&] { return "model.merges[" + std::to_string(r) + "]"; };
    const auto model_id = [&](const std::string& t, bool in_merges) {
      const auto it = d.id_of.find(t);
      if (it == d.id_of.end())
        fail((in_merges ? where() : std::string("model.unk_token")) + ": token \"" + clip(t) +
             "\" is not in model.vocab");
      return it->second;
    };
    if (const auto it = m.find("unk_token"); it != m.end() && !it->is_null())
      d.bpe.unk = model_id(string_of(*it, "model.unk_token"), false);

    const json& merges = member(m, "merges", "model");
    if (!merges.is_array()) fail("model.merges must be an array");
    d.bpe.merges.reserve(merges.size());
    std::string a, b;
    for (r = 0; r < merges.size(); ++r) {
      const json& e = merges[r];
      if (e.is_string()) {
        const std::string& s = e.get_ref<const std::string&>();
        const size_t sp = s.find(' ');
        if (sp == std::string::npos || sp == 0 || sp + 1 == s.size() || s.find(' ', sp + 1) != std::string::npos)
          fail(where() + " must be two tokens separated by one space");
        a.assign(s, 0, sp);
        b.assign(s, sp + 1);
      } else if (e.is_array() && e.size() == 2) {
        if (!e[0].is_string() || !e[1].is_string()) fail(where() + " must hold two strings");
        a = e[0].get_ref<const std::string&>();
        b = e[1].get_ref<const std::string&>();
      } else {
        fail(where() + " must be a string \"a b\" or a pair [a, b]");
      }
      if (r > static_cast<size_t>(INT32_MAX)) fail("model.merges has too many entries");
      const int32_t ia = model_id(a, true), ib = model_id(b, true), ic = model_id(a + b, true);
      d.bpe.merges[bpe_model::pair_key(ia, ib)] = {static_cast<int32_t>(r), ic};
    }
  }

  void load_added(const json& root, tokenizer_data& d) const {
    const auto it = root.find("added_tokens");
    if (it == root.end() || it->is_null()) return;
    if (!it->is_array()) fail("added_tokens must be an array");
    for (size_t i = 0; i < it->size(); ++i) {
      const json& e = (*it)[i];
      const std::string where = "added_tokens[" + std::to_string(i) + "]";
      if (!e.is_object()) fail(where + " must be an object");
      added_token t;
      t.id = id_of(member(e, "id", where), where + ".id");
      t.content = string_of(member(e, "content", where), where + ".content");
      if (t.content.empty()) fail(where + ".content is empty");
      t.special = opt_bool(e, "special", false, where);
      t.single_word = opt_bool(e, "single_word", false, where);
      t.lstrip = opt_bool(e, "lstrip", false, where);
      t.rstrip = opt_bool(e, "rstrip", false, where);
      t.normalized = opt_bool(e, "normalized", !t.special, where);
      const auto kind = static_cast<uint8_t>(token_kind_added | (t.special ? token_kind_special : 0));
      set_token(d, t.id, t.content, kind, where);
      d.added.push_back(std::move(t));
    }
  }

 private:
  std::string name_;
  uint64_t token_count_ = 0;
  uint64_t id_limit_ = 1024;
};

/// Raw bytes of a byte-level token text; false when some character is outside the byte-level alphabet.
inline bool byte_level_decode(std::string_view token, std::string& out) {
  const auto& bl = byte_level();
  out.clear();
  size_t i = 0;
  while (i < token.size()) {
    const char32_t cp = utf8_next(token, i);
    if (cp >= bl.to_byte.size() || bl.to_byte[cp] < 0) return false;
    out.push_back(static_cast<char>(bl.to_byte[cp]));
  }
  return true;
}

}  // namespace detail

/// Parses and validates tokenizer.json text; name is used in error messages.
inline tokenizer_data parse_tokenizer_json(std::string_view json_text, std::string name) {
  detail::json_loader L(name);
  if (json_text.size() > max_tokenizer_json_bytes) L.fail("tokenizer JSON larger than 256 MiB");
  const auto* u = reinterpret_cast<const uint8_t*>(json_text.data());
  if (const size_t bad = utf8_invalid_at(u, json_text.size()); bad != json_text.size())
    L.fail("tokenizer JSON is not valid UTF-8", bad);
  detail::json root;
  try {
    root = detail::json::parse(json_text.begin(), json_text.end());
  } catch (const detail::json::parse_error& e) {
    L.fail(std::string("tokenizer JSON: ") + e.what(), e.byte > 0 ? e.byte - 1 : 0);
  } catch (const detail::json::exception& e) {
    L.fail(std::string("tokenizer JSON: ") + e.what());
  }
  if (!root.is_object()) L.fail("tokenizer JSON is not an object");

  tokenizer_data d;
  d.name = std::move(name);
  try {
    for (const char* k : {"post_processor", "truncation", "padding"})
      if (const auto it = root.find(k); it != root.end() && !it->is_null() && !it->is_object())
        L.fail(std::string(k) + " must be null or an object");
    if (const auto it = root.find("normalizer"); it != root.end()) L.check_normalizer(*it, "normalizer", 0);
    L.load_pre_tokenizer(root, d.pre);
    const std::string& dec = L.type_of(L.member(root, "decoder", "tokenizer"), "decoder");
    if (dec != "ByteLevel") L.fail("decoder type \"" + L.clip(dec) + "\" is not supported (ByteLevel is)");
    L.load_model(root, d);
    L.load_added(root, d);
  } catch (const detail::json::exception& e) {  // a get<>() on a value of an unexpected kind
    L.fail(std::string("tokenizer JSON: ") + e.what());
  }

  // The byte symbols, decode bytes and (for ignore_merges) the raw-bytes vocabulary.
  const auto& bl = byte_level();
  for (unsigned b = 0; b < 256; ++b) {
    const auto it = d.id_of.find(std::string_view(bl.utf8[b].data(), bl.utf8_len[b]));
    d.bpe.byte_id[b] = (it != d.id_of.end() && (d.kind[static_cast<size_t>(it->second)] & token_kind_model))
                           ? it->second
                           : -1;
  }
  d.bytes.resize(d.text.size());
  std::string raw;
  for (size_t id = 0; id < d.text.size(); ++id) {
    if (d.kind[id] == 0) continue;
    const bool mapped = detail::byte_level_decode(d.text[id], raw);
    d.bytes[id] = mapped ? raw : d.text[id];  // HF's ByteLevel decoder keeps a token with foreign characters as is
    if (mapped && d.bpe.ignore_merges && (d.kind[id] & token_kind_model))
      d.bpe.raw_vocab.emplace(raw, static_cast<int32_t>(id));
  }
  d.raw_matcher = added_token_matcher(d.added, false);
  d.normalized_matcher = added_token_matcher(d.added, true);
  return d;
}

}  // namespace cmfx::text
