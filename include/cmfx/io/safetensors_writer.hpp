#pragma once
/// @file safetensors_writer.hpp
/// @brief A small safetensors writer for tests and toy-model generators: compact JSON header padded with spaces to
///        a multiple of 8 bytes, tensors packed contiguously in the order given; and the sharded-checkpoint index.
#include <cstdint>
#include <cstdio>
#include <filesystem>
#include <map>
#include <set>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "cmfx/core/error.hpp"
#include "cmfx/io/safetensors.hpp"

namespace cmfx {

/// One tensor to write: `bytes` must hold exactly elements(shape) * st_dtype_size(dtype) bytes.
struct st_write_entry {
  std::string name;
  st_dtype dtype = st_dtype::U8;
  std::vector<uint64_t> shape;
  std::vector<uint8_t> bytes;
};

namespace detail::st {

inline void write_file(const std::string& path, const void* data, size_t n) {
  std::FILE* f = std::fopen(path.c_str(), "wb");
  if (!f) throw std::runtime_error(path + ": cannot open for writing");
  const bool ok = std::fwrite(data, 1, n, f) == n;
  if (std::fclose(f) != 0 || !ok) throw std::runtime_error(path + ": write failed");
}

}  // namespace detail::st

/// The bytes of a safetensors file holding `tensors` (in that order) and `metadata`.
/// Throws usage_error on an empty, duplicate or reserved name, a size mismatch or invalid UTF-8.
inline std::vector<uint8_t> safetensors_bytes(const std::vector<st_write_entry>& tensors,
                                              const std::map<std::string, std::string>& metadata = {}) {
  nlohmann::ordered_json header = nlohmann::ordered_json::object();
  if (!metadata.empty()) {
    nlohmann::ordered_json m = nlohmann::ordered_json::object();
    for (const auto& [k, v] : metadata) m[k] = v;
    header["__metadata__"] = std::move(m);
  }
  std::set<std::string> names;
  uint64_t offset = 0;
  for (const auto& t : tensors) {
    if (t.name.empty() || t.name == "__metadata__") throw usage_error("safetensors writer: invalid tensor name '" + t.name + "'");
    if (!names.insert(t.name).second) throw usage_error("safetensors writer: duplicate tensor name '" + t.name + "'");
    if (t.shape.size() > st_max_dims) throw usage_error("safetensors writer: too many dimensions in '" + t.name + "'");
    uint64_t n = st_dtype_size(t.dtype);
    for (uint64_t d : t.shape)
      if (__builtin_mul_overflow(n, d, &n)) throw usage_error("safetensors writer: size overflow in '" + t.name + "'");
    if (n != t.bytes.size())
      throw usage_error("safetensors writer: '" + t.name + "' has " + std::to_string(t.bytes.size()) +
                        " bytes, its dtype and shape need " + std::to_string(n));
    header[t.name] = {{"dtype", std::string(st_dtype_name(t.dtype))},
                      {"shape", t.shape},
                      {"data_offsets", {offset, offset + n}}};
    offset += n;
  }
  std::string text;
  try {
    text = header.dump();
  } catch (const nlohmann::json::exception& e) {
    throw usage_error(std::string("safetensors writer: ") + e.what());
  }
  text.append((8 - text.size() % 8) % 8, ' ');

  std::vector<uint8_t> out;
  out.reserve(8 + text.size() + offset);
  const uint64_t n = text.size();
  for (int i = 0; i < 8; ++i) out.push_back(static_cast<uint8_t>(n >> (8 * i)));
  out.insert(out.end(), text.begin(), text.end());
  for (const auto& t : tensors) out.insert(out.end(), t.bytes.begin(), t.bytes.end());
  return out;
}

/// Writes safetensors_bytes(tensors, metadata) to `path`.
inline void write_safetensors(const std::string& path, const std::vector<st_write_entry>& tensors,
                              const std::map<std::string, std::string>& metadata = {}) {
  const std::vector<uint8_t> b = safetensors_bytes(tensors, metadata);
  detail::st::write_file(path, b.data(), b.size());
}

/// Writes `dir`/model.safetensors.index.json:
/// `{"metadata": {"total_size": total_size}, "weight_map": {tensor name: shard file name}}`.
inline void write_safetensors_index(const std::string& dir, const std::map<std::string, std::string>& weight_map,
                                    uint64_t total_size) {
  nlohmann::ordered_json j = nlohmann::ordered_json::object();
  j["metadata"] = {{"total_size", total_size}};
  j["weight_map"] = nlohmann::ordered_json::object();
  for (const auto& [name, shard] : weight_map) j["weight_map"][name] = shard;
  std::string text;
  try {
    text = j.dump(2) + "\n";
  } catch (const nlohmann::json::exception& e) {
    throw usage_error(std::string("safetensors index writer: ") + e.what());
  }
  const std::string path = (std::filesystem::path(dir) / safetensors_model::index_name).string();
  detail::st::write_file(path, text.data(), text.size());
}

/// As above, with total_size the sum of the byte sizes of the listed tensors, read from the shards in `dir`
/// (which must already be written).
inline void write_safetensors_index(const std::string& dir, const std::map<std::string, std::string>& weight_map) {
  std::map<std::string, safetensors_file> shards;
  uint64_t total = 0;
  for (const auto& [name, shard] : weight_map) {
    auto it = shards.find(shard);
    if (it == shards.end())
      it = shards.emplace(shard, safetensors_file::open((std::filesystem::path(dir) / shard).string())).first;
    const st_tensor* t = it->second.find(name);
    if (!t) throw usage_error("safetensors index writer: tensor '" + name + "' is not in shard '" + shard + "'");
    total += t->nbytes;
  }
  write_safetensors_index(dir, weight_map, total);
}

}  // namespace cmfx
