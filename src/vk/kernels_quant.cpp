// Host side of the element-wise quantisation helpers: activation fake-quant (shaders/fake_quant.comp, constants
// from the exmy traits and ops/fake_quant.hpp) and the Walsh–Hadamard transform (shaders/hadamard.comp).
#include <bit>
#include <type_traits>

#include "cmfx/ops/fake_quant.hpp"
#include "kernels_ops.hpp"

namespace cmfx::gpu {

namespace {
/// Value format Fmt; Scale = void: power-of-two block scales, else scales of that format (its values).
template <class Fmt, class Scale = void>
std::string fq_defines(float amax_floor) {
  std::string d = detail::def_f("FQ_FMAX", float(Fmt::max_finite())) + detail::def_f("FQ_AMAX_FLOOR", amax_floor) +
                  "#define FQ_MAN_BITS " + std::to_string(Fmt::man_bits) + "\n#define FQ_MIN_EXP " +
                  std::to_string(Fmt::min_exp) + "\n";
  if constexpr (std::is_void_v<Scale>) {
    d += "#define FQ_E4M3_SCALE 0\n";
  } else {
    d += "#define FQ_E4M3_SCALE 1\n#define SC_MAN_BITS " + std::to_string(Scale::man_bits) + "\n#define SC_MIN_EXP " +
         std::to_string(Scale::min_exp) + "\n" + detail::def_f("SC_MAX", float(Scale::max_finite()));
  }
  return d;
}
}  // namespace

void kernels::fake_quant(commands& c, view x, uint32_t rows, uint32_t n, uint32_t block, fq_format f) {
  if (block == 0) throw usage_error("fake_quant: block must be > 0");
  if (rows == 0 || n == 0) return;
  const detail::op_env e = detail::op_env_of(*p_);
  const uint64_t bytes = uint64_t(rows) * n * 4;
  detail::need_view(x, bytes, "fake_quant", "x");
  const uint32_t nb = (n + block - 1) / block;
  const uint32_t bpw = std::min(nb, std::max<uint32_t>(1, detail::op_env::wg / block));
  const uint32_t groups = (nb + bpw - 1) / bpw;
  const detail::bound xb = e.bind(x, bytes);
  const uint32_t pc[8] = {rows, n, block, nb, bpw, groups, xb.residual / 4, 0};
  const std::string defs = f == fq_format::e4m3   ? fq_defines<e4m3>(e4m3_amax_floor)
                           : f == fq_format::e2m1 ? fq_defines<e2m1>(e2m1_amax_floor)
                                                  : fq_defines<e2m1, e4m3>(e2m1_e4m3_amax_floor);
  uint32_t gx, gy;
  e.grid(uint64_t(rows) * groups, gx, gy);
  detail::dispatch(c.impl(), e.pipe("fake_quant.comp", defs, detail::op_env::wg, 1, sizeof pc), {&xb.b, 1}, pc,
                   sizeof pc, gx, gy);
}

void kernels::hadamard(commands& c, view x, uint32_t rows, uint32_t n, float scale) {
  if (n == 0 || !std::has_single_bit(n) || n > hadamard_max)
    throw usage_error("hadamard: length must be a power of two <= " + std::to_string(hadamard_max));
  if (rows == 0) return;
  const detail::op_env e = detail::op_env_of(*p_);
  const uint64_t bytes = uint64_t(rows) * n * 4;
  detail::need_view(x, bytes, "hadamard", "x");
  const detail::bound xb = e.bind(x, bytes);
  struct {
    uint32_t rows, n, xoff;
    float scale;
  } pc{rows, n, xb.residual / 4, scale};
  uint32_t gx, gy;
  e.grid(rows, gx, gy);
  detail::dispatch(c.impl(),
                   e.pipe("hadamard.comp", detail::def_u("HAD_MAX", hadamard_max), detail::op_env::wg, 1, sizeof pc),
                   {&xb.b, 1}, &pc, sizeof pc, gx, gy);
}

}  // namespace cmfx::gpu
