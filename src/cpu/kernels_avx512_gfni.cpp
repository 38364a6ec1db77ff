// CPU kernels for AVX-512 F/BW/VL/VNNI with GFNI: kernels_avx512.cpp's table, its int8 kernels compiled again in
// namespace avx512_gfni with GFNI enabled (q2tp splits its 2-bit crumbs with vgf2p8affineqb). Selected at run time
// where the CPU has GFNI (Ice Lake and later, Zen 4); Cascade Lake has VNNI without it.
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#define CMFX_KERNELS_AVX512 1
#define CMFX_AVX512_GFNI 1
#include "cmfx/kernels/cpu_kernels_impl.hpp"

namespace cmfx {
const cpu_kernel_table& cpu_kernels_avx512_gfni() {
  static const cpu_kernel_table t = detail::make_cpu_kernel_table(cpu_arch::avx512_gfni);
  return t;
}
}  // namespace cmfx
