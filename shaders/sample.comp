#version 460
#extension GL_GOOGLE_include_directive : require
#extension GL_EXT_shader_explicit_arithmetic_types_int64 : require
// The next token drawn from the logits of one position, on the device (kernels::sample): the same choice, bit for
// bit, as cmfx::sampler::sample (include/cmfx/sample/sampler.hpp) with a temperature, top-p, min-p, top-k and the
// penalties (no logprobs), continuing the sampler's MT19937-64 stream (include/cmfx/sample/rng.hpp) from the state
// in binding 2. Every quantity the choice depends on is computed as the sampler computes it: z = f32(l / T) (one
// f64 quotient rounded once: the correctly rounded f32 quotient, as route.comp), the weights exp(z − z_max) by the
// sampler's written-out f64 exp (vocab_pass.hpp; `precise`, so no fused multiply-add), top-p's fixed-point masses
// summed as integers, and the draw's block sums added in the sampler's order. Passes (SAMPLE_PASS):
//   1 (grid)  z = NaN → −inf, the penalties (repetition on the prompt's and the output's tokens, then presence and
//             frequency on the output's: the sampler's apply_penalties), then l / T; z_max by an atomic maximum of
//             its order key (ctrl[0]).
//   2 (grid)  z_max = ±inf: the first index holding it (ctrl[1]); else w = exp(z − z_max); with top-p each mass
//             into level 0 of the histogram of the descending key (its top 8 bits).
//   3 (grid, level L = 1..3)  the cut's prefix from levels < L; masses of the entries under that prefix into level
//             L by the next 8 bits.
//   4 (one workgroup)  the cut: key* (the z of the last token top-p keeps), acc (the mass above it) and, where
//             top-p keeps only some tokens of equal z, the highest index of those kept (ctrl).
//   5 (grid)  the kept count (atomic, ctrl[CNT]) and per workgroup (cnt_wg).
//   6 (grid)  kept tokens compacted in index order: wc = their weights, cidx = their ids.
//   9 (one workgroup, with top-k)  the k best tokens (kernels::topk over z: value descending, lower index first,
//             the sampler's best_entries) in that order; top-p over them (exact prefix sums of their masses), min-p;
//             the kept ones compacted in that order (wc, cidx, ctrl[CNT]). Then 7 and 8 as without top-k.
//   10 (grid, two-stage top-k)  the first stage's picks (rows of `tile` tokens, each row's k best in index order)
//             as z values and token ids: the second stage (kernels::topk over them) breaks ties by position,
//             which is index order, so the k best are the sampler's.
//   7 (grid)  the candidates' weights in blocks of 64, each summed in order (bsum).
//   8 (one workgroup)  one uniform from the RNG (twisting first when due), the sampler's pick(): the block sums
//             added in order, the first block whose running total passes r = u·Σ, the entry inside it; the id.
// Passes 3–6 run only with top-p / min-p and no top-k, 9 and 10 only with top-k (without any of them the candidates
// are the vocabulary in index order).
// kernels::logprobs (the numbers sampler::fill_logprobs derives a token's logprob from) reuses them on the raw logits:
// 1 at temperature 1 without penalties (z = the logits, NaN → −inf), 2, 7, the top-k passes for the top_n best, then
//   11 (one workgroup)  the block sums added in order (pass 8's total) and the record: z_max, the total, the chosen
//             token's z, the top_n ids and their z.
#include "common/base.glsl"
// SAMPLE_BLOCK (from the host: cmfx::sample_block): weights per block of the draw's and the logprobs' fixed-order sums.

