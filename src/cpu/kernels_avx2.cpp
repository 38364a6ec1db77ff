// CPU kernels for AVX2 + FMA + F16C (compiled with -mavx2 -mfma -mf16c; selected at run time).
#include "cmfx/kernels/cpu_kernels_impl.hpp"

namespace cmfx {
const cpu_kernel_table& cpu_kernels_avx2() {
  static const cpu_kernel_table t = detail::make_cpu_kernel_table(cpu_arch::avx2);
  return t;
}
}  // namespace cmfx
