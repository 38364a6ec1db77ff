#pragma once
/// @file tokenizer.hpp
/// @brief The byte-level BPE tokenizer of the DeepSeek-V3/V4 family, loaded from a Hugging Face tokenizer.json
///        (docs/TOKENIZER.md describes what that file declares and how each part is implemented).
///
/// @code
///   auto tok = cmfx::tokenizer::from_file("tokenizer.json");      // or from_json(cmf_vocab_section, "model.cmf")
///   std::vector<int32_t> ids = tok.encode("<｜User｜>Hello");      // added tokens matched (allow_special)
///   std::string text = tok.decode(ids);                            // exact bytes back
///   cmfx::stream_decoder sd(tok);                                  // token-by-token output, whole characters only
///   for (int32_t id : ids) std::cout << sd.push(id);
///   std::cout << sd.flush();
/// @endcode
///
/// Pipeline of encode (Hugging Face tokenizers' order): added tokens are cut out of the raw text (added_tokens.hpp),
/// each remaining segment goes through the normalizer (only identity normalizers are accepted: null or an empty
/// Sequence, as this family has), the pre-tokenizer (pretokenize.hpp) and the BPE model (bpe.hpp). encode never
/// adds BOS/EOS (the post-processor only adjusts offsets in this family; the chat encoder writes BOS).
///
/// Loading rejects malformed or hostile files with cmfx::input_error(name, offset, reason): offset is the byte of a
/// JSON syntax error or of invalid UTF-8, and 0 for structural problems (wrong types, unknown component types, ids
/// that collide or exceed 2^24, merges naming tokens outside the vocabulary, uncompilable patterns).
/// A loaded tokenizer is immutable apart from an internal, mutex-protected cache: encode/decode may be called
/// from several threads at once.
#include <nlohmann/json.hpp>

#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "cmfx/core/error.hpp"
#include "cmfx/core/mapped_file.hpp"
#include "cmfx/core/utf8.hpp"
#include "cmfx/text/added_tokens.hpp"
#include "cmfx/text/bpe.hpp"
#include "cmfx/text/byte_level.hpp"
#include "cmfx/text/pretokenize.hpp"
#include "cmfx/text/regex.hpp"
#include "cmfx/text/tokenizer_json.hpp"

namespace cmfx {

class tokenizer {
 public:
  /// Loads a tokenizer.json file (at most 256 MiB).
  static tokenizer from_file(const std::string& path) {
    mapped_file f(path);
    if (f.size() > text::max_tokenizer_json_bytes) throw input_error(path, 0, "tokenizer JSON larger than 256 MiB");
    return from_json(std::string_view(reinterpret_cast<const char*>(f.data()), static_cast<size_t>(f.size())), path);
  }

  /// Loads tokenizer.json text held in memory (e.g. a CMF file's vocab section); display_name names it in errors.
  static tokenizer from_json(std::string_view json, std::string display_name = "tokenizer.json") {
    tokenizer t;
    t.d_ = text::parse_tokenizer_json(json, std::move(display_name));
    return t;
  }

  /// Token ids of text (valid UTF-8, else input_error naming the offending byte). allow_special = true matches
  /// the added tokens (special or not) in the text, as Hugging Face does; false treats the whole text as plain
  /// text, so user-supplied content can never produce a control token such as <｜User｜>.
  std::vector<int32_t> encode(std::string_view text, bool allow_special = true) const {
    std::vector<int32_t> ids;
    encode_append(text, ids, allow_special);
    return ids;
  }

  /// encode, appending to ids.
  void encode_append(std::string_view s, std::vector<int32_t>& ids, bool allow_special = true) const {
    const auto* u = reinterpret_cast<const uint8_t*>(s.data());
    if (const size_t bad = utf8_invalid_at(u, s.size()); bad != s.size())
      throw input_error("encode input", bad, "text is not valid UTF-8");
    text::pretokenize_scratch sc;
    std::optional<text::regex::match_data> md;
    std::vector<text::text_segment> segs, segs2;
    if (allow_special && !d_.raw_matcher.empty())
      d_.raw_matcher.split(s, 0, s.size(), segs, md);
    else if (!s.empty())
      segs.push_back({0, s.size(), -1});
    if (allow_special && !d_.normalized_matcher.empty()) {
      for (const auto& g : segs) {
        if (g.token >= 0)
          segs2.push_back(g);
        else
          d_.normalized_matcher.split(s, g.begin, g.end, segs2, md);
      }
      segs.swap(segs2);
    }
    ids.reserve(ids.size() + s.size() / 3);
    for (const auto& g : segs) {
      if (g.token >= 0) {
        ids.push_back(d_.added[static_cast<size_t>(g.token)].id);
        continue;
      }
      for (const auto piece : d_.pre.run(s.substr(g.begin, g.end - g.begin), sc)) d_.bpe.encode_piece(piece, ids);
    }
  }

