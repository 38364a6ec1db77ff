#pragma once
/// @file packed_kv.hpp
/// @brief The packed FP4 rows of the DeepSeek-V4.1 global KV cache (spec §4.2, §8, §5.2), an append-only bank
///        of them, bounded decode of selected rows, and the per-sequence state size.
///
/// Row formats (docs/FORMATS.md "Packed KV rows"):
///   kv_main_row   compressed main KV: 512 values E2M1, one E4M3 scale per 16 values;
///                 bytes [0, 256) nibbles (byte k: value 2k low nibble, 2k+1 high nibble), [256, 288) scales.
///                 Quantizer: s = e4m3_RNE(max(amax, 6·2^-9)/6), saturated at 448; q = e2m1_RNE(clamp(x/s, ±6)).
///   kv_index_row  index keys: 128 values E2M1, one UE8M0 scale per 32 values;
///                 bytes [0, 64) nibbles, [64, 68) scales.
///                 Quantizer: s = 2^ceil(log2(max(amax, 6·2^-126)/6)) (the V4 indexer FP4 rule), q as above.
/// decode(quantize(x)) is bit-identical to act_quant_e2m1_e4m3(x, 16) and act_quant_e2m1(x, 32) of
/// include/cmfx/ops/fake_quant.hpp (the value is e2m1(code)·scale as one f32 product, which is exact).
/// The same layout at any width that is a whole number of blocks: packed_fp4_codec (a model with other head dims,
/// e.g. the V4.1 toy's 64 / 32), with run-time-width banks (packed_fp4_bank) and scratch (packed_fp4_scratch).
///
/// Use in the graph (driver/model/dsv41_attention.cpp): a KV source layer appends one row per compressed entry to its bank; an attention layer
/// decodes only the rows the top-k picked (≤ 512) into a packed_kv_scratch, once per layer, and every head
/// attends over that scratch; the indexer streams index rows through a small tile (decode_range). The full
/// history is never unpacked.
#include <algorithm>
#include <array>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <span>
#include <stdexcept>
#include <string>
#include <type_traits>
#include <vector>

#include "cmfx/formats/exmy.hpp"
#include "cmfx/ops/fake_quant.hpp"

namespace cmfx {

/// The packed FP4 row codec at a run-time width: E2M1 codes, one ScaleFmt (e4m3 or ue8m0) scale byte per Block
/// values; nibbles first (byte k: value 2k low nibble, 2k+1 high nibble), then the scales. The release rows are
/// fixed widths of it (kv_main_row, kv_index_row); a model with other widths (the toy) uses the same codec.
template <uint32_t Block, class ScaleFmt>
struct packed_fp4_codec {
  static_assert(Block % 2 == 0, "packed_fp4_codec: blocks must tile the row in whole bytes");
  static_assert(sizeof(typename ScaleFmt::storage) == 1, "packed_fp4_codec: one byte per scale");
  using elem = e2m1;
  using scale_elem = ScaleFmt;
  static constexpr uint32_t block = Block;  ///< values per scale

  /// True when `values` rows can be stored (a positive whole number of blocks).
  static constexpr bool width_ok(uint32_t values) noexcept { return values > 0 && values % Block == 0; }
  static constexpr uint32_t nibble_bytes(uint32_t values) noexcept { return values * uint32_t(e2m1::total_bits) / 8; }
  static constexpr uint32_t scale_bytes(uint32_t values) noexcept { return values / Block; }
  static constexpr uint32_t row_bytes(uint32_t values) noexcept { return nibble_bytes(values) + scale_bytes(values); }

  /// The scale code of a block with the given amax (the format's rule, shared with fake_quant.hpp).
  static uint8_t scale_code(float amax) noexcept {
    if constexpr (std::is_same_v<ScaleFmt, e4m3>)
      return fp4_e4m3_scale_code(amax);
    else
      return fp4_e8m0_scale_code(amax);
  }
  static float scale_value(uint8_t code) noexcept {
    if constexpr (std::is_same_v<ScaleFmt, e4m3>)
      return e4m3::decode(code);
    else
      return e8m0_to_f32(code);
  }

