#pragma once
/// @file cpu_kernels.hpp
/// @brief Run-time dispatch of the CPU GEMM / matvec kernels: one table of function pointers per compiled
///        instruction-set level, chosen once (best_cpu_kernels()) and indexed by weight format. Kernels never
///        test the CPU inside their loops.
///
/// The tables are defined in src/cpu/kernels_<arch>.cpp, each compiled with its own -m flags and
/// instantiating every format of all_formats (link the CMake target cmfx::cpu).
#include <array>
#include <cstdint>
#include <stdexcept>

#include "cmfx/core/thread_pool.hpp"
#include "cmfx/formats/format_list.hpp"
#include "cmfx/kernels/act_precision.hpp"
#include "cmfx/kernels/act_q8.hpp"
#include "cmfx/kernels/cpu_arch.hpp"

namespace cmfx {

inline constexpr size_t format_count = all_formats::size;

/// Y[t*ldy + r] = sum_c W[r, c] * X[t*ldx + c] for t < n and rows r in [r0, r1).
using gemm_rows_fn = void (*)(const matrix_view& w, const float* X, uint64_t n, uint64_t ldx, float* Y, uint64_t ldy,
                              uint64_t r0, uint64_t r1);

/// The integer-dot variant: activations already quantised (act_q8), rows [r0, r1).
using gemm_rows_i8_fn = void (*)(const matrix_view& w, const act_q8& x, float* Y, uint64_t ldy, uint64_t r0,
                                 uint64_t r1);

/// Quantises activations for the int8 kernels (act_q8.hpp's quantize_act_q8, or a vector version with the same bits).
using quantize_act_fn = void (*)(const float* X, uint64_t n, uint64_t cols, act_layout layout, act_q8& out);

struct cpu_kernel_table {
  cpu_arch arch = cpu_arch::generic;
  std::array<gemm_rows_fn, format_count> gemm{};        // strict f32 activations (the parity reference)
  std::array<gemm_rows_i8_fn, format_count> gemm_i8{};  // int8 activations; nullptr where not faster/available
  std::array<act_layout, format_count> i8_layout{};
  quantize_act_fn quantize_act = &quantize_act_q8;      // the gemm_i8 kernels' input (AVX2 tables: act_q8_avx2.hpp)
};

const cpu_kernel_table& cpu_kernels_generic();
const cpu_kernel_table& cpu_kernels_avx2();
const cpu_kernel_table& cpu_kernels_avx512();
const cpu_kernel_table& cpu_kernels_avx512_gfni();

inline const cpu_kernel_table& cpu_kernels_for(cpu_arch a) {
  if (!cpu_supports(a)) throw std::runtime_error("this CPU cannot run " + std::string(cpu_arch_name(a)) + " kernels");
  if (a == cpu_arch::avx512_gfni) return cpu_kernels_avx512_gfni();
  if (a == cpu_arch::avx512) return cpu_kernels_avx512();
  return a == cpu_arch::avx2 ? cpu_kernels_avx2() : cpu_kernels_generic();
}
inline const cpu_kernel_table& best_cpu_kernels() {
  static const cpu_kernel_table& t = cpu_kernels_for(best_cpu_arch());
  return t;
}

/// Rows per work item: a multiple of 8 keeps neighbouring rows (and their cache lines) on one thread.
inline constexpr uint64_t gemm_row_grain = 8;

/// Y[n, rows] = X[n, cols] · W^T over the pool, rows statically partitioned across workers (thread_pool::run_rows:
/// with a row tail, the last share of them taken dynamically).
inline void gemm(thread_pool& pool, const cpu_kernel_table& k, format f, const matrix_view& w, const float* X,
                 uint64_t n, float* Y) {
  const gemm_rows_fn fn = k.gemm[size_t(f)];
  pool.run_rows(w.rows, [&](uint64_t r0, uint64_t r1, unsigned) { fn(w, X, n, w.cols, Y, w.rows, r0, r1); }, gemm_row_grain);
}

/// Y = X · W^T with int8 activations where the table has an integer-dot kernel for f (falls back to the f32
/// path otherwise). `scratch` is reused across calls (it only grows).
inline void gemm(thread_pool& pool, const cpu_kernel_table& k, format f, const matrix_view& w, const float* X,
                 uint64_t n, float* Y, act_precision p, act_q8& scratch) {
  const gemm_rows_i8_fn fn = k.gemm_i8[size_t(f)];
  if (p == act_precision::f32 || !fn || w.cols % act_block != 0) return gemm(pool, k, f, w, X, n, Y);
  k.quantize_act(X, n, w.cols, k.i8_layout[size_t(f)], scratch);
  pool.run_rows(w.rows, [&](uint64_t r0, uint64_t r1, unsigned) { fn(w, scratch, Y, w.rows, r0, r1); }, gemm_row_grain);
}

/// y[rows] = W · x.
inline void matvec(thread_pool& pool, const cpu_kernel_table& k, format f, const matrix_view& w, const float* x,
                   float* y) {
  gemm(pool, k, f, w, x, 1, y);
}

}  // namespace cmfx
