#pragma once
/// @file cmf_writer.hpp
/// @brief CMF v2 writers, in the two physical layouts of cmf-format.md §1.4:
///   cmf_writer         in-memory: [envelope][header @128][directory][zeros][data @align4096][masks][vocab][index]
///   cmf_stream_writer  streaming: a zero gap first (data starts after it), payloads appended as they come, then
///                      the vocab; finish() patches envelope + header + directory into the gap at 128 (or appends
///                      them after the data when they outgrow the gap — also a valid file).
/// Both place a payload of >= 16 KiB on a 4096-byte boundary and smaller ones on 64 bytes, fill gaps with zeros,
/// hash every tensor, the header and the directory, and record optional sections in `section_hashes`.
#include <cstdio>
#include <cstring>
#include <fstream>
#include <nlohmann/json.hpp>
#include <set>
#include <span>
#include <string>
#include <vector>

#include "cmfx/core/error.hpp"
#include "cmfx/core/hash64.hpp"
#include "cmfx/io/cmf_dtype.hpp"
#include "cmfx/io/cmf_layout.hpp"
#include "cmfx/io/cmf_verify.hpp"

namespace cmfx {

namespace detail {

struct cmf_dir_entry {
  std::string name;
  uint8_t dtype;
  std::vector<uint32_t> shape;
  uint64_t off, nbytes, hash;
};

template <class T>
inline void put_le(std::vector<uint8_t>& b, uint64_t at, T v) {
  std::memcpy(b.data() + at, &v, sizeof(T));
}

/// Checks one tensor before it is written: name, dtype, ndim, size.
inline void check_cmf_entry(const std::set<std::string>& names, const std::string& name, uint8_t dtype,
                            const std::vector<uint32_t>& shape, uint64_t nbytes) {
  if (names.count(name)) throw usage_error("cmf writer: duplicate tensor name '" + name + "'");
  if (name.size() > 0xFFFF) throw usage_error("cmf writer: tensor name longer than 65535 bytes");
  if (!utf8_valid(reinterpret_cast<const uint8_t*>(name.data()), name.size()) || name.find('\0') != std::string::npos)
    throw usage_error("cmf writer: tensor name is not NUL-free UTF-8");
  if (!cmf_dtype_known(dtype)) throw usage_error("cmf writer: unknown dtype id " + std::to_string(dtype));
  if (shape.size() > cmf::max_ndim) throw usage_error("cmf writer: '" + name + "' has more than 6 dimensions");
  uint64_t elems = 1;
  for (uint32_t d : shape)
    if (mul_overflows(elems, d, &elems)) throw usage_error("cmf writer: '" + name + "' shape overflows");
  if (auto want = cmf_expected_nbytes(dtype, shape.data(), uint32_t(shape.size()), elems); want && *want != nbytes)
    throw usage_error("cmf writer: '" + name + "' " + std::string(cmf_dtype_name(dtype)) + " needs " +
                      std::to_string(*want) + " bytes, got " + std::to_string(nbytes));
}

inline uint64_t cmf_tensor_align(uint64_t nbytes) {
  return nbytes >= cmf::large_tensor_min ? cmf::data_alignment : cmf::tensor_alignment;
}

inline std::vector<uint8_t> encode_cmf_directory(const std::vector<cmf_dir_entry>& es) {
  const uint64_t pool_off = cmf::dir_head_bytes + cmf::dir_record_bytes * es.size();
  uint64_t pool_len = 0;
  for (const auto& e : es) pool_len += e.name.size();
  std::vector<uint8_t> d(pool_off + pool_len, 0);
  put_le<uint64_t>(d, 0, es.size());
  put_le<uint64_t>(d, 8, pool_off);
  uint64_t name_off = 0;
  for (size_t i = 0; i < es.size(); ++i) {
    const uint64_t r = cmf::dir_head_bytes + i * cmf::dir_record_bytes;
    const auto& e = es[i];
    put_le<uint32_t>(d, r + cmf::rec::name_off, uint32_t(name_off));
    put_le<uint16_t>(d, r + cmf::rec::name_len, uint16_t(e.name.size()));
    d[r + cmf::rec::dtype] = e.dtype;
    d[r + cmf::rec::ndim] = uint8_t(e.shape.size());
    for (size_t k = 0; k < e.shape.size(); ++k) put_le<uint32_t>(d, r + cmf::rec::shape + 4 * k, e.shape[k]);
    put_le<uint64_t>(d, r + cmf::rec::off, e.off);
    put_le<uint64_t>(d, r + cmf::rec::nbytes, e.nbytes);
    put_le<uint64_t>(d, r + cmf::rec::hash, e.hash);
    std::memcpy(d.data() + pool_off + name_off, e.name.data(), e.name.size());
    name_off += e.name.size();
  }
  return d;
}

/// The 128-byte envelope.
struct cmf_env_fields {
  uint32_t features = cmf::feature::tensor_dir;
  uint64_t header_off = 0, header_len = 0, dir_off = 0, dir_len = 0, data_off = 0, data_len = 0;
  uint64_t masks_off = 0, masks_len = 0, vocab_off = 0, vocab_len = 0, index_off = 0, index_len = 0;
  uint64_t header_hash = 0, dir_hash = 0;
};
inline std::vector<uint8_t> encode_cmf_envelope(const cmf_env_fields& f) {
  std::vector<uint8_t> e(cmf::envelope_bytes, 0);
  std::memcpy(e.data(), cmf::magic, 4);
  put_le<uint32_t>(e, cmf::env::version, cmf::version);
  put_le<uint32_t>(e, cmf::env::flags, 0);
  put_le<uint32_t>(e, cmf::env::features, f.features);
  const std::pair<uint64_t, std::pair<uint64_t, uint64_t>> secs[] = {
      {cmf::env::header, {f.header_off, f.header_len}}, {cmf::env::dir, {f.dir_off, f.dir_len}},
      {cmf::env::data, {f.data_off, f.data_len}},       {cmf::env::masks, {f.masks_off, f.masks_len}},
      {cmf::env::vocab, {f.vocab_off, f.vocab_len}},    {cmf::env::index, {f.index_off, f.index_len}}};
  for (const auto& [at, s] : secs) {
    put_le<uint64_t>(e, at, s.first);
    put_le<uint64_t>(e, at + 8, s.second);
  }
  put_le<uint64_t>(e, cmf::env::header_hash, f.header_hash);
  put_le<uint64_t>(e, cmf::env::dir_hash, f.dir_hash);
  return e;
}

/// Header JSON with section_hashes filled in for the optional sections present.
/// Header text as given when no optional section is present (so hand-written golden headers stay byte-exact);
/// otherwise re-serialised in key order with section_hashes appended.
inline std::string cmf_header_text(const std::string& text, std::span<const uint8_t> masks,
                                   std::span<const uint8_t> vocab, std::span<const uint8_t> index) {
  if (masks.empty() && vocab.empty() && index.empty()) return text;
  nlohmann::ordered_json header = nlohmann::ordered_json::parse(text);
  nlohmann::ordered_json sh = nlohmann::ordered_json::object();
  if (!masks.empty()) sh["masks"] = hex16(hash64(masks));
  if (!vocab.empty()) sh["vocab"] = hex16(hash64(vocab));
  if (!index.empty()) sh["index"] = hex16(hash64(index));
  if (!sh.empty()) header["section_hashes"] = sh;
  return header.dump();
}

/// Rejects a header the reader would refuse: not a JSON object, or a required key missing.
inline void check_header_text(const std::string& text) {
  nlohmann::json h;
  try {
    h = nlohmann::json::parse(text);
  } catch (const nlohmann::json::exception& e) {
    throw usage_error(std::string("cmf writer: header is not JSON: ") + e.what());
  }
  if (!h.is_object() || !h.contains("version") || !h.contains("arch") || !h.contains("quant_type") ||
      !h["arch"].is_object())
    throw usage_error("cmf writer: header needs version, arch and quant_type (cmf-format.md 1.5)");
  for (const char* k : {"arch_name", "hidden_size", "intermediate_size", "num_layers", "num_attention_heads",
                        "num_kv_heads", "head_dim", "vocab_size", "layer_types", "rms_norm_eps",
                        "max_position_embeddings"})
    if (!h["arch"].contains(k)) throw usage_error(std::string("cmf writer: header arch lacks required key ") + k);
}

inline uint32_t cmf_features_for(const std::vector<cmf_dir_entry>& es, bool masks) {
  uint32_t f = cmf::feature::tensor_dir;
  if (masks) f |= cmf::feature::binary_masks;
  for (const auto& e : es)
    if (e.dtype == uint8_t(cmf_dtype::q8_2f) || e.dtype == uint8_t(cmf_dtype::vbit)) f |= cmf::feature::quant_2f;
  return f;
}

}  // namespace detail

/// Builds a whole CMF image in memory (cortiq `write_ref` layout).
class cmf_writer {
 public:
  /// `header_json` is written verbatim (it must be a JSON object with every required key, cmf-format.md §1.5).
  explicit cmf_writer(std::string header_json) : header_(std::move(header_json)) { detail::check_header_text(header_); }
  explicit cmf_writer(const nlohmann::ordered_json& header) : cmf_writer(header.dump()) {}