  /// The bytes the ids stand for, concatenated (may end inside a UTF-8 character, or hold ill-formed sequences
  /// for arbitrary id sequences; text::utf8_lossy makes it valid). Ids that name no token are skipped (as Hugging
  /// Face does); skip_special drops the added tokens marked special.
  std::string decode(std::span<const int32_t> ids, bool skip_special = false) const {
    std::string out;
    for (const int32_t id : ids) append_token_bytes(id, out, skip_special);
    return out;
  }
  /// decode, then U+FFFD for every ill-formed sequence: what Hugging Face's and transformers.js's decode return.
  std::string decode_lossy(std::span<const int32_t> ids, bool skip_special = false) const {
    return text::utf8_lossy(decode(ids, skip_special));
  }

  /// Appends the bytes of one token; returns false when id names no token (or is skipped as special).
  bool append_token_bytes(int32_t id, std::string& out, bool skip_special = false) const {
    if (!valid_id(id)) return false;
    const auto& k = d_.kind[static_cast<size_t>(id)];
    if (skip_special && (k & text::token_kind_special)) return false;
    out.append(d_.bytes[static_cast<size_t>(id)]);
    return true;
  }

  /// Id of a token by its text as written in tokenizer.json (byte-level form for model tokens, e.g. "Ġthe";
  /// literal content for added tokens, e.g. "<｜User｜>").
  std::optional<int32_t> token_id(std::string_view token) const {
    if (const auto it = d_.id_of.find(token); it != d_.id_of.end()) return it->second;
    return std::nullopt;
  }
  /// Text of a token as written in tokenizer.json; empty for ids that name no token.
  std::string_view token_text(int32_t id) const {
    return valid_id(id) ? std::string_view(d_.text[static_cast<size_t>(id)]) : std::string_view();
  }
  /// Raw bytes a token stands for; empty for ids that name no token.
  std::string_view token_bytes(int32_t id) const {
    return valid_id(id) ? std::string_view(d_.bytes[static_cast<size_t>(id)]) : std::string_view();
  }
  /// One past the largest id (model vocabulary and added tokens).
  size_t vocab_size() const noexcept { return d_.text.size(); }
  bool is_special(int32_t id) const noexcept {
    return valid_id(id) && (d_.kind[static_cast<size_t>(id)] & text::token_kind_special);
  }
  bool is_added(int32_t id) const noexcept {
    return valid_id(id) && (d_.kind[static_cast<size_t>(id)] & text::token_kind_added);
  }
  const std::vector<text::added_token>& added_tokens() const noexcept { return d_.added; }
  const std::string& name() const noexcept { return d_.name; }
  /// Empties the BPE cache (benchmarks of the uncached path; results never depend on the cache).
  void clear_cache() const { d_.bpe.clear_cache(); }
  /// Whether the pre-tokenizer patterns were JIT-compiled (speed only; results are identical either way).
  bool jit() const noexcept {
    for (const auto& r : d_.pre.splits)
      if (r.is_regex && !r.re.jit()) return false;
    return true;
  }

 private:
  tokenizer() = default;
  bool valid_id(int32_t id) const noexcept {
    return id >= 0 && static_cast<size_t>(id) < d_.kind.size() && d_.kind[static_cast<size_t>(id)] != 0;
  }
  text::tokenizer_data d_;
};

/// Turns ids into text one token at a time, releasing only whole UTF-8 characters: bytes of a character that
/// the next token will complete are held back. Every output is valid UTF-8; the concatenation of all push()
/// results and flush() equals tokenizer::decode_lossy of the whole sequence.
class stream_decoder {
 public:
  explicit stream_decoder(const tokenizer& tok, bool skip_special = false) : tok_(&tok), skip_special_(skip_special) {}

  /// Adds one token; returns the text that became complete (possibly empty).
  std::string push(int32_t id) {
    tok_->append_token_bytes(id, pending_, skip_special_);
    return release();
  }
  std::string push(std::span<const int32_t> ids) {
    for (const int32_t id : ids) tok_->append_token_bytes(id, pending_, skip_special_);
    return release();
  }
  /// Releases what is held back (an unfinished character becomes U+FFFD) and starts over.
  std::string flush() {
    std::string out = text::utf8_lossy(pending_);
    pending_.clear();
    return out;
  }
  /// Bytes currently held back (0..3).
  size_t pending_bytes() const noexcept { return pending_.size(); }

 private:
  std::string release() {
    const size_t keep = text::utf8_incomplete_tail(pending_);
    std::string out = text::utf8_lossy(std::string_view(pending_).substr(0, pending_.size() - keep));
    pending_.erase(0, pending_.size() - keep);
    return out;
  }
  const tokenizer* tok_;
  bool skip_special_;
  std::string pending_;
};

}  // namespace cmfx