layout(push_constant) uniform sample_pc {
  uint n, level, mass_bits, flags;   // flags: 1 top-p, 2 min-p, 4 top-k, 8 top-k in two stages (level: k), 16 penalties
  float temp, top_p, min_p;
  uint tile;                         // two-stage top-k: tokens per first-stage row
  uint lo, so, ro, oo;               // word offsets of logits, scratch, out; rng in 64-bit words
  uint ncand, seo;                   // two-stage top-k: first-stage candidates; the seen counts' offset (binding 4)
  float rep, pres, freq;             // repetition, presence, frequency penalties (flag 16)
  // the scratch's regions, in words from pc.so (kernels_sample.cpp lays them out): the histogram, z, w, wc, cidx,
  // cnt_wg, bsum, kidx, idx1, cval, corig
  uint hist_at, z_at, w_at, wc_at, cidx_at, cntwg_at, bsum_at, kidx_at, idx1_at, cval_at, corig_at;
} pc;
layout(std430, binding = 0) readonly buffer L { float logits[]; };
layout(std430, binding = 1) buffer SU { uint su[]; };
layout(std430, binding = 1) buffer SF { float sf[]; };
layout(std430, binding = 1) buffer SD { double sd[]; };
layout(std430, binding = 2) buffer R { uint64_t rng[]; };
layout(std430, binding = 3) writeonly buffer O { uint oi[]; };
// Penalties (flag 16): per token its count in the output so far, bit 31 set for a token of the prompt (the
// sampler's counts_ and prompt flag); pass 8 counts the chosen token.
layout(std430, binding = 4) buffer SEEN { uint seen[]; };

// Scratch (32-bit words from pc.so; kernels::sample_scratch_bytes): the control words first (zero before the draw,
// with the histogram), then the regions the push constants place. Control words:
#define C_ZMAX 0u   // the largest z's order key (atomic maximum)
#define C_FIRST 1u  // 0xFFFFFFFF − the first index holding z_max (atomic maximum), where z_max = ±inf
#define C_CNT 2u    // the candidates' count (passes 5, 9)
#define C_KEY 3u    // top-p's cut: the descending key of the last kept token's z
#define C_IDX 4u    // ... and the highest index kept among tokens with that z (0xFFFFFFFF: all of them)
#define C_CHOSEN 5u // logprobs (pass 11): the chosen token's id, copied in by the host's commands

// Ascending order key of a non-NaN float, −0 as +0 (argmax.comp's); its inverse.
uint key_of(float v) {
  uint u = floatBitsToUint(v);
  if ((u & 0x7FFFFFFFu) == 0u) u = 0u;
  return (u & 0x80000000u) != 0u ? ~u : (u | 0x80000000u);
}
float key_value(uint k) { return uintBitsToFloat((k & 0x80000000u) != 0u ? (k & 0x7FFFFFFFu) : ~k); }

// vocab_pass.hpp's exp_nonpos, operation for operation.
double exp_nonpos(double x) {
  const uint64_t lowest_bits = 0xC086200000000000ul;  // −708.0
  const uint64_t xb = doubleBitsToUint64(x);
  const uint64_t keep = xb <= lowest_bits ? ~0ul : 0ul;
  const double xc = uint64BitsToDouble((xb & keep) | (lowest_bits & ~keep));
  precise const double t = xc * uint64BitsToDouble(0x3FF71547652B82FEul) + uint64BitsToDouble(0x4338000000000000ul);
  precise const double k = t - uint64BitsToDouble(0x4338000000000000ul);
  precise const double r = (xc - k * uint64BitsToDouble(0x3FE62E42FEE00000ul)) - k * uint64BitsToDouble(0x3DEA39EF35793C76ul);
  precise double p = uint64BitsToDouble(0x3DE6124613A86D09ul);
  p = p * r + uint64BitsToDouble(0x3E21EED8EFF8D898ul);
  p = p * r + uint64BitsToDouble(0x3E5AE64567F544E4ul);
  p = p * r + uint64BitsToDouble(0x3E927E4FB7789F5Cul);
  p = p * r + uint64BitsToDouble(0x3EC71DE3A556C734ul);
  p = p * r + uint64BitsToDouble(0x3EFA01A01A01A01Aul);
  p = p * r + uint64BitsToDouble(0x3F2A01A01A01A01Aul);
  p = p * r + uint64BitsToDouble(0x3F56C16C16C16C17ul);
  p = p * r + uint64BitsToDouble(0x3F81111111111111ul);
  p = p * r + uint64BitsToDouble(0x3FA5555555555555ul);
  p = p * r + uint64BitsToDouble(0x3FC5555555555555ul);
  p = p * r + 0.5LF;
  p = p * r + 1.0LF;
  p = p * r + 1.0LF;
  const uint64_t e = ((doubleBitsToUint64(t) + 1023ul) << 52) & keep;
  precise const double res = p * uint64BitsToDouble(e);
  return res;
}

