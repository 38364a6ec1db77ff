#pragma once
/// @file gemm_precision.hpp
/// @brief The arithmetic of the Vulkan backend's tiled GEMMs (kernels::set_gemm_precision; the driver's --gemm).
namespace cmfx::gpu {

/// Arithmetic of the tiled GEMMs (shaders/gemm.comp: matmul with n > kernels::gemm_tile, batched matmul_rows, the
/// expert-grouped moe of n >= 2 tokens — what prefill chunks run). Batch-1 products are not affected.
enum class gemm_precision {
  f32,           ///< f32 tiles and FMAs: the CPU's f32 results up to summation order (the default)
  f16,           ///< weight and activation tiles rounded to f16 once, products summed in f32, on the tensor
                 ///< cores (VK_NV_cooperative_matrix) where the device has them (device_info::coop_matrix);
                 ///< elsewhere the f32 path runs (gemm_precision_used says which)
  f16_emulated,  ///< the f16 mode's tiles, rounding and stores in plain GLSL (devices with shaderFloat16, no
                 ///< cooperative matrices needed): the parity suite's way to run that mode on lavapipe
};

}  // namespace cmfx::gpu
