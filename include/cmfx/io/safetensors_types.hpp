#pragma once
/// @file safetensors_types.hpp
/// @brief safetensors dtypes and the tensor view the reader hands out (see safetensors.hpp).
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

namespace cmfx {

/// Element types a safetensors header may name. Sub-byte types (F4, F6_*) and complex types are not supported.
enum class st_dtype : uint8_t { BOOL, U8, I8, I16, U16, I32, U32, I64, U64, F16, BF16, F32, F64, F8_E4M3, F8_E5M2, F8_E8M0 };

/// One row of the dtype table: the enum value, the header spelling and the bytes per element.
struct st_dtype_info {
  st_dtype dtype;
  std::string_view name;
  uint32_t size;
};

/// The single dtype table; indexed by the enum's underlying value.
inline constexpr std::array<st_dtype_info, 16> st_dtype_table{{
    {st_dtype::BOOL, "BOOL", 1},
    {st_dtype::U8, "U8", 1},
    {st_dtype::I8, "I8", 1},
    {st_dtype::I16, "I16", 2},
    {st_dtype::U16, "U16", 2},
    {st_dtype::I32, "I32", 4},
    {st_dtype::U32, "U32", 4},
    {st_dtype::I64, "I64", 8},
    {st_dtype::U64, "U64", 8},
    {st_dtype::F16, "F16", 2},
    {st_dtype::BF16, "BF16", 2},
    {st_dtype::F32, "F32", 4},
    {st_dtype::F64, "F64", 8},
    {st_dtype::F8_E4M3, "F8_E4M3", 1},
    {st_dtype::F8_E5M2, "F8_E5M2", 1},
    {st_dtype::F8_E8M0, "F8_E8M0", 1},
}};

/// The header spelling of a dtype ("F32", "BF16", ...).
constexpr std::string_view st_dtype_name(st_dtype d) noexcept { return st_dtype_table[static_cast<size_t>(d)].name; }
/// Bytes per element.
constexpr uint32_t st_dtype_size(st_dtype d) noexcept { return st_dtype_table[static_cast<size_t>(d)].size; }
/// The dtype a header string names, or nullopt (the match is exact and case-sensitive, as in safetensors).
constexpr std::optional<st_dtype> st_dtype_from_name(std::string_view s) noexcept {
  for (const auto& e : st_dtype_table)
    if (e.name == s) return e.dtype;
  return std::nullopt;
}

/// Largest accepted JSON header (huggingface/safetensors MAX_HEADER_SIZE).
inline constexpr uint64_t st_max_header_bytes = 100'000'000;
/// Largest accepted tensor rank.
inline constexpr size_t st_max_dims = 8;

/// One tensor of a safetensors file. `data` points into the file's bytes (the memory map); it is valid while the
/// owning safetensors_file / safetensors_model lives.
struct st_tensor {
  std::string name;
  st_dtype dtype = st_dtype::U8;
  std::vector<uint64_t> shape;
  const uint8_t* data = nullptr;
  uint64_t nbytes = 0;
  uint64_t file_offset = 0;  ///< absolute offset of the first data byte in the file
  std::string file;          ///< the file's path (or display name for parse())

  uint64_t elements() const noexcept {
    uint64_t n = 1;
    for (uint64_t d : shape) n *= d;  // validated not to overflow when parsed
    return n;
  }
  std::span<const uint8_t> bytes() const noexcept { return {data, static_cast<size_t>(nbytes)}; }
};

}  // namespace cmfx
