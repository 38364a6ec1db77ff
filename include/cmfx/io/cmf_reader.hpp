#pragma once
/// @file cmf_reader.hpp
/// @brief Zero-copy reader of CMF v2 files (cmf-format.md §1, checklist §6).
///
/// Every section is reached only through the envelope; every offset, length and count is bounds-checked in
/// 64-bit arithmetic before it is used; every failure throws cmfx::input_error naming the file and the byte
/// offset of the offending field. Tensors are views into the memory map; hashes are checked on demand
/// (cmf_verify.hpp), never at open.
#include <array>
#include <cstdio>
#include <cstring>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "cmfx/core/error.hpp"
#include "cmfx/core/mapped_file.hpp"
#include "cmfx/core/utf8.hpp"
#include "cmfx/formats/format.hpp"
#include "cmfx/io/cmf_dtype.hpp"
#include "cmfx/io/cmf_layout.hpp"

namespace cmfx {

struct cmf_section {
  uint64_t off = 0, len = 0;
  bool present() const noexcept { return len > 0; }
};

struct cmf_envelope {
  uint32_t version = 0, flags = 0, features = 0;
  cmf_section header, dir, data, masks, vocab, index;
  uint64_t header_hash = 0, dir_hash = 0;
};

/// One directory entry, with its payload resolved to a pointer into the file.
struct cmf_tensor {
  std::string_view name;
  uint8_t dtype = 0;
  uint8_t ndim = 0;
  std::array<uint32_t, cmf::max_ndim> shape{};
  uint64_t off = 0;          // from data_off
  uint64_t nbytes = 0;       // exact payload span
  uint64_t hash = 0;         // hash64 of the payload
  uint64_t elements = 0;     // product of the shape
  uint64_t file_offset = 0;  // absolute
  const uint8_t* data = nullptr;
  uint32_t index = 0;        // position in the directory

  std::string_view dtype_name() const noexcept { return cmf_dtype_name(dtype); }
  uint64_t rows() const noexcept { return ndim ? shape[0] : 1; }
  uint64_t cols() const noexcept { return rows() ? elements / rows() : 0; }
  std::optional<format> weight_format() const noexcept { return cmf_dtype_format(dtype); }
  std::span<const uint8_t> bytes() const noexcept { return {data, static_cast<size_t>(nbytes)}; }
  std::vector<uint64_t> dims() const { return {shape.begin(), shape.begin() + ndim}; }

  /// The tensor as a matrix for the format traits; throws usage_error naming the tensor when cmfx does not
  /// compute with its dtype or the shape does not fit the format.
  matrix_view view() const {
    if (!weight_format())
      throw usage_error("tensor '" + std::string(name) + "' has CMF dtype " + std::string(dtype_name()) + " (id " +
                        std::to_string(dtype) + "), which cmfx does not read (see docs/FORMATS.md)");
    if ((dtype == uint8_t(cmf_dtype::q4tp) || dtype == uint8_t(cmf_dtype::q2tp)) && (ndim != 2 || shape[1] % 32 != 0))
      throw usage_error("tensor '" + std::string(name) + "': " + std::string(dtype_name()) +
                        " needs a 2-D shape with cols % 32 == 0");
    return matrix_view{data, nbytes, nullptr, 0, scale_encoding::none, rows(), cols()};
  }
};

inline std::string shape_string(const std::vector<uint64_t>& dims) {
  std::string s = "[";
  for (size_t i = 0; i < dims.size(); ++i) s += (i ? ", " : "") + std::to_string(dims[i]);
  return s + "]";
}

/// True when `path` is a regular file that starts with the CMF magic (cheap: reads 4 bytes; no validation).
inline bool has_cmf_magic(const std::string& path) {
  std::FILE* f = std::fopen(path.c_str(), "rb");
  if (!f) return false;
  uint8_t m[4] = {};
  const bool ok = std::fread(m, 1, 4, f) == 4 && std::memcmp(m, cmf::magic, 4) == 0;
  std::fclose(f);
  struct stat st {};
  return ok && ::stat(path.c_str(), &st) == 0 && S_ISREG(st.st_mode);
}

class cmf_file {
 public:
  /// Parses a CMF image held in memory (no ownership; `bytes` must outlive the object).
  static cmf_file parse(std::span<const uint8_t> bytes, std::string display_name) {
    cmf_file f;
    f.name_ = std::move(display_name);
    f.bytes_ = bytes;
    f.load();
    return f;
  }
  /// Memory-maps and parses a file.
  static cmf_file open(const std::string& path) {
    auto map = std::make_shared<mapped_file>(path);
    cmf_file f;
    f.name_ = path;
    f.bytes_ = map->bytes();
    f.map_ = std::move(map);
    f.load();
    return f;
  }

