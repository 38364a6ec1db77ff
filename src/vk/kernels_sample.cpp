// Host side of the device sampler (shaders/sample.comp): the passes of one draw from the logits of one position,
// the choice cmfx::sampler makes (temperature, top-p, min-p), recorded without a host round trip.
#include <cmath>

#include "cmfx/sample/sampler.hpp"
#include "kernels_ops.hpp"

namespace cmfx::gpu {

namespace {

struct sample_pc {
  uint32_t n, level, mass_bits, flags;
  float temp, top_p, min_p, pad0;
  uint32_t lo, so, ro, oo;
};
static_assert(sizeof(sample_pc) == 48);

// Scratch layout in 32-bit words (sample.comp's ctrl / histogram, then z, w, wc, cidx, cnt_wg, bsum, kidx).
constexpr uint64_t head_words = 16 + 4096;
constexpr uint64_t z_words = head_words;
uint64_t rup2(uint64_t x) { return (x + 1) & ~uint64_t{1}; }
uint64_t bsum_words(uint32_t n) {
  const uint64_t cntwg = z_words + rup2(n) + 4 * uint64_t(n) + rup2(n);  // after z, w, wc, cidx
  return rup2(cntwg + (n + detail::op_env::wg - 1) / detail::op_env::wg);
}
uint64_t kidx_words(uint32_t n) { return bsum_words(n) + 2 * ((uint64_t(n) + 63) / 64); }

}  // namespace

uint64_t kernels::sample_scratch_bytes(uint32_t n) { return (kidx_words(n) + sample_max_top_k) * 4; }

bool kernels::has_sample() const { return p_ && detail::op_env_of(*p_).info.float64_ops && detail::op_env_of(*p_).info.int64; }

void kernels::sample(commands& c, view logits, uint32_t n, const sample_settings& s, view rng, view scratch, view out) {
  const detail::op_env e = detail::op_env_of(*p_);
  if (!e.info.float64_ops || !e.info.int64) throw usage_error("sample: the device has no f64 or 64-bit integers in shaders");
  if (n == 0 || n > sample_max_n) throw usage_error("sample: n must be in [1, " + std::to_string(sample_max_n) + "]");
  if (!(s.temperature > 0.0f) || !std::isfinite(s.temperature)) throw usage_error("sample: temperature must be > 0");
  if (!(s.top_p > 0.0f && s.top_p <= 1.0f)) throw usage_error("sample: top_p must be in (0, 1]");
  if (!(s.min_p >= 0.0f && s.min_p <= 1.0f)) throw usage_error("sample: min_p must be in [0, 1]");
  const bool top_k = s.top_k > 0 && s.top_k < n;
  if (top_k && s.top_k > sample_max_top_k)
    throw usage_error("sample: top_k " + std::to_string(s.top_k) + " > " + std::to_string(sample_max_top_k));
  if (c.in_concurrent()) throw usage_error("sample: several dependent dispatches, not inside begin_concurrent");
  if (scratch.offset % 16 || rng.offset % 8) throw usage_error("sample: scratch must start on 16 bytes, rng on 8");
  const uint64_t sb_bytes = sample_scratch_bytes(n);
  detail::need_view(logits, uint64_t(n) * 4, "sample", "logits");
  detail::need_view(rng, sample_rng_bytes, "sample", "rng");
  detail::need_view(scratch, sb_bytes, "sample", "scratch");
  detail::need_view(out, 4, "sample", "out");
  const detail::bound lb = e.bind(logits, uint64_t(n) * 4), rb = e.bind(rng, sample_rng_bytes),
                      sb = e.bind(scratch, sb_bytes), ob = e.bind(out, 4);
  if (sb.residual % 8 || rb.residual % 8) throw usage_error("sample: scratch / rng binding not 8-byte aligned");
  const bool cut = s.top_p < 1.0f, minp = s.min_p > 0.0f;
  sample_pc pc{n, 0, uint32_t(top_p_mass_bits(n)), (cut ? 1u : 0u) | (minp ? 2u : 0u) | (top_k ? 4u : 0u), s.temperature, s.top_p,
               s.min_p, 0.0f, lb.residual / 4, sb.residual / 4, rb.residual / 8, ob.residual / 4};
  const detail::binding b[4] = {lb.b, sb.b, rb.b, ob.b};
  // ctrl and the histogram start at zero
  c.fill(view(*scratch.buf, scratch.offset, head_words * 4), head_words * 4, 0);
  const uint64_t groups = (uint64_t(n) + detail::op_env::wg - 1) / detail::op_env::wg;
  uint32_t gx, gy;
  e.grid(groups, gx, gy);
  auto run = [&](int pass, uint32_t level, bool grid) {
    pc.level = level;
    const std::string defs = "#define SAMPLE_PASS " + std::to_string(pass) + "\n";
    detail::dispatch(c.impl(), e.pipe("sample.comp", defs, detail::op_env::wg, 4, sizeof pc), b, &pc, sizeof pc,
                     grid ? gx : 1, grid ? gy : 1);
  };
  run(1, 0, true);
  run(2, 0, true);
  if (top_k) {  // the k best of z in the sampler's order, then pass 9 cuts and compacts them
    topk(c, view(*scratch.buf, scratch.offset + z_words * 4, uint64_t(n) * 4), 1, n, s.top_k,
         view(*scratch.buf, scratch.offset + kidx_words(n) * 4, uint64_t(s.top_k) * 4));
    run(9, s.top_k, false);
  } else if (cut) {
    for (uint32_t l = 1; l < 4; ++l) run(3, l, true);
    run(4, 0, false);
  }
  if (!top_k && (cut || minp)) {
    run(5, 0, true);
    run(6, 0, true);
  }
  const uint64_t bgroups = (uint64_t(n) + 2047) / 2048;  // pass 7: 32 blocks of 64 per workgroup
  uint32_t bx, by;
  e.grid(bgroups, bx, by);
  pc.level = 0;
  detail::dispatch(c.impl(), e.pipe("sample.comp", "#define SAMPLE_PASS 7\n", detail::op_env::wg, 4, sizeof pc), b, &pc,
                   sizeof pc, bx, by);
  run(8, 0, false);
}

}  // namespace cmfx::gpu