float zmax_of() { return key_value(su[pc.so + C_ZMAX]); }
// top-p's fixed-point mass of a weight (sampler::top_p_cut: truncation of w · 2^bits).
uint64_t mass_of(double w) {
  precise const double s = w * uint64BitsToDouble(uint64_t(1023u + pc.mass_bits) << 52);
  return uint64_t(s);
}
uint64_t bin_mass(uint lvl, uint b) {
  const uint o = pc.so + pc.hist_at + (lvl * 256u + b) * 4u;
  return uint64_t(su[o]) + (uint64_t(su[o + 1u]) << 14) + (uint64_t(su[o + 2u]) << 28) + (uint64_t(su[o + 3u]) << 42);
}

shared uint64_t s_scan[WG_SIZE];
shared uint s_u[WG_SIZE];
shared uint s_bin, s_prefix;
#if SAMPLE_PASS == 2 || SAMPLE_PASS == 3
shared uint s_hist[1024];  // [256 bins][4 parts]
#endif
shared uint64_t s_acc;
shared double s_target;

// Inclusive prefix sums over the workgroup (Hillis–Steele; every invocation calls it).
uint64_t scan64(uint64_t v) {
  const uint lid = gl_LocalInvocationID.x;
  s_scan[lid] = v;
  barrier();
  for (uint d = 1u; d < WG_SIZE; d <<= 1) {
    const uint64_t a = lid >= d ? s_scan[lid - d] : 0ul;
    barrier();
    s_scan[lid] += a;
    barrier();
  }
  return s_scan[lid];
}
uint scan32(uint v) {
  const uint lid = gl_LocalInvocationID.x;
  s_u[lid] = v;
  barrier();
  for (uint d = 1u; d < WG_SIZE; d <<= 1) {
    const uint a = lid >= d ? s_u[lid - d] : 0u;
    barrier();
    s_u[lid] += a;
    barrier();
  }
  return s_u[lid];
}

// The cut's descending-key prefix of `levels` bytes and the mass above it (s_prefix, s_acc, s_target): at each
// level the first bin (in descending z) where the running mass reaches target = top_p · total — the sampler's
// rule, keep each token while the mass before it is < target. Every invocation calls it (WG_SIZE >= 256).
void derive(uint levels) {
  const uint lid = gl_LocalInvocationID.x;
  const uint64_t total = scan64(lid < 256u ? bin_mass(0u, lid) : 0ul);
  if (lid == 0u) {
    s_target = double(pc.top_p) * double(s_scan[WG_SIZE - 1u]);
    s_acc = 0ul;
    s_prefix = 0u;
  }
  barrier();
  for (uint lvl = 0u; lvl < levels; ++lvl) {
    const uint64_t m = lid < 256u ? bin_mass(lvl, lid) : 0ul;
    const uint64_t incl = scan64(m);
    if (lid == 0u) s_bin = 255u;
    barrier();
    if (lid < 256u && double(s_acc + incl) >= s_target) atomicMin(s_bin, lid);
    barrier();
    if (lid == s_bin) {
      s_acc += incl - m;
      s_prefix = (s_prefix << 8) | lid;
    }
    barrier();
  }
}

// The descending key of token i's z (smaller = larger z).
uint dkey(uint i) { return ~key_of(sf[pc.so + pc.z_at + i]); }

// The token id of the j-th best (top-k: pass 9).
uint cand_id(uint j) {
  const uint c = su[pc.so + pc.kidx_at + j];
  return (pc.flags & 8u) != 0u ? su[pc.so + pc.corig_at + c] : c;
}

