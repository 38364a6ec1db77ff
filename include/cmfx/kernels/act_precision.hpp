#pragma once
/// @file act_precision.hpp
/// @brief Activation precision of a matrix product, shared by the CPU and GPU kernels.
namespace cmfx {

/// f32: activations used as they are (the parity reference). i8: activations quantised to int8 in blocks of 32
/// (include/cmfx/kernels/act_q8.hpp) and integer dot products, where a kernel has that path; its error is
/// documented in docs/FORMATS.md.
enum class act_precision { f32, i8 };

}  // namespace cmfx