  const std::string& name() const noexcept { return name_; }
  uint64_t file_size() const noexcept { return bytes_.size(); }
  const cmf_envelope& envelope() const noexcept { return env_; }
  const nlohmann::json& header() const noexcept { return header_; }
  std::span<const uint8_t> header_bytes() const noexcept { return section(env_.header); }
  std::span<const uint8_t> dir_bytes() const noexcept { return section(env_.dir); }
  std::span<const uint8_t> masks() const noexcept { return section(env_.masks); }
  std::span<const uint8_t> vocab() const noexcept { return section(env_.vocab); }
  std::span<const uint8_t> index_section() const noexcept { return section(env_.index); }
  const std::vector<cmf_tensor>& tensors() const noexcept { return tensors_; }
  const mapped_file* mapping() const noexcept { return map_.get(); }

  const cmf_tensor* find(std::string_view name) const noexcept {
    auto it = by_name_.find(name);
    return it == by_name_.end() ? nullptr : &tensors_[it->second];
  }
  const cmf_tensor& at(std::string_view name) const {
    if (auto* t = find(name)) return *t;
    throw usage_error(name_ + ": no tensor named '" + std::string(name) + "'");
  }

  /// The architecture name from the header (`arch.arch_name`).
  std::string arch_name() const { return header_.at("arch").at("arch_name").get<std::string>(); }

 private:
  cmf_file() = default;

  [[noreturn]] void fail(uint64_t off, const std::string& why) const { throw input_error(name_, off, why); }

  uint32_t u32(uint64_t off) const noexcept {
    uint32_t v;
    std::memcpy(&v, bytes_.data() + off, 4);
    return v;
  }
  uint64_t u64(uint64_t off) const noexcept {
    uint64_t v;
    std::memcpy(&v, bytes_.data() + off, 8);
    return v;
  }
  std::span<const uint8_t> section(const cmf_section& s) const noexcept {
    return s.present() ? bytes_.subspan(s.off, s.len) : std::span<const uint8_t>{};
  }

  void load() {
    parse_envelope();
    parse_header();
    parse_directory();
  }

  cmf_section read_section(uint64_t field, const char* what) const {
    cmf_section s{u64(field), u64(field + 8)};
    if (s.len == 0) return s;
    uint64_t end;
    if (add_overflows(s.off, s.len, &end))
      fail(field, std::string(what) + " section offset + length overflows (" + std::to_string(s.off) + " + " +
                      std::to_string(s.len) + ")");
    if (end > bytes_.size())
      fail(field, std::string(what) + " section [" + std::to_string(s.off) + ", " + std::to_string(end) +
                      ") runs past the end of the file (" + std::to_string(bytes_.size()) + " bytes)");
    return s;
  }