// Whether token i is a candidate after top-p and min-p (passes 5 and 6; ctrl holds the cut).
bool kept(uint i) {
  if ((pc.flags & 1u) != 0u) {
    const uint k = dkey(i), ks = su[pc.so + C_KEY];
    if (k > ks || (k == ks && i > su[pc.so + C_IDX])) return false;
  }
  if ((pc.flags & 2u) != 0u && !(sd[(pc.so + pc.w_at) / 2u + i] >= double(pc.min_p))) return false;
  return true;
}

// ---- MT19937-64 (rng.hpp): the state's 312 words and index in binding 2 from pc.ro.
shared uint64_t mt[312];
uint64_t mt_mix(uint64_t hi, uint64_t lo, uint64_t far) {
  const uint64_t y = (hi & 0xFFFFFFFF80000000ul) | (lo & 0x7FFFFFFFul);
  return far ^ (y >> 1) ^ ((y & 1ul) != 0ul ? 0xB5026F5AA96619E9ul : 0ul);
}
// One draw (every invocation calls it; the twist runs in two parallel phases, reads before writes); u in s_target.
shared double s_u01;
void draw_uniform() {
  const uint lid = gl_LocalInvocationID.x;
  for (uint k = lid; k < 312u; k += WG_SIZE) mt[k] = rng[pc.ro + k];
  barrier();
  const uint64_t idx = rng[pc.ro + 312u];
  if (idx >= 312ul) {
    // phase A: k < 156 from old words only
    uint64_t a0 = 0ul, a1 = 0ul;
    if (lid < 156u) a0 = mt_mix(mt[lid], mt[lid + 1u], mt[lid + 156u]);
    if (lid + WG_SIZE < 156u) a1 = mt_mix(mt[lid + WG_SIZE], mt[lid + WG_SIZE + 1u], mt[lid + WG_SIZE + 156u]);
    barrier();
    if (lid < 156u) mt[lid] = a0;
    if (lid + WG_SIZE < 156u) mt[lid + WG_SIZE] = a1;
    barrier();
    // phase B: 156 <= k < 311 from old words k, k + 1 and new words k − 156; then k = 311 from new x[0], x[155]
    uint64_t b0 = 0ul, b1 = 0ul;
    const uint k0 = 156u + lid, k1 = 156u + lid + WG_SIZE;
    if (k0 < 311u) b0 = mt_mix(mt[k0], mt[k0 + 1u], mt[k0 - 156u]);
    if (k1 < 311u) b1 = mt_mix(mt[k1], mt[k1 + 1u], mt[k1 - 156u]);
    uint64_t last = 0ul;
    if (lid == 0u) last = mt_mix(mt[311], mt[0], mt[155]);
    barrier();
    if (k0 < 311u) mt[k0] = b0;
    if (k1 < 311u) mt[k1] = b1;
    if (lid == 0u) mt[311] = last;
    barrier();
  }
  const uint at = idx >= 312ul ? 0u : uint(idx);
  if (lid == 0u) {
    uint64_t z = mt[at];
    z ^= (z >> 29) & 0x5555555555555555ul;
    z ^= (z << 17) & 0x71D67FFFEDA60000ul;
    z ^= (z << 37) & 0xFFF7EEE000000000ul;
    z ^= z >> 43;
    s_u01 = double(z >> 11) * uint64BitsToDouble(0x3CA0000000000000ul);  // 2^-53
    rng[pc.ro + 312u] = uint64_t(at + 1u);
  }
  if (idx >= 312ul)
    for (uint k = lid; k < 312u; k += WG_SIZE) rng[pc.ro + k] = mt[k];
  barrier();
}

