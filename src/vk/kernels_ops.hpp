#pragma once
// What the layer-primitive kernels (kernels_route.cpp, kernels_mhc.cpp, kernels_quant.cpp, kernels_moe.cpp,
// kernels_attn.cpp) need from kernels::impl (kernels.cpp): the device, the variant preamble and the shared tables — exposed through
// op_env_of so that those files stay separate from the matrix kernels. No Vulkan header.
#include <algorithm>
#include <bit>
#include <cstdint>
#include <cstdio>
#include <string>

#include "cmfx/core/error.hpp"
#include "cmfx/formats/ladder.hpp"
#include "cmfx/vk/kernels.hpp"
#include "internal.hpp"

namespace cmfx::gpu::detail {

struct op_env {
  device& dev;
  const device_info& info;
  const std::string& common;  ///< the variant #defines every shader gets (LANES, REDUCE_SUBGROUP, ...)
  uint32_t lanes, teams;      ///< subgroup lanes; teams of `lanes` per 128-invocation matrix workgroup
  const buffer& tables;       ///< exp2 of every f16, E2M1 / E4M3 code values (formats_gpu.cpp)

  static constexpr uint32_t wg = 256;  ///< workgroup size of the row kernels

  const pipeline* pipe(const char* shader, const std::string& defs, uint32_t wg_size, uint32_t bindings,
                       uint32_t push) const {
    pipeline_desc d;
    d.shader = shader;
    d.defines = common + defs;
    d.spec = {wg_size};
    d.bindings = bindings;
    d.push_bytes = push;
    d.subgroup = info.subgroup_arithmetic ? lanes : 0;
    return get_pipeline(dev.impl(), d);
  }
  /// Workgroups spread over x (≤ 65535) and y.
  void grid(uint64_t groups, uint32_t& gx, uint32_t& gy) const {
    const uint64_t mx = std::min<uint64_t>(info.max_groups_x, 65535);
    gx = uint32_t(std::min<uint64_t>(std::max<uint64_t>(groups, 1), mx));
    const uint64_t y = (std::max<uint64_t>(groups, 1) + gx - 1) / gx;
    if (y > 65535) throw usage_error("too many workgroups for one dispatch");
    gy = uint32_t(y);
  }
  /// A binding of the first `bytes` bytes of v; none → a 16-byte dummy (the tables).
  bound bind(const view& v, uint64_t bytes) const {
    if (!v) return bound{bind_range(info, tables, 0, 16).b, 0};
    return bind_range(info, v, 0, std::max<uint64_t>(bytes, 4));
  }
};

op_env op_env_of(kernels::impl& p);

/// The batch-1 row kernel's defines (shaders/matvec_rows.comp; i8: int8 activations) for a matrix of `rows` rows
/// of format f, and its rows per workgroup; false when the device has no such kernel for f (kernels.cpp).
bool rows_kernel_defines(kernels::impl& p, format f, scale_encoding enc, uint64_t rows, bool i8, std::string& defs,
                         uint32_t& rows_per_wg);

/// Shared memory of one shaders/gemm.comp workgroup: the f32 weight tile (gm rows × tk columns) and activation
/// tile (gn batch rows × tk), the ladder tables of gm rows (the largest format table), and 1.25 KiB for the LUTs.
inline uint64_t gemm_shared_bytes(uint32_t gm, uint32_t gn, uint32_t tk) {
  return uint64_t(tk) * (gm + gn) * 4 + uint64_t(gm) * ladder::rungs * 4 + 1280;
}

/// Throws usage_error unless v holds `bytes` bytes at a 4-byte aligned offset.
inline void need_view(const view& v, uint64_t bytes, const char* op, const char* arg) {
  if (!v) throw usage_error(std::string(op) + ": " + arg + " missing");
  if (v.bytes < bytes)
    throw usage_error(std::string(op) + ": " + arg + " holds " + std::to_string(v.bytes) + " bytes, needs " +
                      std::to_string(bytes));
  if (v.offset % 4) throw usage_error(std::string(op) + ": " + arg + " offset not a multiple of 4");
}

/// "#define NAME VALUE\n" with a float given by its exact bits (no decimal round trip).
inline std::string def_u(const char* name, uint64_t v) {
  return std::string("#define ") + name + " " + std::to_string(v) + "u\n";
}
inline std::string def_f(const char* name, float v) {
  const uint32_t u = std::bit_cast<uint32_t>(v);
  char b[96];
  std::snprintf(b, sizeof b, "#define %s uintBitsToFloat(0x%08Xu)\n", name, u);
  return b;
}

}  // namespace cmfx::gpu::detail