  void parse_envelope() {
    if (bytes_.size() < cmf::envelope_bytes)
      fail(bytes_.size(), "file is " + std::to_string(bytes_.size()) + " bytes, shorter than the 128-byte CMF envelope");
    if (std::memcmp(bytes_.data(), cmf::magic, 4) != 0) fail(cmf::env::magic, "bad magic: not a CMF file");
    env_.version = u32(cmf::env::version);
    if (env_.version != cmf::version)
      fail(cmf::env::version, "unsupported CMF version " + std::to_string(env_.version) + " (only 2 is read)");
    env_.flags = u32(cmf::env::flags);
    env_.features = u32(cmf::env::features);
    if (const uint32_t unknown = env_.features & ~cmf::feature::supported) {
      std::string bits;
      for (int b = 0; b < 32; ++b)
        if (unknown & (1u << b)) bits += (bits.empty() ? "" : ", ") + std::to_string(b);
      fail(cmf::env::features, "unsupported required feature bit(s) " + bits);
    }
    env_.header = read_section(cmf::env::header, "header");
    env_.dir = read_section(cmf::env::dir, "directory");
    env_.data = read_section(cmf::env::data, "data");
    env_.masks = read_section(cmf::env::masks, "masks");
    env_.vocab = read_section(cmf::env::vocab, "vocab");
    env_.index = read_section(cmf::env::index, "index");
    env_.header_hash = u64(cmf::env::header_hash);
    env_.dir_hash = u64(cmf::env::dir_hash);
    if (!env_.header.present()) fail(cmf::env::header, "header section is empty");
    if (!env_.dir.present()) fail(cmf::env::dir, "directory section is empty");
    if (env_.data.present() && env_.data.off % cmf::data_alignment != 0)
      fail(cmf::env::data, "data offset " + std::to_string(env_.data.off) + " is not a multiple of 4096");
  }

  void parse_header() {
    const auto h = section(env_.header);
    if (const size_t bad = utf8_invalid_at(h.data(), h.size()); bad != h.size())
      fail(env_.header.off + bad, "header JSON is not valid UTF-8");
    try {
      header_ = nlohmann::json::parse(h.begin(), h.end());
    } catch (const nlohmann::json::parse_error& e) {
      fail(env_.header.off + (e.byte > 0 ? e.byte - 1 : 0), std::string("header JSON: ") + e.what());
    } catch (const nlohmann::json::exception& e) {  // e.g. a number out of range
      fail(env_.header.off, std::string("header JSON: ") + e.what());
    }
    const uint64_t at = env_.header.off;
    if (!header_.is_object()) fail(at, "header JSON is not an object");
    auto need = [&](const nlohmann::json& obj, const char* key, const char* where, auto pred, const char* kind) {
      auto it = obj.find(key);
      if (it == obj.end()) fail(at, std::string("header JSON: missing required key ") + where + key);
      if (!pred(*it)) fail(at, std::string("header JSON: ") + where + key + " must be " + kind);
    };
    auto is_uint = [](const nlohmann::json& j) { return j.is_number_unsigned(); };
    auto is_str = [](const nlohmann::json& j) { return j.is_string(); };
    auto is_obj = [](const nlohmann::json& j) { return j.is_object(); };
    auto is_num = [](const nlohmann::json& j) { return j.is_number(); };
    auto is_str_array = [](const nlohmann::json& j) {
      if (!j.is_array()) return false;
      for (const auto& x : j)
        if (!x.is_string()) return false;
      return true;
    };
    need(header_, "version", "", is_uint, "an unsigned integer");
    need(header_, "quant_type", "", is_str, "a string");
    need(header_, "arch", "", is_obj, "an object");
    const auto& arch = header_["arch"];
    need(arch, "arch_name", "arch.", is_str, "a string");
    for (const char* k : {"hidden_size", "intermediate_size", "num_layers", "num_attention_heads", "num_kv_heads",
                          "head_dim", "vocab_size", "max_position_embeddings"})
      need(arch, k, "arch.", is_uint, "an unsigned integer");
    need(arch, "layer_types", "arch.", is_str_array, "an array of strings");
    need(arch, "rms_norm_eps", "arch.", is_num, "a number");
    if (auto it = header_.find("section_hashes"); it != header_.end() && !it->is_object())
      fail(at, "header JSON: section_hashes must be an object");
  }