  /// x[values] (finite) → row[row_bytes(values)]; values must satisfy width_ok.
  static void quantize(const float* x, uint32_t values, uint8_t* row) noexcept {
    uint8_t* nib = row;
    uint8_t* sc = row + nibble_bytes(values);
    for (uint32_t b = 0; b < values / Block; ++b) {
      const float* xb = x + b * Block;
      float amax = 0.0f;
      for (uint32_t i = 0; i < Block; ++i) amax = std::max(amax, std::fabs(xb[i]));
      const uint8_t code = scale_code(amax);
      sc[b] = code;
      const float s = scale_value(code);
      for (uint32_t i = 0; i < Block; i += 2) {
        const uint8_t lo = e2m1::encode(std::clamp(xb[i] / s, -6.0f, 6.0f));
        const uint8_t hi = e2m1::encode(std::clamp(xb[i + 1] / s, -6.0f, 6.0f));
        nib[(b * Block + i) / 2] = uint8_t(lo | (hi << 4));
      }
    }
  }

  /// row[row_bytes(values)] → out[values].
  static void decode(const uint8_t* row, uint32_t values, float* out) noexcept {
    const auto& v = e2m1_lut();
    const uint8_t* nib = row;
    const uint8_t* sc = row + nibble_bytes(values);
    for (uint32_t b = 0; b < values / Block; ++b) {
      const float s = scale_value(sc[b]);
      for (uint32_t i = 0; i < Block; i += 2) {
        const uint8_t byte = nib[(b * Block + i) / 2];
        out[b * Block + i] = v[byte & 15u] * s;
        out[b * Block + i + 1] = v[byte >> 4] * s;
      }
    }
  }

 private:
  static const std::array<float, 16>& e2m1_lut() noexcept {
    static const std::array<float, 16> t = [] {
      std::array<float, 16> a{};
      for (uint32_t c = 0; c < 16; ++c) a[c] = e2m1::decode(uint8_t(c));
      return a;
    }();
    return t;
  }
};

/// One packed FP4 row of a fixed width: Values E2M1 codes with one ScaleFmt scale byte per Block values.
template <uint32_t Values, uint32_t Block, class ScaleFmt>
struct packed_fp4_row {
  using codec = packed_fp4_codec<Block, ScaleFmt>;
  static_assert(codec::width_ok(Values), "packed_fp4_row: blocks must tile the row");
  using elem = e2m1;
  using scale_elem = ScaleFmt;
  static constexpr uint32_t values = Values;             ///< values per row
  static constexpr uint32_t block = Block;               ///< values per scale
  static constexpr uint32_t blocks = Values / Block;     ///< scales per row
  static constexpr uint32_t nibble_bytes = codec::nibble_bytes(Values);
  static constexpr uint32_t scale_bytes = codec::scale_bytes(Values);  ///< scales follow the nibbles
  static constexpr uint32_t row_bytes = codec::row_bytes(Values);

  static uint8_t scale_code(float amax) noexcept { return codec::scale_code(amax); }
  static float scale_value(uint8_t code) noexcept { return codec::scale_value(code); }
  /// x[Values] (finite) → row[row_bytes].
  static void quantize(const float* x, uint8_t* row) noexcept { codec::quantize(x, Values, row); }
  /// row[row_bytes] → out[Values].
  static void decode(const uint8_t* row, float* out) noexcept { codec::decode(row, Values, out); }
};

/// Compressed main KV row of V4.1 (288 B).
using kv_main_row = packed_fp4_row<512, 16, e4m3>;
/// Index-key row of V4.1 (68 B).
using kv_index_row = packed_fp4_row<128, 32, ue8m0>;
static_assert(kv_main_row::row_bytes == 288 && kv_index_row::row_bytes == 68, "spec §8 row sizes");
/// The codecs of the two V4.1 row kinds at any width (compressed KV: E4M3 per 16; index keys: UE8M0 per 32).
using kv_main_codec = kv_main_row::codec;
using kv_index_codec = kv_index_row::codec;

/// capacity_tokens value of a bank without a fixed capacity (it grows like a vector; nothing is reserved).
inline constexpr uint64_t packed_kv_unbounded = ~uint64_t(0);

/// Append-only storage of packed rows of `values` values each of one KV source (one row per `ratio` tokens),
/// capacity fixed at construction (or packed_kv_unbounded). Rows are addressed by compressed index j (row j
/// stands for positions [j·ratio, (j+1)·ratio)). A bank is a value: copying it copies the rows.
template <class Codec>
class packed_fp4_bank {
 public:
  packed_fp4_bank() = default;
  /// values: row width (a whole number of Codec::block); ratio ≥ 1; capacity_tokens = the longest context this
  /// bank serves (capacity rows = capacity_tokens / ratio; rows are reserved up front unless unbounded).
  packed_fp4_bank(uint32_t values, uint32_t ratio, uint64_t capacity_tokens)
      : values_(values), row_bytes_(Codec::row_bytes(values)), ratio_(ratio), cap_rows_(0) {
    if (ratio == 0) throw std::invalid_argument("packed_kv_bank: ratio must be >= 1");
    if (!Codec::width_ok(values))
      throw std::invalid_argument("packed_kv_bank: row width " + std::to_string(values) + " is not a positive multiple of " +
                                  std::to_string(Codec::block));
    cap_rows_ = capacity_tokens / ratio;
    if (capacity_tokens != packed_kv_unbounded) data_.reserve(size_t(cap_rows_) * row_bytes_);
  }

