#pragma once
// Host side of the weight formats on the GPU (formats_gpu.cpp): the GLSL preamble generated from the traits,
// the fast-path geometry and the byte ranges ("planes") of a row slice of a matrix.
#include <cstdint>
#include <string>
#include <vector>

#include "cmfx/vk/kernels.hpp"

namespace cmfx::gpu::detail {

struct format_gpu {
  uint32_t chunk = 0;       ///< elements per fast-path load (16 bytes; 8 for q2tp)
  uint32_t main_align = 0;  ///< byte alignment the fast path needs for plane 0 (1: any, funnel loads)
};
format_gpu gpu_traits(format f);

/// The `tab` buffer of the matrix shaders (binding 5): exp2f of every f16 bit pattern (the ladder table of
/// ladder.hpp), then the value of every E2M1 and E4M3 code (exmy decode). tab_defines() gives the offsets.
std::vector<float> host_tables();
std::string tab_defines();

/// The three planes a kernel binds for rows [r0, r1) of w: byte ranges of w.data (or of w.scale where
/// in_scale), plus the per-format push constants. Unused planes have bytes == 0.
struct slice {
  uint64_t off[3] = {}, bytes[3] = {};
  bool in_scale[3] = {};
  uint32_t e_off = 0, aux0 = 0, aux1 = 0;
};
slice slice_of(const gpu_matrix& w, uint64_t r0, uint64_t r1);
/// Bytes one row adds to the largest plane (bounds the rows per binding, P14).
uint64_t row_bytes(const gpu_matrix& w);
/// Bytes of planes that do not grow with rows (q8_2f column scales, FP8 scale tiles).
uint64_t fixed_bytes(const gpu_matrix& w);

}  // namespace cmfx::gpu::detail
