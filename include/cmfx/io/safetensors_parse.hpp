#pragma once
/// @file safetensors_parse.hpp
/// @brief Internals of the safetensors reader: the position-tracking SAX parsers of the header JSON and of
///        model.safetensors.index.json (see safetensors.hpp for the rules they enforce).
#include <algorithm>
#include <array>
#include <cstdint>
#include <cstring>
#include <filesystem>
#include <iterator>
#include <map>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <system_error>
#include <unordered_set>
#include <utility>
#include <vector>
#include <nlohmann/json.hpp>
#include "cmfx/core/error.hpp"
#include "cmfx/core/mapped_file.hpp"

#include "cmfx/io/safetensors_types.hpp"

namespace cmfx {

namespace detail::st {

inline uint64_t read_le64(const uint8_t* p) noexcept {
  uint64_t v = 0;
  for (int i = 7; i >= 0; --i) v = (v << 8) | p[i];
  return v;
}

inline uint64_t sat_add(uint64_t a, uint64_t b) noexcept {
  uint64_t r;
  return __builtin_add_overflow(a, b, &r) ? UINT64_MAX : r;
}

/// A name fit for an error message: quoted, at most 64 bytes, non-printable bytes as \xNN.
inline std::string show_name(std::string_view s) {
  static const char* hex = "0123456789abcdef";
  constexpr size_t kMaxShown = 64;
  std::string out = "'";
  for (size_t i = 0; i < s.size() && i < kMaxShown; ++i) {
    const auto c = static_cast<unsigned char>(s[i]);
    if (c >= 0x20 && c < 0x7f && c != '\\' && c != '\'') {
      out += static_cast<char>(c);
    } else {
      out += "\\x";
      out += hex[c >> 4];
      out += hex[c & 15];
    }
  }
  if (s.size() > kMaxShown) out += "...";
  out += '\'';
  return out;
}

/// An input iterator over JSON text that stores, on every dereference, the address of the byte read. nlohmann's
/// iterator adapter dereferences each byte exactly once, in order, so `*last` is the last byte the lexer consumed.
class tracking_iterator {
 public:
  using iterator_category = std::input_iterator_tag;
  using value_type = char;
  using difference_type = std::ptrdiff_t;
  using pointer = const char*;
  using reference = const char&;

  tracking_iterator() = default;
  tracking_iterator(const char* p, const char** last) noexcept : p_(p), last_(last) {}
  reference operator*() const noexcept {
    *last_ = p_;
    return *p_;
  }
  tracking_iterator& operator++() noexcept {
    ++p_;
    return *this;
  }
  tracking_iterator operator++(int) noexcept {
    tracking_iterator t = *this;
    ++p_;
    return t;
  }
  friend bool operator==(const tracking_iterator& a, const tracking_iterator& b) noexcept { return a.p_ == b.p_; }

 private:
  const char* p_ = nullptr;
  const char** last_ = nullptr;
};

/// What a JSON value turned out to be, for error messages.
enum class json_kind : uint8_t { null_v, bool_v, negative, unsigned_v, float_v, string_v, object_v, array_v };

inline const char* describe(json_kind k) noexcept {
  switch (k) {
    case json_kind::null_v: return "null";
    case json_kind::bool_v: return "a boolean";
    case json_kind::negative: return "a negative number";
    case json_kind::unsigned_v: return "a number";
    case json_kind::float_v: return "a non-integer number";
    case json_kind::string_v: return "a string";
    case json_kind::object_v: return "an object";
    case json_kind::array_v: return "an array";
  }
  return "a value";
}

/// Base of the SAX handlers: positions of tokens, error reporting, and the SAX callbacks that map every event to
/// `value(kind, position, unsigned value, string)`, `key`, `end_object` and `end_array` of the derived handler
/// (CRTP). Positions are byte indices into the JSON text; errors add `base_` (8 for a safetensors header).
template <class Derived>
class positioned_sax {
 public:
  positioned_sax(std::string file, uint64_t base, const char* text, uint64_t len)
      : file_(std::move(file)), base_(base), text_(text), len_(len) {}

