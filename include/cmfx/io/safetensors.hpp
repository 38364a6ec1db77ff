#pragma once
/// @file safetensors.hpp
/// @brief Zero-copy reader for safetensors files and sharded checkpoints, hardened against hostile input.
///
/// File layout (huggingface/safetensors): an unsigned 64-bit little-endian header length N, N bytes of UTF-8 JSON,
/// then the data buffer. The header is an object mapping tensor names to
/// `{"dtype": "F32", "shape": [2, 3], "data_offsets": [begin, end]}` (offsets relative to the data buffer), plus an
/// optional `"__metadata__"` object of string values.
///
/// Every rule below is checked before any tensor is handed out; a violation throws `cmfx::input_error` whose offset
/// is the byte that was rejected:
///   - header problems (JSON syntax, UTF-8, schema, sizes): 8 + the position inside the JSON header;
///   - data-layout problems (gaps, overlaps, data past the end, trailing bytes): the absolute file offset of the
///     tensor data concerned (8 + N + begin), or of the first unexpected byte;
///   - a short file or an oversized header length: offset 0 (the length field).
/// The data layout rule is the one of huggingface/safetensors `Metadata::validate`: sorted by (begin, end), the
/// first tensor starts at 0, each starts where the previous ended, and the last ends exactly at the end of the file.
///
/// The JSON is parsed by nlohmann-json in SAX mode through an iterator that records the last byte the lexer read,
/// which gives every event its position and lets duplicate keys (which a DOM parse silently merges) be rejected.
#include "cmfx/io/safetensors_parse.hpp"

namespace cmfx {


/// One safetensors file: its tensors in data-offset order, looked up by name, and its `__metadata__`.
/// Move-only; the tensors' data pointers stay valid across moves.
class safetensors_file {
 public:
  safetensors_file() = default;
  /// Maps `path` read-only and parses it; the map lives as long as this object.
  explicit safetensors_file(const std::string& path) {
    mapped_file map(path);
    *this = parse(map.bytes(), path);
    map_ = std::move(map);  // moving a map keeps its address, so the parsed pointers stay valid
  }
  static safetensors_file open(const std::string& path) { return safetensors_file(path); }

  /// Parses bytes the caller keeps alive (no ownership). `display_name` names the input in errors and st_tensor::file.
  static safetensors_file parse(std::span<const uint8_t> bytes, const std::string& display_name) {
    using detail::st::show_name;
    safetensors_file f;
    f.name_ = display_name;
    const uint64_t size = bytes.size();
    if (size < 8)
      throw input_error(display_name, 0, "file is " + std::to_string(size) + " bytes, shorter than the 8-byte header length");
    const uint64_t n = detail::st::read_le64(bytes.data());
    if (n > st_max_header_bytes)
      throw input_error(display_name, 0, "header length " + std::to_string(n) + " exceeds the limit of " +
                                             std::to_string(st_max_header_bytes));
    if (n > size - 8)
      throw input_error(display_name, 0, "header length " + std::to_string(n) + " runs past the end of the " +
                                             std::to_string(size) + "-byte file");
    const char* text = reinterpret_cast<const char*>(bytes.data()) + 8;
    // As huggingface/safetensors: the header must open with '{' (no BOM, no leading whitespace).
    if (n == 0 || text[0] != '{') throw input_error(display_name, 8, "header does not start with '{'");

    detail::st::header_parser hp(display_name, 8, text, n);
    hp.run();
    f.metadata_ = std::move(hp.metadata);
    f.header_bytes_ = n;

    // Data layout: sorted by (begin, end), contiguous from 0 to the end of the file.
    const uint64_t data_start = 8 + n;
    const uint64_t buffer = size - data_start;
    auto abs = [&](uint64_t rel) { return detail::st::sat_add(data_start, rel); };
    std::vector<detail::st::header_entry>& es = hp.entries;
    std::stable_sort(es.begin(), es.end(), [](const auto& a, const auto& b) {
      return a.begin != b.begin ? a.begin < b.begin : a.end < b.end;
    });
    uint64_t expected = 0;
    const detail::st::header_entry* prev = nullptr;
    for (const auto& e : es) {
      if (e.begin < expected)
        throw input_error(display_name, abs(e.begin),
                          "tensor " + show_name(e.name) + " overlaps tensor " + show_name(prev->name) + " (data_offsets " +
                              std::to_string(e.begin) + ".." + std::to_string(e.end) + ", previous ends at " +
                              std::to_string(expected) + ")");
      if (e.begin > expected)
        throw input_error(display_name, abs(e.begin),
                          "tensor " + show_name(e.name) + " leaves a gap of " + std::to_string(e.begin - expected) +
                              " bytes before its data (data must be contiguous from offset 0)");
      if (e.end > buffer)
        throw input_error(display_name, abs(e.begin),
                          "tensor " + show_name(e.name) + " data ends at " + std::to_string(e.end) +
                              ", beyond the data buffer of " + std::to_string(buffer) + " bytes");
      expected = e.end;
      prev = &e;
    }
    if (expected != buffer)
      throw input_error(display_name, abs(expected),
                        "data buffer has " + std::to_string(buffer - expected) + " bytes after the last tensor");

    f.tensors_.reserve(es.size());
    for (auto& e : es) {
      st_tensor t;
      t.name = std::move(e.name);
      t.dtype = e.dtype;
      t.shape = std::move(e.shape);
      t.data = bytes.data() + data_start + e.begin;
      t.nbytes = e.nbytes;
      t.file_offset = data_start + e.begin;
      t.file = display_name;
      f.tensors_.push_back(std::move(t));
    }
    f.by_name_.resize(f.tensors_.size());
    for (size_t i = 0; i < f.by_name_.size(); ++i) f.by_name_[i] = i;
    std::sort(f.by_name_.begin(), f.by_name_.end(),
              [&](size_t a, size_t b) { return f.tensors_[a].name < f.tensors_[b].name; });
    return f;
  }

