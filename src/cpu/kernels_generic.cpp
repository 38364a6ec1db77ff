// CPU kernels for the baseline x86-64 / any target (no -m flags).
#include "cmfx/kernels/cpu_kernels_impl.hpp"

namespace cmfx {
const cpu_kernel_table& cpu_kernels_generic() {
  static const cpu_kernel_table t = detail::make_cpu_kernel_table(cpu_arch::generic);
  return t;
}
}  // namespace cmfx