  /// Runs nlohmann's SAX parser over the whole text (strict: nothing but whitespace may follow the value).
  void run() {
    tracking_iterator first(text_, &last_), last(text_ + len_, &last_);
    if (!nlohmann::json::sax_parse(first, last, static_cast<Derived*>(this)))
      fail(here(), "invalid JSON");  // not reached: handlers throw instead of returning false
    // nlohmann's lexer takes a NUL byte for the end of input, so "{}\0junk" parses; JSON allows no raw NUL.
    if (const void* nul = std::memchr(text_, 0, len_))
      fail(static_cast<uint64_t>(static_cast<const char*>(nul) - text_), "invalid JSON: NUL byte");
  }

  bool null() {
    self().value(json_kind::null_v, literal_start(4), 0, nullptr);
    return true;
  }
  bool boolean(bool b) {
    self().value(json_kind::bool_v, literal_start(b ? 4 : 5), 0, nullptr);
    return true;
  }
  bool number_integer(nlohmann::json::number_integer_t v) {
    if (v < 0)
      self().value(json_kind::negative, number_start(), 0, nullptr);
    else
      self().value(json_kind::unsigned_v, number_start(), static_cast<uint64_t>(v), nullptr);
    return true;
  }
  bool number_unsigned(nlohmann::json::number_unsigned_t v) {
    self().value(json_kind::unsigned_v, number_start(), v, nullptr);
    return true;
  }
  bool number_float(nlohmann::json::number_float_t, const nlohmann::json::string_t&) {
    self().value(json_kind::float_v, number_start(), 0, nullptr);
    return true;
  }
  bool string(nlohmann::json::string_t& s) {
    self().value(json_kind::string_v, string_start(), 0, &s);
    return true;
  }
  bool binary(nlohmann::json::binary_t&) { return true; }  // JSON text never produces binary values
  bool start_object(std::size_t) {
    self().value(json_kind::object_v, here(), 0, nullptr);
    return true;
  }
  bool start_array(std::size_t) {
    self().value(json_kind::array_v, here(), 0, nullptr);
    return true;
  }
  bool key(nlohmann::json::string_t& k) {
    self().on_key(string_start(), k);
    return true;
  }
  bool end_object() {
    self().on_end_object(here());
    return true;
  }
  bool end_array() {
    self().on_end_array(here());
    return true;
  }
  /// Syntax errors and invalid UTF-8. nlohmann's position counts the bytes read, the offending one included.
  bool parse_error(std::size_t position, const std::string&, const nlohmann::detail::exception& ex) {
    uint64_t pos = position > 0 ? position - 1 : 0;
    if (pos > len_) pos = len_;
    std::string what = ex.what();
    // Drop the "[json.exception.parse_error.101] " prefix: the id says nothing to a user.
    if (!what.empty() && what[0] == '[') {
      const size_t close = what.find("] ");
      if (close != std::string::npos) what.erase(0, close + 2);
    }
    fail(pos, "invalid JSON: " + what);
    return false;  // not reached
  }

 protected:
  [[noreturn]] void fail(uint64_t pos, const std::string& why) const {
    throw input_error(file_, sat_add(base_, pos), why);
  }
  /// Index of the last byte the lexer read: the token itself for {, }, [, ] and the last byte of a literal or string.
  uint64_t here() const noexcept { return last_ ? static_cast<uint64_t>(last_ - text_) : 0; }
  uint64_t literal_start(uint64_t n) const noexcept { return here() + 1 >= n ? here() + 1 - n : 0; }
  /// The opening quote of the string whose closing quote was just read: the nearest '"' to the left that is
  /// preceded by an even number of backslashes (a valid string holds no other unescaped quote).
  uint64_t string_start() const noexcept {
    uint64_t j = here();
    while (j > 0) {
      --j;
      if (text_[j] != '"') continue;
      uint64_t bs = 0;
      while (bs < j && text_[j - 1 - bs] == '\\') ++bs;
      if (bs % 2 == 0) return j;
    }
    return 0;
  }
  /// A number ends with one byte of look-ahead read (unless it ends the text); walk back over number bytes.
  uint64_t number_start() const noexcept {
    auto num = [](char c) { return (c >= '0' && c <= '9') || c == '-' || c == '+' || c == '.' || c == 'e' || c == 'E'; };
    uint64_t j = here();
    if (!num(text_[j]) && j > 0) --j;
    while (j > 0 && num(text_[j - 1])) --j;
    return j;
  }

