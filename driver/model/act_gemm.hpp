#pragma once
// The weight matmuls of the CPU model graphs under the run-time activation precision (dsv4_options::matmul_act,
// dsv41_options::matmul_act): f32 = the strict path (the parity reference, bit-identical to the graphs before the
// option existed); i8 = activations quantised to int8 per 32 values for every matrix whose format has an
// integer-dot kernel (q4tp / q2tp / MXFP4 / q8_row; include/cmfx/kernels/cpu_kernels.hpp), f32 for every other format.
// The router gate never comes through here (it stays f32: routing is a selection).
#include <algorithm>
#include <cstdint>
#include <vector>

#include "cmfx/core/thread_pool.hpp"
#include "cmfx/kernels/cpu_kernels.hpp"

namespace cmfx::driver {

/// Scratch of one model, allocated with it and reused (vectors only grow): the quantised input of a whole-matrix
/// GEMM, and per worker the quantised (and, for n > 1, gathered) input of one output group of wo_a.
struct act_scratch {
  act_q8 whole;
  std::vector<act_q8> group;               // [pool.size()]
  std::vector<std::vector<float>> gather;  // [pool.size()]
  explicit act_scratch(unsigned workers) : group(workers), gather(workers) {}
};

/// Grouped output projection (dsv4-architecture.md §3.3): z[t, g·ol + j] = wo_a[g·ol + j, :] · o[t, g·gcols …
/// (g+1)·gcols) for G groups of ol rows; o is [n, G·gcols], z is [n, G·ol]. With i8, each worker quantises the
/// group slices its row range touches into its own scratch (a slice on a range boundary is quantised twice, to the
/// same bytes, so the result does not depend on the thread count).
inline void grouped_gemm(thread_pool& pool, const cpu_kernel_table& k, format f, const matrix_view& wa, const float* o,
                         uint64_t n, uint64_t G, uint64_t ol, uint64_t gcols, float* z, act_precision p,
                         act_scratch& s) {
  const uint64_t zr = G * ol, ldo = G * gcols;
  const gemm_rows_fn fa = k.gemm[size_t(f)];
  const gemm_rows_i8_fn fi = p == act_precision::i8 && gcols % act_block == 0 ? k.gemm_i8[size_t(f)] : nullptr;
  pool.run(zr, [&](uint64_t b, uint64_t e, unsigned wk) {
    for (uint64_t r = b; r < e;) {
      const uint64_t g = r / ol, end = std::min(e, (g + 1) * ol);
      if (fi) {
        const float* xg = o + g * gcols;
        if (n > 1) {  // the group's columns of every token, made contiguous [n, gcols]
          std::vector<float>& buf = s.gather[wk];
          buf.resize(n * gcols);
          for (uint64_t t = 0; t < n; ++t) std::copy_n(o + t * ldo + g * gcols, gcols, buf.data() + t * gcols);
          xg = buf.data();
        }
        k.quantize_act(xg, n, gcols, k.i8_layout[size_t(f)], s.group[wk]);
        fi(wa, s.group[wk], z, zr, r, end);
      } else {
        fa(wa, o + g * gcols, n, ldo, z, zr, r, end);
      }
      r = end;
    }
  }, gemm_row_grain);
}

}  // namespace cmfx::driver
