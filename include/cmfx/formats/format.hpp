#pragma once
/// @file format.hpp
/// @brief What every weight format trait provides, and the zero-copy view a trait decodes from.
///
/// A weight format is a struct with only static members (see concept WeightFormat). Tensors are seen as a
/// matrix [rows, cols]: rows = shape[0], cols = elements / rows (1-D tensors have cols = 1, except for the
/// flat formats, which ignore the split). Formats whose scales live in a sibling tensor of the source
/// checkpoint (FP8 block-scaled, MXFP4) read them through `scale`.
#include <concepts>
#include <cstdint>
#include <string_view>
#include <vector>

namespace cmfx {

/// Every format cmfx computes with. CMF dtype ids are a separate, file-level numbering (dtype.hpp).
enum class format : uint8_t { f32, f16, bf16, q8_row, q8_2f, q4_block, q4t, q4tp, q2tp, mxfp4, fp8_b128, fp8_b32 };

/// How an external scale tensor stores its values: UE8M0 bytes (DeepSeek-V4) or f32 (DeepSeek-V3 style
/// `weight_scale_inv`).
enum class scale_encoding : uint8_t { none, e8m0, f32 };

/// A non-owning view of one quantised matrix. `data` is the payload exactly as the file holds it.
struct matrix_view {
  const uint8_t* data = nullptr;
  uint64_t data_bytes = 0;
  const uint8_t* scale = nullptr;  // external scales, or nullptr
  uint64_t scale_bytes = 0;
  scale_encoding scale_enc = scale_encoding::none;
  uint64_t rows = 0;
  uint64_t cols = 0;
};

/// The output of a reference encoder: payload bytes and, for formats with external scales, the scale tensor.
struct encoded_matrix {
  std::vector<uint8_t> data;
  std::vector<uint8_t> scale;
};

/// Requirements of a weight-format trait.
///  name              short lowercase name used in CLI output, tests and shader defines
///  id                the enum value
///  cmf_dtype         CMF dtype id, or -1 when CMF cannot store the format
///  block_elems       elements of one row that share one scale (1 for dense formats)
///  block_rows        rows that share one scale (FP8 tiles: 128 or 32; otherwise 1)
///  block_bytes       payload bytes of one block in the main plane (may be fractional per element: see bits)
///  shape_ok(R, C)    whether the format can hold an R x C matrix
///  data_bytes(R, C)  exact payload size; scale_bytes(R, C) external scale size (0 if none)
///  decode_row(v, r, out)  writes cols floats of row r
///  encode(w, R, C)   reference encoder for test files (round trip within the format's documented error)
template <class F>
concept WeightFormat = requires(const matrix_view& v, float* out, const float* w, uint64_t n) {
  { F::name } -> std::convertible_to<std::string_view>;
  { F::id } -> std::convertible_to<format>;
  { F::cmf_dtype } -> std::convertible_to<int>;
  { F::block_elems } -> std::convertible_to<uint32_t>;
  { F::block_rows } -> std::convertible_to<uint32_t>;
  { F::block_bytes } -> std::convertible_to<uint32_t>;
  { F::shape_ok(n, n) } -> std::same_as<bool>;
  { F::data_bytes(n, n) } -> std::same_as<uint64_t>;
  { F::scale_bytes(n, n) } -> std::same_as<uint64_t>;
  F::decode_row(v, n, out);
  { F::encode(w, n, n) } -> std::same_as<encoded_matrix>;
};

constexpr uint64_t ceil_div(uint64_t a, uint64_t b) noexcept { return (a + b - 1) / b; }

}  // namespace cmfx