  std::string file_;
  uint64_t base_;
  const char* text_;
  uint64_t len_;
  const char* last_ = nullptr;

 private:
  Derived& self() noexcept { return static_cast<Derived&>(*this); }
};

/// One tensor entry as read from the header, with the header positions its errors refer to.
struct header_entry {
  std::string name;
  st_dtype dtype = st_dtype::U8;
  std::vector<uint64_t> shape;
  uint64_t elements = 1;
  uint64_t nbytes = 0;
  uint64_t begin = 0, end = 0;
  uint64_t key_pos = 0, obj_pos = 0, shape_pos = 0, offs_pos = 0;
  bool has_dtype = false, has_shape = false, has_offs = false;
  unsigned n_offs = 0;
};

/// The safetensors header schema as a state machine over SAX events.
class header_parser : public positioned_sax<header_parser> {
 public:
  using positioned_sax::positioned_sax;

  std::vector<header_entry> entries;
  std::map<std::string, std::string> metadata;

  void value(json_kind k, uint64_t pos, uint64_t u, std::string* s) {
    switch (state_) {
      case state::top:
        if (k != json_kind::object_v) fail(pos, std::string("header is ") + describe(k) + ", expected a JSON object");
        state_ = state::root_key;
        return;
      case state::tensor_value:
        if (k != json_kind::object_v)
          fail(pos, "tensor " + show_name(cur_.name) + ": entry is " + describe(k) + ", expected an object");
        cur_.obj_pos = pos;
        state_ = state::t_key;
        return;
      case state::meta_value:
        if (k != json_kind::object_v) fail(pos, std::string("__metadata__ is ") + describe(k) + ", expected an object");
        state_ = state::meta_key;
        return;
      case state::meta_string:
        if (k != json_kind::string_v)
          fail(pos, "__metadata__ value of " + show_name(meta_key_) + " is " + describe(k) + ", expected a string");
        metadata.emplace(std::move(meta_key_), std::move(*s));
        state_ = state::meta_key;
        return;
      case state::t_dtype: {
        if (k != json_kind::string_v) fail(pos, tensor_msg() + "dtype is " + describe(k) + ", expected a string");
        const auto d = st_dtype_from_name(*s);
        if (!d) fail(pos, tensor_msg() + "unknown dtype " + show_name(*s));
        cur_.dtype = *d;
        state_ = state::t_key;
        return;
      }
      case state::t_shape:
        if (k != json_kind::array_v) fail(pos, tensor_msg() + "shape is " + describe(k) + ", expected an array");
        cur_.shape_pos = pos;
        state_ = state::t_shape_elem;
        return;
      case state::t_shape_elem:
        if (k != json_kind::unsigned_v)
          fail(pos, tensor_msg() + "shape entry is " + describe(k) + ", expected a non-negative integer");
        if (cur_.shape.size() == st_max_dims)
          fail(pos, tensor_msg() + "shape has more than " + std::to_string(st_max_dims) + " dimensions");
        if (__builtin_mul_overflow(cur_.elements, u, &cur_.elements))
          fail(pos, tensor_msg() + "element count overflows 64 bits");
        cur_.shape.push_back(u);
        return;
      case state::t_offs:
        if (k != json_kind::array_v) fail(pos, tensor_msg() + "data_offsets is " + describe(k) + ", expected an array");
        cur_.offs_pos = pos;
        state_ = state::t_offs_elem;
        return;
      case state::t_offs_elem:
        if (k != json_kind::unsigned_v)
          fail(pos, tensor_msg() + "data_offsets entry is " + describe(k) + ", expected a non-negative integer");
        if (cur_.n_offs == 2) fail(pos, tensor_msg() + "data_offsets has more than two entries");
        (cur_.n_offs == 0 ? cur_.begin : cur_.end) = u;
        ++cur_.n_offs;
        return;
      default:
        fail(pos, std::string("unexpected ") + describe(k));  // not reached: keys are never values
    }
  }

