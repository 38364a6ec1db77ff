#pragma once
/// @file moe.hpp
/// @brief Expert-batched MoE FFN on the CPU: for every token, its top-k routed experts (and the shared expert)
///        as gate/up -> fused SwiGLU-with-clamp (times the routing weight) -> down, all selected experts of all
///        tokens in two parallel phases (gate+up for every (expert, row), then down), so a decode step costs two
///        pool dispatches per layer instead of three per expert (dsv4-architecture.md §3.4).
///
///   h = silu(min(W1 x, limit)) * clamp(W3 x, -limit, limit) * w_e      (gate clamped from above only)
///   y = sum_e W2 h_e + shared(x)                                       (shared expert: weight 1)
/// Summation over experts is in a fixed order (routed experts in ascending id, then the shared one), so the
/// result does not depend on the thread count.
///
/// Activation precision: act_precision::f32 (default) is the strict path, the parity reference. With
/// act_precision::i8, every expert matrix whose format has an integer-dot kernel (cpu_kernel_table::gemm_i8:
/// q4tp / q2tp / MXFP4 / q8_row, cols % 32 == 0) reads its input quantised to int8 per 32 values (act_q8.hpp; error in
/// docs/FORMATS.md "Kernel tolerances"); other formats keep the f32 path. Each worker quantises the input slices of
/// the experts its row range touches into its own act_q8 (moe_scratch::aq, grown once), so no extra dispatch is
/// needed and only a slice on a range boundary is quantised twice. The i8 result still does not depend on the
/// thread count: quantisation is per token, and the same slice quantises to the same bytes on every worker.
///
/// Partition: rows are split statically over the workers (chunk_rows = 0, the default), or with chunk_rows > 0
/// taken dynamically in chunks of that many rows (thread_pool::run_chunks) — for hosts whose cores do not run
/// at one speed. A worker quantises an expert's input once however many of its chunks it takes; either way every
/// row is computed by the same code from the same bytes, so the result is identical.
#include <algorithm>
#include <cmath>
#include <span>
#include <vector>

#include "cmfx/kernels/cpu_kernels.hpp"

