#pragma once
/// @file engram_wkv.hpp
/// @brief The Engram wkv projection (E [cols·head_dim] → key [hc·d] | value [d]) over the CPU GEMM dispatch, as an
///        engram_wkv_fn for engram_apply. Separate from engram.hpp so that only callers that use the CPU kernels
///        link cmfx::cpu.
#include <stdexcept>
#include <string>

#include "cmfx/kernels/cpu_kernels.hpp"
#include "cmfx/model/engram.hpp"

namespace cmfx {

/// kv[n, rows] = E[n, cols] · Wᵀ with the strict f32 GEMM of `kernels` for format `f` (V4.1: fp8_b32). `w` must be
/// [(hc+1)·d, cols·head_dim]. pool, kernels and the memory behind w must outlive the returned function.
/// (The official Linear fake-quantizes its input to FP8 per 32 under QAT; apply act_quant_e4m3 inside a wrapper
/// when that is wanted — E is passed exactly as gathered.)
inline engram_wkv_fn engram_wkv_gemm(thread_pool& pool, const cpu_kernel_table& kernels, format f,
                                     const matrix_view& w, const engram_config& c) {
  if (w.rows != c.kv_dim() || w.cols != c.embed_dim())
    throw std::invalid_argument("engram wkv: shape [" + std::to_string(w.rows) + ", " + std::to_string(w.cols) +
                                "], want [" + std::to_string(c.kv_dim()) + ", " + std::to_string(c.embed_dim()) + "]");
  return [&pool, &kernels, f, w](const float* E, uint64_t n, float* kv) { gemm(pool, kernels, f, w, E, n, kv); };
}

}  // namespace cmfx
