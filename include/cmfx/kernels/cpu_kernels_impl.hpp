#pragma once
/// @file cpu_kernels_impl.hpp
/// @brief Builds a cpu_kernel_table for the instruction set of the including translation unit: the AVX2
///        kernel where the format has an AVX2 decoder and the TU is compiled for AVX2, the portable one
///        otherwise; with AVX-512 VNNI, the int8-activation kernels and the f32 kernels of the 8-bit weights (FP8,
///        q8_row) are the 512-bit ones (the other f32 paths stay AVX2).
///        Included once per arch by src/cpu/kernels_<arch>.cpp (kernels_avx512_gfni.cpp: the int8 kernels in
///        namespace avx512_gfni, compiled for GFNI too).
#include "cmfx/kernels/cpu_kernels.hpp"
#include "cmfx/kernels/gemm_generic.hpp"
#if defined(__AVX2__) && defined(__FMA__) && defined(__F16C__)
#include "cmfx/kernels/act_q8_avx2.hpp"
#include "cmfx/kernels/gemm_avx2.hpp"
#include "cmfx/kernels/gemm_avx2_i8.hpp"
#endif
#if defined(CMFX_KERNELS_AVX512)  // src/cpu/kernels_avx512.cpp (AVX-512 through target attributes)
#include "cmfx/kernels/gemm_avx512_8bit.hpp"
#include "cmfx/kernels/gemm_avx512_i8.hpp"
#endif

namespace cmfx::detail {

inline cpu_kernel_table make_cpu_kernel_table(cpu_arch arch) {
  cpu_kernel_table t;
  t.arch = arch;
#if defined(__AVX2__) && defined(__FMA__) && defined(__F16C__)
  t.quantize_act = &kernels::avx2::quantize_act_q8;
#endif
  for_each_type(all_formats{}, [&]<class F>() {
#if defined(__AVX2__) && defined(__FMA__) && defined(__F16C__)
    if constexpr (kernels::avx2::has_i8_kernel<F>) {
#if defined(CMFX_KERNELS_AVX512)
      // blocks of 16 groups, every int32 lane inside one group: q2tp eight groups per load, q4tp / MXFP4 four,
      // q8_row two
      if constexpr (F::id == format::q8_row)
        t.gemm_i8[size_t(F::id)] = &kernels::CMFX_AVX512_I8_NS::gemm_rows_i8_q8;
      else
        t.gemm_i8[size_t(F::id)] = &kernels::CMFX_AVX512_I8_NS::gemm_rows_i8<F>;
#else
      if constexpr (F::id == format::q8_row)
        t.gemm_i8[size_t(F::id)] = &kernels::avx2::gemm_rows_i8_q8;
      else
        t.gemm_i8[size_t(F::id)] = &kernels::avx2::gemm_rows_i8<F>;
#endif
      t.i8_layout[size_t(F::id)] = kernels::avx2::i8_layout<F>;
    }
    if constexpr (kernels::avx2::has_avx2_decoder<F>)
      t.gemm[size_t(F::id)] = &kernels::avx2::gemm_rows<F>;
    else
#endif
      t.gemm[size_t(F::id)] = &kernels::gemm_rows_generic<F>;
#if defined(CMFX_KERNELS_AVX512)
    if constexpr (kernels::avx512::is_8bit_rows<F>) t.gemm[size_t(F::id)] = &kernels::avx512::gemm_rows_8bit<F>;
#endif
  });
  return t;
}

}  // namespace cmfx::detail