  void on_key(uint64_t pos, std::string& k) {
    switch (state_) {
      case state::root_key:
        if (k == "__metadata__") {
          if (seen_metadata_) fail(pos, "duplicate key __metadata__");
          seen_metadata_ = true;
          state_ = state::meta_value;
          return;
        }
        if (k.empty()) fail(pos, "empty tensor name");
        if (!names_.insert(k).second) fail(pos, "duplicate tensor name " + show_name(k));
        cur_ = header_entry{};
        cur_.name = std::move(k);
        cur_.key_pos = pos;
        state_ = state::tensor_value;
        return;
      case state::meta_key:
        if (metadata.count(k)) fail(pos, "duplicate __metadata__ key " + show_name(k));
        meta_key_ = std::move(k);
        state_ = state::meta_string;
        return;
      case state::t_key:
        if (k == "dtype") {
          if (cur_.has_dtype) fail(pos, tensor_msg() + "duplicate key dtype");
          cur_.has_dtype = true;
          state_ = state::t_dtype;
        } else if (k == "shape") {
          if (cur_.has_shape) fail(pos, tensor_msg() + "duplicate key shape");
          cur_.has_shape = true;
          state_ = state::t_shape;
        } else if (k == "data_offsets") {
          if (cur_.has_offs) fail(pos, tensor_msg() + "duplicate key data_offsets");
          cur_.has_offs = true;
          state_ = state::t_offs;
        } else {
          fail(pos, tensor_msg() + "unexpected key " + show_name(k) + " (allowed: dtype, shape, data_offsets)");
        }
        return;
      default:
        fail(pos, "unexpected key");  // not reached
    }
  }

  void on_end_array(uint64_t pos) {
    if (state_ == state::t_shape_elem) {
      state_ = state::t_key;
    } else if (state_ == state::t_offs_elem) {
      if (cur_.n_offs != 2)
        fail(pos, tensor_msg() + "data_offsets has " + std::to_string(cur_.n_offs) + " entries, expected 2");
      state_ = state::t_key;
    } else {
      fail(pos, "unexpected end of array");  // not reached
    }
  }

  void on_end_object(uint64_t pos) {
    if (state_ == state::t_key) {
      finish_entry();
      state_ = state::root_key;
    } else if (state_ == state::meta_key) {
      state_ = state::root_key;
    } else if (state_ == state::root_key) {
      state_ = state::done;
    } else {
      fail(pos, "unexpected end of object");  // not reached
    }
  }

 private:
  enum class state : uint8_t {
    top, root_key, tensor_value, meta_value, meta_key, meta_string,
    t_key, t_dtype, t_shape, t_shape_elem, t_offs, t_offs_elem, done
  };

  std::string tensor_msg() const { return "tensor " + show_name(cur_.name) + ": "; }

  void finish_entry() {
    if (!cur_.has_dtype) fail(cur_.obj_pos, tensor_msg() + "missing key dtype");
    if (!cur_.has_shape) fail(cur_.obj_pos, tensor_msg() + "missing key shape");
    if (!cur_.has_offs) fail(cur_.obj_pos, tensor_msg() + "missing key data_offsets");
    if (__builtin_mul_overflow(cur_.elements, uint64_t{st_dtype_size(cur_.dtype)}, &cur_.nbytes))
      fail(cur_.shape_pos, tensor_msg() + "byte size overflows 64 bits");
    if (cur_.begin > cur_.end)
      fail(cur_.offs_pos, tensor_msg() + "data_offsets begin " + std::to_string(cur_.begin) + " > end " +
                              std::to_string(cur_.end));
    if (cur_.end - cur_.begin != cur_.nbytes)
      fail(cur_.offs_pos, tensor_msg() + "data_offsets span " + std::to_string(cur_.end - cur_.begin) +
                              " bytes, but " + std::string(st_dtype_name(cur_.dtype)) + " with " +
                              std::to_string(cur_.elements) + " elements needs " + std::to_string(cur_.nbytes));
    entries.push_back(std::move(cur_));
    cur_ = header_entry{};
  }