  uint32_t values() const noexcept { return values_; }
  uint32_t row_bytes() const noexcept { return row_bytes_; }
  uint32_t ratio() const noexcept { return ratio_; }
  uint64_t capacity_rows() const noexcept { return cap_rows_; }
  uint64_t capacity_tokens() const noexcept { return cap_rows_ * ratio_; }
  uint64_t rows() const noexcept { return rows_; }
  /// Bytes held by the rows appended so far (rows() · row_bytes()).
  uint64_t bytes() const noexcept { return rows_ * row_bytes_; }
  /// Bytes of a full bank.
  uint64_t capacity_bytes() const noexcept { return cap_rows_ * row_bytes_; }

  /// Quantizes and appends one row of values() floats.
  void append(std::span<const float> x) {
    if (x.size() != values_)
      throw std::invalid_argument("packed_kv_bank::append: row has " + std::to_string(x.size()) + " values, want " +
                                  std::to_string(values_));
    grow();
    Codec::quantize(x.data(), values_, data_.data() + size_t(rows_) * row_bytes_);
    ++rows_;
  }
  /// Appends an already packed row (row_bytes() bytes), e.g. restored from a saved state.
  void append_packed(std::span<const uint8_t> row) {
    if (row.size() != row_bytes_)
      throw std::invalid_argument("packed_kv_bank::append_packed: " + std::to_string(row.size()) + " bytes, want " +
                                  std::to_string(row_bytes_));
    grow();
    std::memcpy(data_.data() + size_t(rows_) * row_bytes_, row.data(), row_bytes_);
    ++rows_;
  }
  /// Keeps the first n rows (speculative-decoding rollback, prefix reuse). n > rows() is an error.
  void truncate(uint64_t n) {
    if (n > rows_) throw std::out_of_range("packed_kv_bank::truncate: " + std::to_string(n) + " > rows " +
                                           std::to_string(rows_));
    rows_ = n;
    data_.resize(size_t(n) * row_bytes_);
  }
  void clear() noexcept {
    rows_ = 0;
    data_.clear();
  }

  /// Packed bytes of row j (j < rows()).
  const uint8_t* row(uint64_t j) const {
    check(j, "row");
    return data_.data() + size_t(j) * row_bytes_;
  }
  /// Decodes row j into out[values()].
  void decode_row(uint64_t j, float* out) const { Codec::decode(row(j), values_, out); }

  /// Decodes rows [first, first + out.size()/values()) into out (a caller tile: streaming over the history,
  /// e.g. the indexer scoring every index key, without unpacking all of it).
  void decode_range(uint64_t first, std::span<float> out) const {
    const uint64_t n = out.size() / values_;
    if (out.size() % values_ != 0) throw std::invalid_argument("packed_kv_bank::decode_range: ragged output");
    if (first > rows_ || n > rows_ - first)
      throw std::out_of_range("packed_kv_bank::decode_range: rows [" + std::to_string(first) + ", " +
                              std::to_string(first + n) + ") past " + std::to_string(rows_));
    for (uint64_t i = 0; i < n; ++i)
      Codec::decode(data_.data() + size_t(first + i) * row_bytes_, values_, out.data() + size_t(i) * values_);
  }

