#pragma once
/// @file cmf_layout.hpp
/// @brief Named constants of the CMF v2 container (cmf-format.md §1; infosave2007/cmf:docs/CMF_V2_SPEC.md,
///        crates/cortiq-core/src/format.rs). Shared by the reader, the writer and the tests.
#include <cstdint>

namespace cmfx::cmf {

inline constexpr uint8_t magic[4] = {0x43, 0x4D, 0x46, 0x01};  // "CMF\x01"
inline constexpr uint32_t version = 2;
inline constexpr uint64_t envelope_bytes = 128;
inline constexpr uint64_t data_alignment = 4096;   // data_off % 4096 == 0 when data_len > 0
inline constexpr uint64_t tensor_alignment = 64;   // every tensor offset
inline constexpr uint64_t large_tensor_min = 16384;  // writers page-align payloads at least this large
inline constexpr uint64_t dir_head_bytes = 16;     // u64 count, u64 pool_off
inline constexpr uint64_t dir_record_bytes = 56;
inline constexpr uint32_t max_ndim = 6;

/// Envelope field offsets.
namespace env {
inline constexpr uint64_t magic = 0x00, version = 0x04, flags = 0x08, features = 0x0C, header = 0x10, dir = 0x20,
                          data = 0x30, masks = 0x40, vocab = 0x50, index = 0x60, header_hash = 0x70, dir_hash = 0x78;
}

/// Directory record field offsets.
namespace rec {
inline constexpr uint64_t name_off = 0, name_len = 4, dtype = 6, ndim = 7, shape = 8, off = 32, nbytes = 40, hash = 48;
}

/// required_features bits (format.rs `mod features`).
namespace feature {
inline constexpr uint32_t tensor_dir = 1u << 0, binary_masks = 1u << 1, quant_2f = 1u << 2, delta_masks = 1u << 3,
                          hot_packs = 1u << 4, loop_masks = 1u << 5, skill_file = 1u << 6;
inline constexpr uint32_t supported = tensor_dir | binary_masks | quant_2f | loop_masks | skill_file;  // 0x67
}  // namespace feature

constexpr uint64_t align_up(uint64_t v, uint64_t a) noexcept { return (v + a - 1) / a * a; }

}  // namespace cmfx::cmf