  state state_ = state::top;
  header_entry cur_;
  std::string meta_key_;
  bool seen_metadata_ = false;
  std::unordered_set<std::string> names_;
};

/// One weight_map entry of a sharded checkpoint index.
struct index_entry {
  std::string name;
  std::string shard;
  uint64_t key_pos = 0;
};

/// model.safetensors.index.json: `{"metadata": ..., "weight_map": {"tensor": "shard file", ...}}`. Keys other
/// than weight_map are skipped whatever their value.
class index_parser : public positioned_sax<index_parser> {
 public:
  using positioned_sax::positioned_sax;

  std::vector<index_entry> entries;

  void value(json_kind k, uint64_t pos, uint64_t, std::string* s) {
    const bool container = k == json_kind::object_v || k == json_kind::array_v;
    switch (state_) {
      case state::top:
        if (k != json_kind::object_v) fail(pos, std::string("index is ") + describe(k) + ", expected a JSON object");
        state_ = state::root_key;
        return;
      case state::skip_value:
        if (container) {
          skip_depth_ = 1;
          state_ = state::skipping;
        } else {
          state_ = state::root_key;
        }
        return;
      case state::skipping:
        if (container) ++skip_depth_;
        return;
      case state::wm_value:
        if (k != json_kind::object_v) fail(pos, std::string("weight_map is ") + describe(k) + ", expected an object");
        state_ = state::wm_key;
        return;
      case state::wm_string:
        if (k != json_kind::string_v)
          fail(pos, "weight_map value of " + show_name(cur_.name) + " is " + describe(k) + ", expected a file name");
        if (s->empty() || *s == "." || *s == ".." || s->find_first_of(std::string_view("/\\\0", 3)) != std::string::npos)
          fail(pos, "weight_map value of " + show_name(cur_.name) + " is not a plain file name: " + show_name(*s));
        cur_.shard = std::move(*s);
        entries.push_back(std::move(cur_));
        cur_ = index_entry{};
        state_ = state::wm_key;
        return;
      default:
        fail(pos, std::string("unexpected ") + describe(k));  // not reached
    }
  }

  void on_key(uint64_t pos, std::string& k) {
    switch (state_) {
      case state::root_key:
        if (k == "weight_map") {
          if (seen_weight_map_) fail(pos, "duplicate key weight_map");
          seen_weight_map_ = true;
          state_ = state::wm_value;
        } else {
          state_ = state::skip_value;
        }
        return;
      case state::skipping:
        return;
      case state::wm_key:
        if (k.empty()) fail(pos, "weight_map: empty tensor name");
        if (!names_.insert(k).second) fail(pos, "weight_map: duplicate tensor name " + show_name(k));
        cur_.name = std::move(k);
        cur_.key_pos = pos;
        state_ = state::wm_string;
        return;
      default:
        fail(pos, "unexpected key");  // not reached
    }
  }

  void on_end_array(uint64_t pos) { on_end(pos); }
  void on_end_object(uint64_t pos) { on_end(pos); }

 private:
  enum class state : uint8_t { top, root_key, skip_value, skipping, wm_value, wm_key, wm_string, done };

  void on_end(uint64_t pos) {
    if (state_ == state::skipping) {
      if (--skip_depth_ == 0) state_ = state::root_key;
    } else if (state_ == state::wm_key) {
      state_ = state::root_key;
    } else if (state_ == state::root_key) {
      if (!seen_weight_map_) fail(pos, "index has no weight_map");
      if (entries.empty()) fail(pos, "weight_map is empty");
      state_ = state::done;
    } else {
      fail(pos, "unexpected end of container");  // not reached
    }
  }

  state state_ = state::top;
  index_entry cur_;
  uint64_t skip_depth_ = 0;
  bool seen_weight_map_ = false;
  std::unordered_set<std::string> names_;
};

}  // namespace detail::st

}  // namespace cmfx