#if SAMPLE_PASS == 8 || SAMPLE_PASS == 11
#define WIN 1024u
shared double s_win[WIN];  // a window of block sums
// The block sums bs[0..nb) added in order (the sampler's pick(): one invocation adds, a window of block sums at a
// time staged in shared memory; the adds are one dependent chain, the window's values read 8 at a time ahead of
// them); running: the running totals P_{b+1} = P_b + S_b written over the block sums. Returns the total (every
// invocation calls it).
double ordered_total(uint nb, uint bs, bool running) {
  const uint lid = gl_LocalInvocationID.x;
  precise double total = 0.0LF;
  for (uint w0 = 0u; w0 < nb; w0 += WIN) {
    for (uint j = lid; j < WIN && w0 + j < nb; j += WG_SIZE) s_win[j] = sd[bs + w0 + j];
    barrier();
    if (lid == 0u) {
      const uint m = min(WIN, nb - w0);
      uint j = 0u;
      for (; j + 8u <= m; j += 8u) {
        double v[8];
        [[unroll]] for (uint q = 0u; q < 8u; ++q) v[q] = s_win[j + q];
        [[unroll]] for (uint q = 0u; q < 8u; ++q) {
          total += v[q];
          v[q] = total;
        }
        [[unroll]] for (uint q = 0u; q < 8u; ++q) s_win[j + q] = v[q];
      }
      for (; j < m; ++j) {
        total += s_win[j];
        s_win[j] = total;
      }
    }
    barrier();
    if (running)
      for (uint j = lid; j < WIN && w0 + j < nb; j += WG_SIZE) sd[bs + w0 + j] = s_win[j];
    barrier();
  }
  return total;  // invocation 0's
}
#endif
#if SAMPLE_PASS == 7
shared double s_blk[32u * SAMPLE_BLOCK];  // 32 blocks of SAMPLE_BLOCK weights
#endif