  void add(const std::string& name, uint8_t dtype, std::vector<uint32_t> shape, std::span<const uint8_t> bytes) {
    detail::check_cmf_entry(names_, name, dtype, shape, bytes.size());
    names_.insert(name);
    blob_.resize(cmf::align_up(blob_.size(), detail::cmf_tensor_align(bytes.size())), 0);
    entries_.push_back({name, dtype, std::move(shape), blob_.size(), bytes.size(), hash64(bytes)});
    blob_.insert(blob_.end(), bytes.begin(), bytes.end());
  }
  void add(const std::string& name, cmf_dtype dtype, std::vector<uint32_t> shape, std::span<const uint8_t> bytes) {
    add(name, uint8_t(dtype), std::move(shape), bytes);
  }
  void set_vocab(std::span<const uint8_t> v) { vocab_.assign(v.begin(), v.end()); }
  void set_vocab(const std::string& v) { vocab_.assign(v.begin(), v.end()); }
  void set_masks(std::span<const uint8_t> v) { masks_.assign(v.begin(), v.end()); }
  void set_index(std::span<const uint8_t> v) { index_.assign(v.begin(), v.end()); }

  std::vector<uint8_t> to_bytes() const {
    const std::string head = detail::cmf_header_text(header_, masks_, vocab_, index_);
    const auto dir = detail::encode_cmf_directory(entries_);
    detail::cmf_env_fields f;
    f.features = detail::cmf_features_for(entries_, !masks_.empty());
    f.header_off = cmf::envelope_bytes;
    f.header_len = head.size();
    f.dir_off = f.header_off + f.header_len;
    f.dir_len = dir.size();
    f.data_off = cmf::align_up(f.dir_off + f.dir_len, cmf::data_alignment);
    f.data_len = blob_.size();
    uint64_t end = f.data_off + f.data_len;
    auto place = [&](const std::vector<uint8_t>& s, uint64_t& off, uint64_t& len) {
      if (s.empty()) return;
      off = end;
      len = s.size();
      end += len;
    };
    place(masks_, f.masks_off, f.masks_len);
    place(vocab_, f.vocab_off, f.vocab_len);
    place(index_, f.index_off, f.index_len);
    f.header_hash = hash64(reinterpret_cast<const uint8_t*>(head.data()), head.size());
    f.dir_hash = hash64(dir);
    std::vector<uint8_t> out(end, 0);
    const auto env = detail::encode_cmf_envelope(f);
    std::memcpy(out.data(), env.data(), env.size());
    std::memcpy(out.data() + f.header_off, head.data(), head.size());
    std::memcpy(out.data() + f.dir_off, dir.data(), dir.size());
    if (!blob_.empty()) std::memcpy(out.data() + f.data_off, blob_.data(), blob_.size());
    if (f.masks_len) std::memcpy(out.data() + f.masks_off, masks_.data(), masks_.size());
    if (f.vocab_len) std::memcpy(out.data() + f.vocab_off, vocab_.data(), vocab_.size());
    if (f.index_len) std::memcpy(out.data() + f.index_off, index_.data(), index_.size());
    return out;
  }