namespace cmfx {

/// One expert's three matrices (W1 = gate [I, d], W3 = up [I, d], W2 = down [d, I]) and their formats.
struct expert_view {
  matrix_view gate, up, down;
  format gate_fmt = format::f32, up_fmt = format::f32, down_fmt = format::f32;
};

/// Reused across calls; vectors only grow.
struct moe_scratch {
  std::vector<uint32_t> order, start, count, token;  // per active expert: slice of (token, weight) entries
  std::vector<float> weight, xg, g, u, h, y;
  std::vector<const expert_view*> ev;
  std::vector<uint64_t> row0;  // prefix sums of rows per active expert (phase 1 and phase 2)
  std::vector<uint64_t> drow0;
  std::vector<uint32_t> active;
  std::vector<act_q8> aq;  // act_precision::i8: two per worker (gate input, up input when its layout differs)
  std::vector<uint64_t> aq_of;  // per worker: the active expert whose input aq holds in this phase (~0: none)
};

inline float silu(float x) noexcept { return x / (1.0f + std::exp(-x)); }

namespace moe_detail {
/// The integer-dot kernel for (f, cols) under precision p, or nullptr for the f32 path.
inline gemm_rows_i8_fn i8_kernel(const cpu_kernel_table& k, act_precision p, format f, uint64_t cols) noexcept {
  if (p != act_precision::i8 || cols % act_block != 0) return nullptr;
  return k.gemm_i8[size_t(f)];
}
}  // namespace moe_detail

/// out[t, :] = MoE(X[t, :]) for t < n. ids/weights: [n, top_k] routing of each token (ids index `experts`).
inline void moe_forward(thread_pool& pool, const cpu_kernel_table& k, std::span<const expert_view> experts,
                        const expert_view* shared, const float* X, uint64_t n, uint64_t d, const uint32_t* ids,
                        const float* weights, uint32_t top_k, float limit, float* out, moe_scratch& s,
                        act_precision act = act_precision::f32, uint64_t chunk_rows = 0) {
  const uint64_t E = experts.size(), slots = E + (shared ? 1 : 0);
  // Bucket (token, weight) entries by expert, in ascending expert id; the shared expert is slot E.
  s.count.assign(slots, 0);
  for (uint64_t i = 0; i < n * top_k; ++i) ++s.count[ids[i]];
  if (shared) s.count[E] = uint32_t(n);
  s.order.clear();
  s.start.assign(slots + 1, 0);
  for (uint64_t e = 0; e < slots; ++e) s.start[e + 1] = s.start[e] + s.count[e];
  const uint64_t entries = s.start[slots];
  s.token.resize(entries);
  s.weight.resize(entries);
  std::vector<uint32_t>& fill = s.order;
  fill.assign(s.start.begin(), s.start.end() - 1);
  for (uint64_t t = 0; t < n; ++t)
    for (uint32_t j = 0; j < top_k; ++j) {
      const uint32_t e = ids[t * top_k + j], at = fill[e]++;
      s.token[at] = uint32_t(t);
      s.weight[at] = weights[t * top_k + j];
    }
  if (shared)
    for (uint64_t t = 0; t < n; ++t) {
      s.token[s.start[E] + t] = uint32_t(t);
      s.weight[s.start[E] + t] = 1.0f;
    }
  // Active experts and their row ranges for both phases.
  s.ev.clear();
  std::vector<uint32_t>& active = s.active;
  active.clear();
  for (uint64_t e = 0; e < slots; ++e)
    if (s.count[e]) {
      active.push_back(uint32_t(e));
      s.ev.push_back(e < E ? &experts[e] : shared);
    }
  const uint64_t A = active.size();
  uint64_t inter = 0;  // leading dimension of g/u/h: the widest expert
  for (const expert_view* ev : s.ev) inter = std::max(inter, ev->gate.rows);
  s.row0.assign(A + 1, 0);
  for (uint64_t a = 0; a < A; ++a) s.row0[a + 1] = s.row0[a] + s.ev[a]->gate.rows;
  // Gather each expert's tokens into contiguous rows.
  s.xg.resize(entries * d);
  for (uint64_t i = 0; i < entries; ++i) std::copy_n(X + uint64_t(s.token[i]) * d, d, s.xg.data() + i * d);
  s.g.resize(entries * inter);
  s.u.resize(entries * inter);
  s.h.resize(entries * inter);
  s.y.resize(entries * d);
  if (act == act_precision::i8 && s.aq.size() < 2 * size_t(pool.size())) s.aq.resize(2 * size_t(pool.size()));
  auto dispatch = [&](uint64_t rows, auto&& body) {
    s.aq_of.assign(pool.size(), ~uint64_t(0));
    if (chunk_rows)
      pool.run_chunks(rows, body, (chunk_rows + gemm_row_grain - 1) / gemm_row_grain * gemm_row_grain);
    else
      pool.run_rows(rows, body, gemm_row_grain);
  };

  // Phase 1: gate and up rows of every active expert, SwiGLU-clamp and routing weight fused per row range.
  dispatch(s.row0[A], [&](uint64_t b, uint64_t e, unsigned wk) {
    uint64_t a = uint64_t(std::upper_bound(s.row0.begin(), s.row0.end(), b) - s.row0.begin()) - 1;
    for (uint64_t r = b; r < e; ++a) {
      const expert_view& ex = *s.ev[a];
      const uint64_t lo = r - s.row0[a], hi = std::min(e, s.row0[a + 1]) - s.row0[a];
      const uint64_t base = s.start[active[a]], ne = s.count[active[a]], I = inter;
      const float* xe = s.xg.data() + base * d;
      const gemm_rows_i8_fn gi = moe_detail::i8_kernel(k, act, ex.gate_fmt, d);
      const gemm_rows_i8_fn ui = moe_detail::i8_kernel(k, act, ex.up_fmt, d);
      act_q8* gq = gi ? &s.aq[2 * size_t(wk)] : nullptr;
      act_q8* uq = gq;
      const bool fresh = s.aq_of[wk] != a;  // this worker's first rows of expert a in this phase
      s.aq_of[wk] = a;
      if (gi && fresh) k.quantize_act(xe, ne, d, k.i8_layout[size_t(ex.gate_fmt)], *gq);
      if (ui && (!gi || k.i8_layout[size_t(ex.up_fmt)] != gq->layout)) {
        uq = &s.aq[2 * size_t(wk) + 1];
        if (fresh) k.quantize_act(xe, ne, d, k.i8_layout[size_t(ex.up_fmt)], *uq);
      }
      if (gi)
        gi(ex.gate, *gq, s.g.data() + base * I, I, lo, hi);
      else
        k.gemm[size_t(ex.gate_fmt)](ex.gate, xe, ne, d, s.g.data() + base * I, I, lo, hi);
      if (ui)
        ui(ex.up, *uq, s.u.data() + base * I, I, lo, hi);
      else
        k.gemm[size_t(ex.up_fmt)](ex.up, xe, ne, d, s.u.data() + base * I, I, lo, hi);
      for (uint64_t t = 0; t < ne; ++t) {
        const float w = s.weight[base + t];
        for (uint64_t q = lo; q < hi; ++q) {
          const uint64_t i = (base + t) * I + q;
          const float g = std::min(s.g[i], limit), v = std::clamp(s.u[i], -limit, limit);
          s.h[i] = silu(g) * v * w;
        }
      }
      r = s.row0[a] + hi;
    }
  });

  // Phase 2: down rows of every active expert.
  s.drow0.assign(A + 1, 0);
  for (uint64_t a = 0; a < A; ++a) s.drow0[a + 1] = s.drow0[a] + d;
  dispatch(s.drow0[A], [&](uint64_t b, uint64_t e, unsigned wk) {
    uint64_t a = b / d;
    for (uint64_t r = b; r < e; ++a) {
      const expert_view& ex = *s.ev[a];
      const uint64_t lo = r - s.drow0[a], hi = std::min(e, s.drow0[a + 1]) - s.drow0[a];
      const uint64_t base = s.start[active[a]], ne = s.count[active[a]], I = ex.down.cols;
      const float* he = s.h.data() + base * inter;
      if (const gemm_rows_i8_fn di = moe_detail::i8_kernel(k, act, ex.down_fmt, I);
          di && I == inter) {  // the int8 input must be contiguous [ne, I]: the expert is as wide as the leading dim
        act_q8& hq = s.aq[2 * size_t(wk)];
        if (s.aq_of[wk] != a) k.quantize_act(he, ne, I, k.i8_layout[size_t(ex.down_fmt)], hq);
        s.aq_of[wk] = a;
        di(ex.down, hq, s.y.data() + base * d, d, lo, hi);
      } else {
        k.gemm[size_t(ex.down_fmt)](ex.down, he, ne, inter, s.y.data() + base * d, d, lo, hi);
      }
      r = s.drow0[a] + hi;
    }
  });

  // Sum the contributions per token in expert order.
  std::fill(out, out + n * d, 0.0f);
  for (uint64_t i = 0; i < entries; ++i) {
    float* o = out + uint64_t(s.token[i]) * d;
    const float* y = s.y.data() + i * d;
    for (uint64_t c = 0; c < d; ++c) o[c] += y[c];
  }
}

}  // namespace cmfx
