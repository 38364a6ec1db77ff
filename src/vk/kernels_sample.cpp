// Host side of the device sampler (shaders/sample.comp): the passes of one draw from the logits of one position,
// the choice cmfx::sampler makes (temperature, top-p, min-p, top-k, penalties), recorded without a host round trip.
#include <algorithm>
#include <bit>
#include <cmath>

#include "cmfx/sample/sampler.hpp"
#include "kernels_ops.hpp"

namespace cmfx::gpu {

namespace {

struct sample_pc {
  uint32_t n, level, mass_bits, flags;
  float temp, top_p, min_p;
  uint32_t tile;
  uint32_t lo, so, ro, oo;
  uint32_t ncand, seo;
  float rep, pres, freq;
  uint32_t hist_at, z_at, w_at, wc_at, cidx_at, cntwg_at, bsum_at, kidx_at, idx1_at, cval_at, corig_at;
};
static_assert(sizeof(sample_pc) == 112);

// The scratch's regions in 32-bit words (sample.comp reads them from the push constants): 16 control words and the
// histogram [4 levels][256 bins][4 parts] (zeroed per draw), then z [n], w [n] f64, wc [n] f64, cidx [n], cnt_wg
// [workgroups], bsum [n / 64] f64, kidx [max k], and for the two-stage top-k idx1, cval, corig [n / 4 + max k]
// each. f64 regions start on even words.
struct scratch_layout {
  uint64_t hist, z, w, wc, cidx, cntwg, bsum, kidx, idx1, cval, corig, end;
  explicit scratch_layout(uint32_t n) {
    auto even = [](uint64_t x) { return (x + 1) & ~uint64_t{1}; };
    const uint64_t cand = n / 4 + kernels::sample_max_top_k;
    hist = 16;
    z = hist + 4 * 256 * 4;
    w = even(z + n);
    wc = w + 2 * uint64_t(n);
    cidx = wc + 2 * uint64_t(n);
    cntwg = cidx + n;
    bsum = even(cntwg + (n + detail::op_env::wg - 1) / detail::op_env::wg);
    kidx = bsum + 2 * ((uint64_t(n) + 63) / 64);
    idx1 = kidx + kernels::sample_max_top_k;
    cval = idx1 + cand;
    corig = cval + cand;
    end = corig + cand;
  }
  static uint32_t u32(uint64_t v) { return uint32_t(v); }  // < 2^32: n ≤ sample_max_n
};

// The push constants' common part: n, the offsets, the scratch's regions; the rest zero (temperature 1).
sample_pc make_pc(uint32_t n, const scratch_layout& L, const detail::bound& lb, const detail::bound& sb,
                  const detail::bound& ob) {
  using S = scratch_layout;
  sample_pc pc{};
  pc.n = n, pc.mass_bits = uint32_t(top_p_mass_bits(n)), pc.temp = 1.0f, pc.top_p = 1.0f;
  pc.rep = 1.0f, pc.lo = lb.residual / 4, pc.so = sb.residual / 4, pc.oo = ob.residual / 4;
  pc.hist_at = S::u32(L.hist), pc.z_at = S::u32(L.z), pc.w_at = S::u32(L.w), pc.wc_at = S::u32(L.wc);
  pc.cidx_at = S::u32(L.cidx), pc.cntwg_at = S::u32(L.cntwg), pc.bsum_at = S::u32(L.bsum), pc.kidx_at = S::u32(L.kidx);
  pc.idx1_at = S::u32(L.idx1), pc.cval_at = S::u32(L.cval), pc.corig_at = S::u32(L.corig);
  return pc;
}

// Records sample.comp's pass `pass` over `groups` workgroups.
void run_pass(const detail::op_env& e, commands& c, const detail::binding (&b)[5], sample_pc& pc, int pass,
              uint32_t level, uint64_t groups) {
  pc.level = level;
  uint32_t gx, gy;
  e.grid(groups, gx, gy);
  const std::string defs = "#define SAMPLE_PASS " + std::to_string(pass) + "\n" + detail::def_u("SAMPLE_BLOCK", sample_block);
  detail::dispatch(c.impl(), e.pipe("sample.comp", defs, detail::op_env::wg, 5, sizeof pc), b, &pc, sizeof pc, gx, gy);
}

// One row's k best z (kernels::topk's order: value descending, lower index first) into the scratch's kidx, as
// sample.comp's cand_id reads them: over a long row in two stages — rows of `tile` ≥ 4k tokens give their k best in
// index order (many workgroups), pass 10 gathers them, and the k best of those (one row of at most n / 4 + k)
// follow (flag 8) — else in one. `run` records a sample.comp pass (pass, level, workgroups); pc.ncand and pc.tile
// are set here.
template <class Run>
void top_of_z(kernels& k, commands& c, view scratch, const scratch_layout& L, sample_pc& pc, uint32_t n, uint32_t kk,
              Run&& run) {
  auto part = [&](uint64_t words, uint64_t bytes) { return view(*scratch.buf, scratch.offset + words * 4, bytes); };
  const uint32_t tile = std::max<uint32_t>(1024, std::bit_ceil(4 * kk));
  pc.tile = tile;
  if (n <= tile) {
    k.topk(c, part(L.z, uint64_t(n) * 4), 1, n, kk, part(L.kidx, uint64_t(kk) * 4));
    return;
  }
  const uint32_t full = n / tile, tail = n % tile, ktail = std::min(kk, tail);
  pc.ncand = full * kk + ktail;
  pc.flags |= 8u;
  k.topk(c, part(L.z, uint64_t(full) * tile * 4), full, tile, kk, part(L.idx1, uint64_t(full) * kk * 4), true);
  if (tail)
    k.topk(c, part(L.z + uint64_t(full) * tile, uint64_t(tail) * 4), 1, tail, ktail,
           part(L.idx1 + uint64_t(full) * kk, uint64_t(ktail) * 4), true);
  run(10, kk, (pc.ncand + detail::op_env::wg - 1) / detail::op_env::wg);
  k.topk(c, part(L.cval, uint64_t(pc.ncand) * 4), 1, pc.ncand, kk, part(L.kidx, uint64_t(kk) * 4));
}

}  // namespace

uint64_t kernels::sample_scratch_bytes(uint32_t n) { return scratch_layout(n).end * 4; }

bool kernels::has_sample() const { return p_ && detail::op_env_of(*p_).info.float64_ops && detail::op_env_of(*p_).info.int64; }

void kernels::sample(commands& c, view logits, uint32_t n, const sample_settings& s, view rng, view scratch, view out,
                     view seen) {
  const detail::op_env e = detail::op_env_of(*p_);
  if (!e.info.float64_ops || !e.info.int64) throw usage_error("sample: the device has no f64 or 64-bit integers in shaders");
  if (n == 0 || n > sample_max_n) throw usage_error("sample: n must be in [1, " + std::to_string(sample_max_n) + "]");
  if (!(s.temperature > 0.0f) || !std::isfinite(s.temperature)) throw usage_error("sample: temperature must be > 0");
  if (!(s.top_p > 0.0f && s.top_p <= 1.0f)) throw usage_error("sample: top_p must be in (0, 1]");
  if (!(s.min_p >= 0.0f && s.min_p <= 1.0f)) throw usage_error("sample: min_p must be in [0, 1]");
  const bool top_k = s.top_k > 0 && s.top_k < n;
  const bool pen = s.repetition_penalty != 1.0f || s.presence_penalty != 0.0f || s.frequency_penalty != 0.0f;
  if (!(s.repetition_penalty > 0.0f) || !std::isfinite(s.repetition_penalty) || !std::isfinite(s.presence_penalty) ||
      !std::isfinite(s.frequency_penalty))
    throw usage_error("sample: repetition_penalty must be > 0 and the penalties finite");
  if (pen) detail::need_view(seen, uint64_t(n) * 4, "sample", "seen");
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
                      sb = e.bind(scratch, sb_bytes), ob = e.bind(out, 4), nb = e.bind(pen ? seen : view(), uint64_t(n) * 4);
  if (sb.residual % 8 || rb.residual % 8) throw usage_error("sample: scratch / rng binding not 8-byte aligned");
  const bool cut = s.top_p < 1.0f, minp = s.min_p > 0.0f;
  const scratch_layout L(n);
  sample_pc pc = make_pc(n, L, lb, sb, ob);
  pc.flags = (cut ? 1u : 0u) | (minp ? 2u : 0u) | (top_k ? 4u : 0u) | (pen ? 16u : 0u);
  pc.temp = s.temperature, pc.top_p = s.top_p, pc.min_p = s.min_p, pc.ro = rb.residual / 8, pc.seo = nb.residual / 4;
  pc.rep = s.repetition_penalty, pc.pres = s.presence_penalty, pc.freq = s.frequency_penalty;
  const detail::binding b[5] = {lb.b, sb.b, rb.b, ob.b, nb.b};
  // ctrl and the histogram start at zero
  c.fill(view(*scratch.buf, scratch.offset, L.z * 4), L.z * 4, 0);
  const uint64_t per_token = (uint64_t(n) + detail::op_env::wg - 1) / detail::op_env::wg;  // a token per invocation
  auto run = [&](int pass, uint32_t level, uint64_t groups) { run_pass(e, c, b, pc, pass, level, groups); };
  run(1, 0, per_token);
  run(2, 0, per_token);
  if (top_k) {  // the k best of z in the sampler's order, then pass 9 cuts and compacts them
    top_of_z(*this, c, scratch, L, pc, n, s.top_k, run);
    run(9, s.top_k, 1);
  } else if (cut) {
    for (uint32_t l = 1; l < 4; ++l) run(3, l, per_token);
    run(4, 0, 1);
  }
  if (!top_k && (cut || minp)) {
    run(5, 0, per_token);
    run(6, 0, per_token);
  }
  run(7, 0, (uint64_t(n) + 32 * sample_block - 1) / (32 * sample_block));  // 32 blocks per workgroup
  run(8, 0, 1);
}

void kernels::logprobs(commands& c, view logits, uint32_t n, uint32_t top_n, view chosen, view scratch, view out) {
  const detail::op_env e = detail::op_env_of(*p_);
  if (!e.info.float64_ops || !e.info.int64) throw usage_error("logprobs: the device has no f64 or 64-bit integers in shaders");
  if (n == 0 || n > sample_max_n) throw usage_error("logprobs: n must be in [1, " + std::to_string(sample_max_n) + "]");
  if (top_n > logprobs_max_top)
    throw usage_error("logprobs: top_n " + std::to_string(top_n) + " > " + std::to_string(logprobs_max_top));
  if (c.in_concurrent()) throw usage_error("logprobs: several dependent dispatches, not inside begin_concurrent");
  if (scratch.offset % 16) throw usage_error("logprobs: scratch must start on 16 bytes");
  const uint64_t sb_bytes = sample_scratch_bytes(n), ob_bytes = uint64_t(logprobs_words(top_n)) * 4;
  detail::need_view(logits, uint64_t(n) * 4, "logprobs", "logits");
  detail::need_view(chosen, 4, "logprobs", "chosen");
  detail::need_view(scratch, sb_bytes, "logprobs", "scratch");
  detail::need_view(out, ob_bytes, "logprobs", "out");
  const detail::bound lb = e.bind(logits, uint64_t(n) * 4), sb = e.bind(scratch, sb_bytes), ob = e.bind(out, ob_bytes),
                      nb = e.bind(view(), 8);
  if (sb.residual % 8) throw usage_error("logprobs: scratch binding not 8-byte aligned");
  const scratch_layout L(n);
  sample_pc pc = make_pc(n, L, lb, sb, ob);
  const detail::binding b[5] = {lb.b, sb.b, nb.b, ob.b, nb.b};
  // ctrl and the histogram start at zero; the chosen id into ctrl (pass 11 reads its z)
  c.fill(view(*scratch.buf, scratch.offset, L.z * 4), L.z * 4, 0);
  c.copy(view(*chosen.buf, chosen.offset, 4), view(*scratch.buf, scratch.offset + 5 * 4, 4), 4);
  const uint64_t per_token = (uint64_t(n) + detail::op_env::wg - 1) / detail::op_env::wg;
  auto run = [&](int pass, uint32_t level, uint64_t groups) { run_pass(e, c, b, pc, pass, level, groups); };
  run(1, 0, per_token);                      // z = the logits (temperature 1, no penalties), z_max
  run(2, 0, per_token);                      // w = exp(z − z_max)
  run(7, 0, (uint64_t(n) + 32 * sample_block - 1) / (32 * sample_block));  // block sums in order
  if (top_n) top_of_z(*this, c, scratch, L, pc, n, top_n, run);
  run(11, top_n, 1);
}

}  // namespace cmfx::gpu