  void write(const std::string& path) const {
    const auto b = to_bytes();
    std::ofstream o(path, std::ios::binary | std::ios::trunc);
    o.write(reinterpret_cast<const char*>(b.data()), std::streamsize(b.size()));
    if (!o) throw usage_error("cannot write " + path);
  }

 private:
  std::string header_;
  std::set<std::string> names_;
  std::vector<detail::cmf_dir_entry> entries_;
  std::vector<uint8_t> blob_, vocab_, masks_, index_;
};

/// Streams tensors straight to disk (cortiq `CmfStreamWriter` layout). Memory use is one directory.
class cmf_stream_writer {
 public:
  /// cortiq's head reserve for n source tensors: max(1 MiB, align4096(3 * (128 + 16 + n'*(56+6+96) + 1 MiB))) with
  /// n' = 2 * max(n, 4096). Pass `head_reserve` to choose another gap (tests use small ones).
  static uint64_t default_head_reserve(uint64_t n_tensors) {
    const uint64_t n = 2 * std::max<uint64_t>(n_tensors, 4096);
    return std::max<uint64_t>(1ull << 20, cmf::align_up(3 * (128 + 16 + n * (56 + 6 + 96) + (1ull << 20)), 4096));
  }

  cmf_stream_writer(const std::string& path, std::string header_json, uint64_t head_reserve)
      : path_(path), header_(std::move(header_json)), gap_(cmf::align_up(std::max<uint64_t>(head_reserve, 4096), 4096)) {
    detail::check_header_text(header_);
    out_ = std::fopen(path.c_str(), "wb");
    if (!out_) throw usage_error("cannot create " + path);
    std::vector<uint8_t> zeros(gap_, 0);
    write_raw(zeros.data(), zeros.size());
  }
  cmf_stream_writer(const cmf_stream_writer&) = delete;
  cmf_stream_writer& operator=(const cmf_stream_writer&) = delete;
  ~cmf_stream_writer() {
    if (out_) std::fclose(out_);
  }

