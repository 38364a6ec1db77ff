// CPU kernels for AVX-512 F/BW/VL/VNNI (+ AVX2, FMA, F16C); selected at run time where the CPU has them.
// Compiled with the AVX2 TU's flags: the AVX-512 functions opt in with target attributes (gemm_avx512_i8.hpp).
// GCC 12 reports the self-initialised placeholders of its own _mm512_undefined_*() as uninitialized when the
// AVX-512 intrinsics are inlined into target-attribute functions; those warnings point into avx512fintrin.h.
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#define CMFX_KERNELS_AVX512 1
#include "cmfx/kernels/cpu_kernels_impl.hpp"

namespace cmfx {
const cpu_kernel_table& cpu_kernels_avx512() {
  static const cpu_kernel_table t = detail::make_cpu_kernel_table(cpu_arch::avx512);
  return t;
}
}  // namespace cmfx