  /// The tensors would point into a temporary: keep the bytes in a variable.
  static safetensors_file parse(std::vector<uint8_t>&&, const std::string&) = delete;

  safetensors_file(safetensors_file&&) noexcept = default;
  safetensors_file& operator=(safetensors_file&&) noexcept = default;
  safetensors_file(const safetensors_file&) = delete;
  safetensors_file& operator=(const safetensors_file&) = delete;

  /// Tensors in data-offset order.
  const std::vector<st_tensor>& tensors() const noexcept { return tensors_; }
  /// The tensor called `name`, or nullptr.
  const st_tensor* find(std::string_view name) const noexcept {
    auto it = std::lower_bound(by_name_.begin(), by_name_.end(), name,
                               [&](size_t i, std::string_view n) { return std::string_view(tensors_[i].name) < n; });
    if (it == by_name_.end() || tensors_[*it].name != name) return nullptr;
    return &tensors_[*it];
  }
  /// The `__metadata__` map (empty if the header has none).
  const std::map<std::string, std::string>& metadata() const noexcept { return metadata_; }
  /// The path (open) or display name (parse).
  const std::string& path() const noexcept { return name_; }
  /// N, the JSON header length; tensor data starts at 8 + N.
  uint64_t header_bytes() const noexcept { return header_bytes_; }
  /// Sum of the tensors' byte sizes.
  uint64_t data_bytes() const noexcept {
    uint64_t s = 0;
    for (const auto& t : tensors_) s += t.nbytes;
    return s;
  }

 private:
  mapped_file map_;  // empty for parse()
  std::string name_;
  uint64_t header_bytes_ = 0;
  std::vector<st_tensor> tensors_;
  std::vector<size_t> by_name_;  // indices into tensors_, sorted by name
  std::map<std::string, std::string> metadata_;
};

/// A checkpoint as a whole: a single `.safetensors` file, a directory with `model.safetensors.index.json`
/// (or the index file itself), or a directory holding exactly one `*.safetensors` file.
/// With an index, every referenced shard is opened once, every weight_map name must exist in its shard, and no
/// tensor name may appear in two shards. Tensors in a shard that the weight_map does not list are kept.
class safetensors_model {
 public:
  static constexpr const char* index_name = "model.safetensors.index.json";