  void add(const std::string& name, uint8_t dtype, std::vector<uint32_t> shape, std::span<const uint8_t> bytes) {
    detail::check_cmf_entry(names_, name, dtype, shape, bytes.size());
    names_.insert(name);
    const uint64_t off = cmf::align_up(data_len_, detail::cmf_tensor_align(bytes.size()));
    pad(off - data_len_);
    write_raw(bytes.data(), bytes.size());
    entries_.push_back({name, dtype, std::move(shape), off, bytes.size(), hash64(bytes)});
    data_len_ = off + bytes.size();
  }
  void add(const std::string& name, cmf_dtype dtype, std::vector<uint32_t> shape, std::span<const uint8_t> bytes) {
    add(name, uint8_t(dtype), std::move(shape), bytes);
  }
  void set_vocab(const std::string& v) { vocab_.assign(v.begin(), v.end()); }

  /// Writes the vocab after the data, then the envelope, header and directory. Returns true when they fit in
  /// the leading gap, false when they were appended after the data instead.
  bool finish() {
    detail::cmf_env_fields f;
    f.data_off = gap_;
    f.data_len = data_len_;
    uint64_t end = gap_ + data_len_;
    if (!vocab_.empty()) {
      write_raw(vocab_.data(), vocab_.size());
      f.vocab_off = end;
      f.vocab_len = vocab_.size();
      end += vocab_.size();
    }
    const std::string head = detail::cmf_header_text(header_, {}, vocab_, {});
    const auto dir = detail::encode_cmf_directory(entries_);
    f.features = detail::cmf_features_for(entries_, false);
    f.header_len = head.size();
    f.dir_len = dir.size();
    f.header_hash = hash64(reinterpret_cast<const uint8_t*>(head.data()), head.size());
    f.dir_hash = hash64(dir);
    const bool fits = cmf::envelope_bytes + head.size() + dir.size() <= gap_;
    f.header_off = fits ? cmf::envelope_bytes : end;
    f.dir_off = f.header_off + head.size();
    if (!fits) {
      write_raw(head.data(), head.size());
      write_raw(dir.data(), dir.size());
    }
    const auto env = detail::encode_cmf_envelope(f);
    seek(0);
    write_raw(env.data(), env.size());
    if (fits) {
      write_raw(head.data(), head.size());
      write_raw(dir.data(), dir.size());
    }
    if (std::fclose(out_) != 0) {
      out_ = nullptr;
      throw usage_error("cannot finish " + path_);
    }
    out_ = nullptr;
    return fits;
  }

 private:
  void write_raw(const void* p, size_t n) {
    if (n && std::fwrite(p, 1, n, out_) != n) throw usage_error("write failed: " + path_);
  }
  void pad(uint64_t n) {
    static const uint8_t zeros[4096] = {};
    while (n) {
      const size_t k = size_t(std::min<uint64_t>(n, sizeof zeros));
      write_raw(zeros, k);
      n -= k;
    }
  }
  void seek(uint64_t off) {
    if (std::fseek(out_, long(off), SEEK_SET) != 0) throw usage_error("seek failed: " + path_);
  }

  std::string path_;
  std::string header_;
  uint64_t gap_;
  std::FILE* out_ = nullptr;
  uint64_t data_len_ = 0;
  std::set<std::string> names_;
  std::vector<detail::cmf_dir_entry> entries_;
  std::vector<uint8_t> vocab_;
};

}  // namespace cmfx
