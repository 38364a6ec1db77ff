// The V4 KV compressor as a per-token state machine (dsv4-architecture.md §3.3 "Compressor", official
// `Compressor.forward` decode branch; the prefill branch is the same math in bulk).
#include <cmath>
#include <limits>
#include <span>

#include "cmfx/ops/fake_quant.hpp"
#include "cmfx/ops/hadamard.hpp"
#include "cmfx/ops/rmsnorm.hpp"
#include "dsv4_internal.hpp"

namespace cmfx::driver {

bool dsv4_compressor_step(const dsv4_compressor_w& w, dsv4_comp_state& s, uint64_t t, const float* a, const float* sc,
                          const rope_table& rope, float eps, int post) {
  const uint32_t r = w.ratio, cw = s.cw, width = w.width;
  const uint32_t slot = uint32_t(t % r);
  float* kv = s.kv_row(t);
  float* score = s.score_row(t);
  const float* ape = w.ape.data() + size_t(slot) * cw;
  for (uint32_t c = 0; c < cw; ++c) {
    kv[c] = a[c];
    score[c] = sc[c] + ape[c];  // ape added on arrival (stored with the score)
  }
  if ((t + 1) % r != 0) return false;

  const uint64_t ws = t + 1 - r;  // first position of the closing window
  // Slots: overlap → previous window (positions ws−r … ws−1, channels [0, width)) then this window (channels
  // [width, 2·width)); a missing previous window contributes nothing (score −inf). Flat → this window, [0, width).
  const bool prev = w.overlap && ws >= r;
  const uint32_t off = w.overlap ? width : 0;
  // The entry is computed in place at the end of the finished entries (they only grow: no per-window buffer).
  const size_t at = s.entries.size();
  s.entries.resize(at + width);
  const std::span<float> entry(s.entries.data() + at, width);
  for (uint32_t c = 0; c < width; ++c) {
    double m = -std::numeric_limits<double>::infinity();
    if (prev)
      for (uint64_t p = ws - r; p < ws; ++p) m = std::max(m, double(s.score_row(p)[c]));
    for (uint64_t p = ws; p <= t; ++p) m = std::max(m, double(s.score_row(p)[off + c]));
    double den = 0.0, num = 0.0;
    if (prev)
      for (uint64_t p = ws - r; p < ws; ++p) {
        const double e = std::exp(double(s.score_row(p)[c]) - m);
        den += e;
        num += e * double(s.kv_row(p)[c]);
      }
    for (uint64_t p = ws; p <= t; ++p) {
      const double e = std::exp(double(s.score_row(p)[off + c]) - m);
      den += e;
      num += e * double(s.kv_row(p)[off + c]);
    }
    entry[c] = float(num / den);
  }
  rmsnorm(entry, w.norm.data(), eps, entry);
  const uint32_t rd = rope.dim();
  apply_rope(entry.subspan(width - rd), int64_t(ws), rope, false);
  if (post == 1) {
    act_quant_e4m3(entry.first(width - rd), dsv4_kv_fp8_block);
  } else if (post == 2) {
    hadamard_inplace(entry, float(1.0 / std::sqrt(double(width))));
    act_quant_e2m1(entry, dsv4_fp4_block);
  }
  return true;
}

}  // namespace cmfx::driver