  safetensors_model() = default;
  explicit safetensors_model(const std::string& path) {
    namespace fs = std::filesystem;
    std::error_code ec;
    const fs::file_status st = fs::status(path, ec);
    if (ec || !fs::exists(st)) throw input_error(path, 0, "no such file or directory");
    if (fs::is_directory(st)) {
      const fs::path index = fs::path(path) / index_name;
      if (fs::is_regular_file(fs::status(index, ec))) {
        open_index(index.string());
      } else {
        std::vector<std::string> found;
        fs::directory_iterator it(path, ec), end;
        if (ec) throw input_error(path, 0, "cannot list directory: " + ec.message());
        for (; it != end; it.increment(ec)) {
          if (ec) throw input_error(path, 0, "cannot list directory: " + ec.message());
          std::error_code ec2;
          if (it->path().extension() == ".safetensors" && fs::is_regular_file(it->status(ec2)))
            found.push_back(it->path().string());
        }
        if (found.size() != 1)
          throw input_error(path, 0, "directory has no " + std::string(index_name) + " and " +
                                         std::to_string(found.size()) + " .safetensors files (expected exactly one)");
        shards_.push_back(safetensors_file::open(found[0]));
      }
    } else {
      const std::string fname = fs::path(path).filename().string();
      if (fname.size() > 11 && fname.compare(fname.size() - 11, 11, ".index.json") == 0)
        open_index(path);
      else
        shards_.push_back(safetensors_file::open(path));
    }
    build_lookup();
  }
  static safetensors_model open(const std::string& path) { return safetensors_model(path); }

  safetensors_model(safetensors_model&&) noexcept = default;
  safetensors_model& operator=(safetensors_model&&) noexcept = default;

  /// Every tensor: shards in order, each in data-offset order.
  const std::vector<const st_tensor*>& tensors() const noexcept { return all_; }
  const st_tensor* find(std::string_view name) const noexcept {
    auto it = std::lower_bound(by_name_.begin(), by_name_.end(), name,
                               [](const st_tensor* t, std::string_view n) { return std::string_view(t->name) < n; });
    if (it == by_name_.end() || (*it)->name != name) return nullptr;
    return *it;
  }
  /// Paths of the shard files, in the order their tensors appear in tensors().
  std::vector<std::string> shard_files() const {
    std::vector<std::string> out;
    for (const auto& s : shards_) out.push_back(s.path());
    return out;
  }
  const std::vector<safetensors_file>& shards() const noexcept { return shards_; }
  /// Sum of all tensors' byte sizes.
  uint64_t total_bytes() const noexcept {
    uint64_t s = 0;
    for (const auto* t : all_) s += t->nbytes;
    return s;
  }

 private:
  void open_index(const std::string& index_path) {
    namespace fs = std::filesystem;
    mapped_file idx(index_path);
    if (idx.size() == 0) throw input_error(index_path, 0, "index file is empty");
    detail::st::index_parser ip(index_path, 0, reinterpret_cast<const char*>(idx.data()), idx.size());
    ip.run();
    std::map<std::string, std::vector<const detail::st::index_entry*>> by_shard;  // sorted, each shard once
    for (const auto& e : ip.entries) by_shard[e.shard].push_back(&e);
    const fs::path dir = fs::path(index_path).parent_path();
    for (const auto& [shard, names] : by_shard) {
      shards_.push_back(safetensors_file::open((dir / shard).string()));
      const safetensors_file& f = shards_.back();
      for (const auto* e : names)
        if (!f.find(e->name))
          throw input_error(index_path, e->key_pos,
                            "tensor " + detail::st::show_name(e->name) + " is listed in weight_map but missing from shard " +
                                detail::st::show_name(shard));
    }
  }

  void build_lookup() {
    for (const auto& s : shards_)
      for (const auto& t : s.tensors()) all_.push_back(&t);
    by_name_ = all_;
    std::stable_sort(by_name_.begin(), by_name_.end(),
                     [](const st_tensor* a, const st_tensor* b) { return a->name < b->name; });
    for (size_t i = 1; i < by_name_.size(); ++i)
      if (by_name_[i]->name == by_name_[i - 1]->name)
        throw input_error(by_name_[i]->file, by_name_[i]->file_offset,
                          "tensor " + detail::st::show_name(by_name_[i]->name) + " also appears in shard " +
                              detail::st::show_name(by_name_[i - 1]->file));
  }

  std::vector<safetensors_file> shards_;
  std::vector<const st_tensor*> all_;
  std::vector<const st_tensor*> by_name_;
};

}  // namespace cmfx