void main() {
  const uint lid = gl_LocalInvocationID.x;
  const uint n = pc.n;
#if SAMPLE_PASS == 1
  const uint i = wg_index() * WG_SIZE + lid;
  uint k = 0u;
  if (i < n) {
    float l = logits[pc.lo + i];
    if (isnan(l)) l = -F32_INF;
    if ((pc.flags & 16u) != 0u) {  // the sampler's apply_penalties, operation for operation
      const uint sw = seen[pc.seo + i], c = sw & 0x7FFFFFFFu;
      if (pc.rep != 1.0 && (c > 0u || (sw & 0x80000000u) != 0u))
        l = l < 0.0 ? l * pc.rep : float(double(l) / double(pc.rep));
      if (c > 0u) {
        precise const float t = float(c) * pc.freq + pc.pres;
        precise const float d = l - t;
        l = d;
      }
    }
    const float z = pc.temp == 1.0 ? l : float(double(l) / double(pc.temp));
    sf[pc.so + pc.z_at + i] = z;
    k = key_of(z);
  }
#if REDUCE_SUBGROUP
  k = subgroupMax(k);
  if (subgroupElect()) atomicMax(su[pc.so + C_ZMAX], k);
#else
  atomicMax(su[pc.so + C_ZMAX], k);
#endif
#elif SAMPLE_PASS == 2 || SAMPLE_PASS == 3
  const uint i = wg_index() * WG_SIZE + lid;
  const float zmax = zmax_of();
  if (isinf(zmax)) {  // uniform: the first token holding ±inf is the choice (pass 7)
#if SAMPLE_PASS == 2
    if (i < n && sf[pc.so + pc.z_at + i] == zmax) atomicMax(su[pc.so + C_FIRST], 0xFFFFFFFFu - i);
#endif
    return;
  }
#if SAMPLE_PASS == 2
  double w = 0.0LF;
  if (i < n) {
    w = exp_nonpos(double(sf[pc.so + pc.z_at + i]) - double(zmax));
    sd[(pc.so + pc.w_at) / 2u + i] = w;
  }
  if ((pc.flags & 1u) == 0u || (pc.flags & 4u) != 0u) return;  // uniform (top-k: pass 9 cuts over the k)
  const uint lvl = 0u;
  const bool mine = i < n;
#else
  const uint lvl = pc.level;
  derive(lvl);
  const bool mine = i < n && (dkey(i) >> (32u - 8u * lvl)) == s_prefix;
  const double w = mine ? sd[(pc.so + pc.w_at) / 2u + i] : 0.0LF;
#endif
  // this workgroup's masses per bin and part in shared memory, then its non-zero bins added to the histogram
  // (the z of a vocabulary crowd into a few top-byte bins: one global atomic per bin and workgroup, not per token)
  for (uint b = lid; b < 1024u; b += WG_SIZE) s_hist[b] = 0u;
  barrier();
  if (mine) {
    const uint64_t m = mass_of(w);
    if (m != 0ul) {
      const uint o = ((dkey(i) >> (24u - 8u * lvl)) & 0xFFu) * 4u;
      atomicAdd(s_hist[o], uint(m & 0x3FFFul));
      atomicAdd(s_hist[o + 1u], uint((m >> 14) & 0x3FFFul));
      atomicAdd(s_hist[o + 2u], uint((m >> 28) & 0x3FFFul));
      atomicAdd(s_hist[o + 3u], uint(m >> 42));
    }
  }
  barrier();
  for (uint b = lid; b < 1024u; b += WG_SIZE)
    if (s_hist[b] != 0u) atomicAdd(su[pc.so + pc.hist_at + lvl * 1024u + b], s_hist[b]);
#elif SAMPLE_PASS == 4
  if (isinf(zmax_of())) return;
  derive(4u);
  // key* = s_prefix; the tokens of equal z there each carry mass m*; top-p keeps those of rank r (index order)
  // with acc + r·m* < target: t_keep of them. All of them: C_IDX = every index.
  const uint ks = s_prefix;
  const uint64_t ms = mass_of(exp_nonpos(double(key_value(~ks)) - double(zmax_of())));
  const uint64_t group = bin_mass(3u, ks & 0xFFu);
  const uint64_t ties = ms == 0ul ? 0ul : group / ms;
  // t_keep = the smallest t with acc + t·m* >= target (the kept ranks are 0 .. t_keep − 1): from the f64 quotient,
  // then corrected by the exact comparisons the sampler makes
  const double gap = s_target - double(s_acc);
  uint64_t t_keep = ms == 0ul ? ties : uint64_t(max(0.0LF, ceil(gap / double(ms))));
  while (t_keep > 0ul && double(s_acc + (t_keep - 1ul) * ms) >= s_target) --t_keep;
  while (t_keep < ties && double(s_acc + t_keep * ms) < s_target) ++t_keep;
  if (lid == 0u) {
    su[pc.so + C_KEY] = ks;
    su[pc.so + C_IDX] = 0xFFFFFFFFu;
  }
  if (t_keep >= ties) return;  // uniform
  // Only some of the equal-z tokens: the t_keep-th of them in index order is the last kept (contiguous ranges).
  const uint per = (n + WG_SIZE - 1u) / WG_SIZE, b0 = min(n, lid * per), b1 = min(n, b0 + per);
  uint c = 0u;
  for (uint j = b0; j < b1; ++j) c += dkey(j) == ks ? 1u : 0u;
  const uint incl = scan32(c);
  uint before = incl - c;
  if (before < uint(t_keep) && uint(t_keep) <= incl)
    for (uint j = b0; j < b1; ++j)
      if (dkey(j) == ks && ++before == uint(t_keep)) su[pc.so + C_IDX] = j;
#elif SAMPLE_PASS == 5
  const uint g = wg_index(), i = g * WG_SIZE + lid;
  const uint c = i < n && kept(i) ? 1u : 0u;
  const uint incl = scan32(c);
  if (lid == WG_SIZE - 1u) {
    su[pc.so + pc.cntwg_at + g] = incl;
    atomicAdd(su[pc.so + C_CNT], incl);
  }
#elif SAMPLE_PASS == 6
  const uint g = wg_index(), i = g * WG_SIZE + lid;
  uint base = 0u;
  for (uint j = lid; j < g; j += WG_SIZE) base += su[pc.so + pc.cntwg_at + j];
  base = scan32(base);
  const uint before = s_u[WG_SIZE - 1u];
  barrier();
  const uint c = i < n && kept(i) ? 1u : 0u;
  const uint at = before + scan32(c) - c;
  if (c != 0u) {
    sd[(pc.so + pc.wc_at) / 2u + at] = sd[(pc.so + pc.w_at) / 2u + i];
    su[pc.so + pc.cidx_at + at] = i;
  }
#elif SAMPLE_PASS == 9
  if (isinf(zmax_of())) return;
  const uint k = pc.level, wo = (pc.so + pc.w_at) / 2u;
  const bool cut = (pc.flags & 1u) != 0u, mp = (pc.flags & 2u) != 0u;
  // a contiguous run of the k candidates per invocation, in order; masses summed exactly
  const uint per = (k + WG_SIZE - 1u) / WG_SIZE, j0 = min(k, lid * per), j1 = min(k, j0 + per);
  uint64_t m = 0ul;
  for (uint j = j0; j < j1; ++j) m += mass_of(sd[wo + cand_id(j)]);
  const uint64_t incl = scan64(m);
  const double target = double(pc.top_p) * double(s_scan[WG_SIZE - 1u]);
  // the sampler's sorted top-p: keep each while the mass before it is < target (the first always); then min-p
  uint c = 0u;
  uint64_t before = incl - m;
  for (uint j = j0; j < j1; ++j) {
    const double w = sd[wo + cand_id(j)];
    if ((!cut || j == 0u || double(before) < target) && (!mp || w >= double(pc.min_p))) ++c;
    before += mass_of(w);
  }
  uint at = scan32(c) - c;
  if (lid == WG_SIZE - 1u) su[pc.so + C_CNT] = at + c;
  before = incl - m;
  for (uint j = j0; j < j1; ++j) {
    const uint i = cand_id(j);
    const double w = sd[wo + i];
    if ((!cut || j == 0u || double(before) < target) && (!mp || w >= double(pc.min_p))) {
      sd[(pc.so + pc.wc_at) / 2u + at] = w;
      su[pc.so + pc.cidx_at + at] = i;
      ++at;
    }
    before += mass_of(w);
  }
#elif SAMPLE_PASS == 10
  const uint j = wg_index() * WG_SIZE + lid;
  if (j >= pc.ncand) return;
  const uint i = (j / pc.level) * pc.tile + su[pc.so + pc.idx1_at + j];
  sf[pc.so + pc.cval_at + j] = sf[pc.so + pc.z_at + i];
  su[pc.so + pc.corig_at + j] = i;
#elif SAMPLE_PASS == 7
  // block sums, each in order (the sampler's pick(): blocks of 64 weights): a workgroup stages 32 blocks of the
  // candidates' weights in shared memory with coalesced loads, then 32 invocations add one block each
  if (isinf(zmax_of())) return;
  const bool ident = (pc.flags & 7u) == 0u;  // no top-p, min-p or top-k: the vocabulary in index order
  const uint cnt = ident ? n : su[pc.so + C_CNT];
  const uint wv = ident ? (pc.so + pc.w_at) / 2u : (pc.so + pc.wc_at) / 2u;
  const uint b0 = wg_index() * 32u, nb = (cnt + SAMPLE_BLOCK - 1u) / SAMPLE_BLOCK;
  if (b0 >= nb) return;  // uniform
  const uint e0 = b0 * SAMPLE_BLOCK, e1 = min(cnt, e0 + 32u * SAMPLE_BLOCK);
  for (uint j = e0 + lid; j < e1; j += WG_SIZE) s_blk[j - e0] = sd[wv + j];
  barrier();
  if (lid < 32u && b0 + lid < nb) {
    precise double sum = 0.0LF;
    const uint a = lid * SAMPLE_BLOCK, e = min(e1 - e0, a + SAMPLE_BLOCK);
    for (uint j = a; j < e; ++j) sum += s_blk[j];
    sd[(pc.so + pc.bsum_at) / 2u + b0 + lid] = sum;
  }
#elif SAMPLE_PASS == 8
  draw_uniform();
  const double u = s_u01;
  if (isinf(zmax_of())) {
    if (lid == 0u) {
      const uint tok = 0xFFFFFFFFu - su[pc.so + C_FIRST];
      oi[pc.oo] = tok;
      if ((pc.flags & 16u) != 0u) seen[pc.seo + tok] += 1u;
    }
    return;
  }
  const bool ident = (pc.flags & 7u) == 0u;  // no top-p, min-p or top-k: the vocabulary in index order
  const uint cnt = ident ? n : su[pc.so + C_CNT];
  const uint wv = ident ? (pc.so + pc.w_at) / 2u : (pc.so + pc.wc_at) / 2u;
  const uint nb = (cnt + SAMPLE_BLOCK - 1u) / SAMPLE_BLOCK, bs = (pc.so + pc.bsum_at) / 2u;
  const double total = ordered_total(nb, bs, true);  // the running totals over the block sums
  if (lid == 0u) {
    s_target = u * total;  // r
    s_bin = 0xFFFFFFFFu;
  }
  memoryBarrierBuffer();
  barrier();
  // the first block whose running total passes r (the totals only grow: the blocks that do are a suffix)
  const double r = s_target;
  for (uint b = lid; b < nb; b += WG_SIZE)
    if (r < sd[bs + b]) {
      atomicMin(s_bin, b);
      break;
    }
  barrier();
  if (lid != 0u) return;
  int pick = -1;
  const uint b = s_bin;
  if (b < nb) {
    precise const double rr = r - (b > 0u ? sd[bs + b - 1u] : 0.0LF);
    const uint e = min(cnt, b * SAMPLE_BLOCK + SAMPLE_BLOCK);
    precise double sum = 0.0LF;
    for (uint j = b * SAMPLE_BLOCK; j < e; ++j) {
      sum += sd[wv + j];
      if (rr < sum) {
        pick = int(j);
        break;
      }
    }
    for (uint j = e; pick < 0 && j-- > b * SAMPLE_BLOCK;)
      if (sd[wv + j] > 0.0LF) pick = int(j);
  }
  for (uint j = cnt; pick < 0 && j-- > 0u;)
    if (sd[wv + j] > 0.0LF) pick = int(j);
  if (pick < 0) pick = 0;
  const uint tok = ident ? uint(pick) : su[pc.so + pc.cidx_at + uint(pick)];
  oi[pc.oo] = tok;
  if ((pc.flags & 16u) != 0u) seen[pc.seo + tok] += 1u;
#elif SAMPLE_PASS == 11
  // logprobs' record (kernels::logprobs; z = the raw logits, NaN → −inf, by pass 1 at temperature 1): m = z_max, the
  // total of exp(z − m) (passes 2 and 7, then the block sums in order: NaN where m is ±inf, as on the host), the
  // chosen token's z, and the top_n best tokens (pc.level; kidx from topk, value descending, lower index first)
  // with their z
  const float zmax = zmax_of();
  const uint nb = (n + SAMPLE_BLOCK - 1u) / SAMPLE_BLOCK, bs = (pc.so + pc.bsum_at) / 2u;
  double total = uint64BitsToDouble(0x7FF8000000000000ul);
  if (!isinf(zmax)) total = ordered_total(nb, bs, false);  // uniform
  if (lid == 0u) {
    const uint64_t tb = doubleBitsToUint64(total);
    oi[pc.oo] = floatBitsToUint(zmax);
    oi[pc.oo + 1u] = uint(tb);
    oi[pc.oo + 2u] = uint(tb >> 32);
    const uint c = su[pc.so + C_CHOSEN];
    oi[pc.oo + 3u] = c < n ? floatBitsToUint(sf[pc.so + pc.z_at + c]) : 0x7FC00000u;
  }
  const uint k = pc.level;
  for (uint j = lid; j < k; j += WG_SIZE) {
    const uint i = j < n ? cand_id(j) : 0xFFFFFFFFu;
    oi[pc.oo + 4u + j] = i;
    oi[pc.oo + 4u + k + j] = i < n ? floatBitsToUint(sf[pc.so + pc.z_at + i]) : 0u;
  }
#endif
}