 private:
  void grow() {
    if (rows_ >= cap_rows_)
      throw std::length_error("packed_kv_bank: full (" + std::to_string(cap_rows_) + " rows = " +
                              std::to_string(capacity_tokens()) + " tokens at ratio " + std::to_string(ratio_) + ")");
    data_.resize(size_t(rows_ + 1) * row_bytes_);
  }
  void check(uint64_t j, const char* what) const {
    if (j >= rows_)
      throw std::out_of_range(std::string("packed_kv_bank::") + what + ": row " + std::to_string(j) + " >= rows " +
                              std::to_string(rows_));
  }

  uint32_t values_ = 0, row_bytes_ = 0;
  uint32_t ratio_ = 1;
  uint64_t cap_rows_ = 0;
  uint64_t rows_ = 0;
  std::vector<uint8_t> data_;
};

/// A bank of one fixed row type (kv_main_row / kv_index_row).
template <class Row>
class packed_kv_bank : public packed_fp4_bank<typename Row::codec> {
 public:
  packed_kv_bank() = default;
  packed_kv_bank(uint32_t ratio, uint64_t capacity_tokens)
      : packed_fp4_bank<typename Row::codec>(Row::values, ratio, capacity_tokens) {}
};

/// A bounded f32 scratch for the selected rows of one layer, shared by all heads: decode() unpacks each selected
/// row once. Capacity is fixed (V4.1: top-k 512 rows × 512 values = 1 MiB), so memory does not grow with context.
template <class Codec>
class packed_fp4_scratch {
 public:
  packed_fp4_scratch() = default;
  packed_fp4_scratch(uint32_t values, uint32_t max_rows)
      : values_(values), max_rows_(max_rows), buf_(size_t(max_rows) * values) {}

  uint32_t values() const noexcept { return values_; }
  uint32_t max_rows() const noexcept { return max_rows_; }

  /// Row i of the result holds bank row idx[i]; an index < 0 (a masked / unfilled selection, −1 in the reference)
  /// gives a row of zeros, which the caller masks out of the softmax. Throws if idx.size() > max_rows(), the widths
  /// differ or an index is ≥ bank.rows(). Returns idx.size() × values() floats, valid until the next call.
  template <class Idx>
  std::span<const float> decode(const packed_fp4_bank<Codec>& bank, std::span<const Idx> idx) {
    static_assert(std::is_integral_v<Idx>, "packed_kv_scratch: integer indices");
    if (idx.size() > max_rows_)
      throw std::length_error("packed_kv_scratch: " + std::to_string(idx.size()) + " selected rows > capacity " +
                              std::to_string(max_rows_));
    if (bank.values() != values_)
      throw std::invalid_argument("packed_kv_scratch: bank rows hold " + std::to_string(bank.values()) +
                                  " values, scratch " + std::to_string(values_));
    for (size_t i = 0; i < idx.size(); ++i) {
      float* out = buf_.data() + i * values_;
      if constexpr (std::is_signed_v<Idx>)
        if (idx[i] < 0) {
          std::fill(out, out + values_, 0.0f);
          continue;
        }
      bank.decode_row(uint64_t(idx[i]), out);
    }
    return {buf_.data(), idx.size() * values_};
  }