  void parse_directory() {
    const uint64_t d0 = env_.dir.off, dlen = env_.dir.len;
    if (dlen < cmf::dir_head_bytes) fail(d0, "directory is " + std::to_string(dlen) + " bytes, shorter than its 16-byte head");
    const uint64_t count = u64(d0), pool_off = u64(d0 + 8);
    uint64_t recs, recs_end;
    if (mul_overflows(count, cmf::dir_record_bytes, &recs) || add_overflows(recs, cmf::dir_head_bytes, &recs_end) ||
        recs_end > dlen)
      fail(d0, "directory claims " + std::to_string(count) + " tensors, more than its " + std::to_string(dlen) +
                   " bytes can hold");
    if (pool_off < recs_end || pool_off > dlen)
      fail(d0 + 8, "directory name pool offset " + std::to_string(pool_off) + " lies outside [" +
                       std::to_string(recs_end) + ", " + std::to_string(dlen) + "]");
    const uint64_t pool = d0 + pool_off, pool_len = dlen - pool_off;
    tensors_.reserve(static_cast<size_t>(count));
    by_name_.reserve(static_cast<size_t>(count));
    for (uint64_t i = 0; i < count; ++i) {
      const uint64_t r = d0 + cmf::dir_head_bytes + i * cmf::dir_record_bytes;
      cmf_tensor t;
      t.index = static_cast<uint32_t>(i);
      const uint64_t name_off = u32(r + cmf::rec::name_off);
      uint16_t name_len;
      std::memcpy(&name_len, bytes_.data() + r + cmf::rec::name_len, 2);
      if (name_off + name_len > pool_len)
        fail(r + cmf::rec::name_off, "tensor #" + std::to_string(i) + ": name [" + std::to_string(name_off) + ", +" +
                                         std::to_string(name_len) + ") lies outside the name pool (" +
                                         std::to_string(pool_len) + " bytes)");
      const uint8_t* np = bytes_.data() + pool + name_off;
      if (const size_t bad = utf8_invalid_at(np, name_len); bad != name_len)
        fail(pool + name_off + bad, "tensor #" + std::to_string(i) + ": name is not valid UTF-8");
      if (std::memchr(np, 0, name_len)) fail(pool + name_off, "tensor #" + std::to_string(i) + ": name contains NUL");
      t.name = std::string_view(reinterpret_cast<const char*>(np), name_len);
      const std::string label = "tensor '" + std::string(t.name) + "'";
      t.dtype = bytes_[r + cmf::rec::dtype];
      t.ndim = bytes_[r + cmf::rec::ndim];
      if (!cmf_dtype_known(t.dtype)) fail(r + cmf::rec::dtype, label + ": unknown dtype id " + std::to_string(t.dtype));
      if (t.ndim > cmf::max_ndim) fail(r + cmf::rec::ndim, label + ": ndim " + std::to_string(t.ndim) + " exceeds 6");
      uint64_t elems = 1;
      for (uint32_t k = 0; k < t.ndim; ++k) {
        t.shape[k] = u32(r + cmf::rec::shape + 4 * k);
        if (mul_overflows(elems, t.shape[k], &elems)) fail(r + cmf::rec::shape, label + ": shape product overflows");
      }
      t.elements = elems;
      t.off = u64(r + cmf::rec::off);
      t.nbytes = u64(r + cmf::rec::nbytes);
      t.hash = u64(r + cmf::rec::hash);
      if (t.off % cmf::tensor_alignment != 0)
        fail(r + cmf::rec::off, label + ": offset " + std::to_string(t.off) + " is not a multiple of 64");
      uint64_t end;
      if (add_overflows(t.off, t.nbytes, &end) || end > env_.data.len)
        fail(r + cmf::rec::nbytes, label + ": payload [" + std::to_string(t.off) + ", +" + std::to_string(t.nbytes) +
                                       ") runs past the data section (" + std::to_string(env_.data.len) + " bytes)");
      if (auto want = cmf_expected_nbytes(t.dtype, t.shape.data(), t.ndim, t.elements); want && *want != t.nbytes)
        fail(r + cmf::rec::nbytes, label + ": " + std::string(t.dtype_name()) + " " + shape_string(t.dims()) +
                                       " needs " + std::to_string(*want) + " bytes, the directory says " +
                                       std::to_string(t.nbytes));
      t.file_offset = env_.data.off + t.off;
      t.data = bytes_.data() + t.file_offset;
      if (!by_name_.emplace(t.name, tensors_.size()).second)
        fail(r + cmf::rec::name_off, label + ": duplicate tensor name");
      tensors_.push_back(t);
    }
  }

  std::shared_ptr<const mapped_file> map_;
  std::string name_;
  std::span<const uint8_t> bytes_;
  cmf_envelope env_;
  nlohmann::json header_;
  std::vector<cmf_tensor> tensors_;
  std::unordered_map<std::string_view, size_t> by_name_;
};

}  // namespace cmfx