 private:
  uint32_t values_ = 0, max_rows_ = 0;
  std::vector<float> buf_;
};

/// The scratch of one fixed row type.
template <class Row>
class packed_kv_scratch : public packed_fp4_scratch<typename Row::codec> {
 public:
  explicit packed_kv_scratch(uint32_t max_rows = 512) : packed_fp4_scratch<typename Row::codec>(Row::values, max_rows) {}
  std::span<const float> decode(const packed_fp4_bank<typename Row::codec>& bank, std::span<const int32_t> idx) {
    return packed_fp4_scratch<typename Row::codec>::decode(bank, idx);
  }
};

// ------------------------------------------------------------------------------------------ state size

/// Shape of the V4.1 per-sequence state (spec §5.2, defaults = V4.1-Flash).
struct v41_state_config {
  uint32_t layers = 40;                          ///< trunk layers (each has a window ring)
  uint32_t dspark_stages = 3;                    ///< DSpark stages (each has a window ring)
  uint32_t window = 128;                         ///< window ring rows
  uint32_t head_dim = 512;                       ///< main KV width (multiple of 16; release: kv_main_row::values)
  uint32_t index_head_dim = 128;                 ///< index-key width (multiple of 32; release: kv_index_row::values)
  std::vector<uint32_t> kv_source_ratios{2, 2, 2, 1};  ///< compress ratio of each KV source (layers 2, 8, 14, 20)
  uint32_t window_fp8_block = 32;                ///< window ring: FP8 E4M3 per value + one UE8M0 scale per block
  uint32_t engram_history = 3;                   ///< compressed ids kept for the n-gram look-back
};

/// Bytes of one sequence's V4.1 state at a context length, by part.
struct v41_state_size {
  uint64_t main_kv_bytes = 0;     ///< packed compressed KV (kv_main_row), all sources, ctx div ratio rows each
  uint64_t index_k_bytes = 0;     ///< packed index keys (kv_index_row), same row counts
  uint64_t window_bytes = 0;      ///< FP8 window rings (layers + DSpark stages) × window rows
  uint64_t compressor_bytes = 0;  ///< pending-group state of ratio > 1 sources: kv + score, f32 [ratio, head_dim] each
  uint64_t engram_bytes = 0;      ///< n-gram look-back ids (int32)
  /// The model card's "global KV" figure: main + index = 890 B/token at even ctx for the V4.1 sources.
  uint64_t global_kv_bytes() const noexcept { return main_kv_bytes + index_k_bytes; }
  uint64_t total() const noexcept {
    return main_kv_bytes + index_k_bytes + window_bytes + compressor_bytes + engram_bytes;
  }
};

/// Storage of the V4.1 state at `ctx` tokens. At ctx = 4096 with the defaults: global KV = 3,645,440 bytes
/// (890 B/token; spec §5.2), window 43 × 128 × 528 = 2,906,112, compressor 3 × 2 × 2 × 512 × 4 = 24,576,
/// Engram 12. Other widths (a toy) use the same row codecs (kv_main_codec / kv_index_codec); throws if a width is
/// not a whole number of the codec's blocks.
inline v41_state_size v41_state_bytes(const v41_state_config& c, uint64_t ctx) {
  if (!kv_main_codec::width_ok(c.head_dim) || !kv_index_codec::width_ok(c.index_head_dim))
    throw std::invalid_argument("v41_state_bytes: head_dim " + std::to_string(c.head_dim) + " / index_head_dim " +
                                std::to_string(c.index_head_dim) + " are not whole numbers of the packed row blocks (" +
                                std::to_string(kv_main_codec::block) + " / " + std::to_string(kv_index_codec::block) +
                                ")");
  if (c.window_fp8_block == 0 || c.head_dim % c.window_fp8_block != 0)
    throw std::invalid_argument("v41_state_bytes: window_fp8_block must divide head_dim");
  v41_state_size z;
  for (const uint32_t r : c.kv_source_ratios) {
    if (r == 0) throw std::invalid_argument("v41_state_bytes: a KV source has ratio 0");
    const uint64_t rows = ctx / r;
    z.main_kv_bytes += rows * kv_main_codec::row_bytes(c.head_dim);
    z.index_k_bytes += rows * kv_index_codec::row_bytes(c.index_head_dim);
    if (r > 1) z.compressor_bytes += 2ull * r * c.head_dim * sizeof(float);
  }
  const uint64_t window_row = uint64_t(c.head_dim) * sizeof(e4m3::storage) +
                              uint64_t(c.head_dim / c.window_fp8_block) * sizeof(ue8m0::storage);
  z.window_bytes = uint64_t(c.layers + c.dspark_stages) * c.window * window_row;
  z.engram_bytes = uint64_t(c.engram_history) * sizeof(int32_t);
  return z;
}

}  // namespace cmfx
