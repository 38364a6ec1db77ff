#version 460
#extension GL_GOOGLE_include_directive : require
// Exact top-k per row (ops/topk.hpp tie rule), one workgroup per row:
//   composite key (K(value), ~index) with K order-preserving, NaN → −inf, −0 → +0; larger composite = earlier.
// 1. radix select over the 64-bit composite, 8 bits per pass: the kk-th largest composite T (kk = min(k, n)). A
//    pass's digit is found in parallel (suffix sums of the 256-bin histogram, then the one bin where they reach the
//    remainder); when that bin's elements are all wanted, the passes stop (the lower digits stay 0: every element
//    with the chosen prefix is ≥ T) — typically after 2–3 of the 8 passes for distinct scores;
// 2. exactly kk elements have a composite ≥ T (indices make composites unique): collect them in shared memory;
// 3. bitonic sort of the candidates, descending; write their indices (slots past kk get 0xFFFFFFFF).
// by_position != 0 (callers that need the set, not its order: the indexers): the selected indices in ascending
// order — with k >= n every index (no passes), else step 2 as a compaction (a scan of per-invocation counts) and no
// sort.
// Defines: TOPK_MAX (shared capacity, a power of two). Workgroups of at least 256 invocations, one per bin (the host
// asserts it: kernels.cpp).
#include "common/base.glsl"

layout(push_constant) uniform tk_pc {
  uint rows, n, k, xoff, ooff, x_stride, o_stride, by_position;
} pc;
layout(std430, binding = 0) readonly buffer S { float sc[]; };
layout(std430, binding = 1) writeonly buffer O { uint oi[]; };

shared uint hist[256], suffix[256], scan_s[WG_SIZE];
shared uint sel_hi, sel_lo, sel_rem, cand_n;
shared bool sel_done;
shared uint cand_hi[TOPK_MAX], cand_lo[TOPK_MAX];

uint key_of(float v) {
  uint u = isnan(v) ? 0xFF800000u : floatBitsToUint(v);
  if ((u & 0x7FFFFFFFu) == 0u) u = 0u;
  return (u & 0x80000000u) != 0u ? ~u : (u | 0x80000000u);
}

// Whether entry i (score v) is among the kk selected: its composite is at least the threshold (th, tl).
bool selected(float v, uint i, uint th, uint tl) {
  const uint h = key_of(v), l = ~i;
  return h > th || (h == th && l >= tl);
}

void main() {
  const uint row = wg_index();
  if (row >= pc.rows) return;  // uniform over the workgroup
  const uint lid = gl_LocalInvocationID.x, base = pc.xoff + row * pc.x_stride, ob = pc.ooff + row * pc.o_stride;
  const uint kk = min(pc.k, pc.n);
  if (pc.by_position != 0u && kk == pc.n) {
    // Every entry is selected and the caller takes them in index order: no selection, no sort.
    for (uint i = lid; i < pc.k; i += WG_SIZE) oi[ob + i] = i < kk ? i : 0xFFFFFFFFu;
    return;  // uniform over the workgroup
  }
  if (lid == 0u) {
    sel_hi = 0u;
    sel_lo = 0u;
    sel_rem = kk;
    cand_n = 0u;
    sel_done = false;
  }
  barrier();
  if (kk > 0u) {
    for (uint pass = 0u; pass < 8u; ++pass) {
      const bool hi_word = pass < 4u;
      const uint shift = 24u - 8u * (pass & 3u);
      const uint fixd = shift == 24u ? 0u : ~0u << (shift + 8u);  // bits already chosen in this word
      const uint mh = hi_word ? fixd : ~0u, ml = hi_word ? 0u : fixd;
      for (uint i = lid; i < 256u; i += WG_SIZE) hist[i] = 0u;
      barrier();
      const uint ph = sel_hi, pl = sel_lo;
      for (uint i = lid; i < pc.n; i += WG_SIZE) {
        const uint h = key_of(sc[base + i]), l = ~i;
        if ((h & mh) == (ph & mh) && (l & ml) == (pl & ml)) atomicAdd(hist[((hi_word ? h : l) >> shift) & 0xFFu], 1u);
      }
      barrier();
      // S(d) = Σ_{e ≥ d} hist[e] as an inclusive prefix sum over position p = 255 − d; the digit is
      // the largest d with S(d) ≥ rem, i.e. the one position where the prefix first reaches rem (the walk from bin
      // 255 down that stops there), and cum = S(d + 1) the elements of higher digits.
      const uint rem = sel_rem;
      uint v = lid < 256u ? hist[255u - lid] : 0u;
#if REDUCE_SUBGROUP
      // subgroup inclusive sums, then the totals of the subgroups before (one barrier instead of eight pairs)
      v = subgroupInclusiveAdd(v);
      if (gl_SubgroupInvocationID == gl_SubgroupSize - 1u) scan_s[gl_SubgroupID] = v;
      barrier();
      for (uint sg = 0u; sg < gl_SubgroupID; ++sg) v += scan_s[sg];
#else
      for (uint off = 1u; off < 256u; off <<= 1) {
        if (lid < 256u) suffix[lid] = v;
        barrier();
        if (lid < 256u && lid >= off) v += suffix[lid - off];
        barrier();
      }
#endif
      if (lid < 256u) suffix[lid] = v;
      barrier();
      if (lid < 256u) {
        const uint cum = lid == 0u ? 0u : suffix[lid - 1u], d = 255u - lid;
        if (v >= rem && cum < rem) {
          sel_rem = rem - cum;
          if (hi_word)
            sel_hi |= d << shift;
          else
            sel_lo |= d << shift;
          sel_done = hist[d] == rem - cum;  // every element of the bin is wanted: the lower digits can stay 0
        }
      }
      barrier();
      if (sel_done) break;  // uniform (shared, after the barrier)
    }
    const uint th = sel_hi, tl = sel_lo;
    if (pc.by_position != 0u) {
      // The kk selected indices in ascending order (no sort): each invocation counts the selected entries of its
      // contiguous range, an exclusive scan of the counts gives where its indices go.
      const uint per = (pc.n + WG_SIZE - 1u) / WG_SIZE, i0 = min(lid * per, pc.n), i1 = min(i0 + per, pc.n);
      uint cnt = 0u;
      for (uint i = i0; i < i1; ++i)
        if (selected(sc[base + i], i, th, tl)) ++cnt;
#if REDUCE_SUBGROUP
      const uint incl = subgroupInclusiveAdd(cnt);
      if (gl_SubgroupInvocationID == gl_SubgroupSize - 1u) scan_s[gl_SubgroupID] = incl;
      barrier();
      uint o = incl - cnt;
      for (uint sg = 0u; sg < gl_SubgroupID; ++sg) o += scan_s[sg];
#else
      uint v = cnt;
      for (uint off = 1u; off < WG_SIZE; off <<= 1) {
        scan_s[lid] = v;
        barrier();
        if (lid >= off) v += scan_s[lid - off];
        barrier();
      }
      uint o = v - cnt;
#endif
      for (uint i = i0; i < i1; ++i)
        if (selected(sc[base + i], i, th, tl)) oi[ob + o++] = i;
      return;  // kk < n here, so kk = k: every slot written
    }
    for (uint i = lid; i < pc.n; i += WG_SIZE) {
      const uint h = key_of(sc[base + i]), l = ~i;
      if (h > th || (h == th && l >= tl)) {
        const uint slot = atomicAdd(cand_n, 1u);
        cand_hi[slot] = h;
        cand_lo[slot] = l;
      }
    }
    barrier();
    uint P = 1u;
    while (P < kk) P <<= 1;
    for (uint i = kk + lid; i < P; i += WG_SIZE) {
      cand_hi[i] = 0u;  // below every real key (K(−inf) = 0x007FFFFF)
      cand_lo[i] = 0u;
    }
    barrier();
    for (uint size = 2u; size <= P; size <<= 1)
      for (uint stride = size >> 1; stride > 0u; stride >>= 1) {
        for (uint i = lid; i < P; i += WG_SIZE) {
          const uint j = i ^ stride;
          if (j > i) {
            const bool desc = (i & size) == 0u;
            const uint ah = cand_hi[i], al = cand_lo[i], bh = cand_hi[j], bl = cand_lo[j];
            const bool a_less = ah < bh || (ah == bh && al < bl);
            if (a_less == desc) {
              cand_hi[i] = bh;
              cand_lo[i] = bl;
              cand_hi[j] = ah;
              cand_lo[j] = al;
            }
          }
        }
        barrier();
      }
  }
  for (uint i = lid; i < pc.k; i += WG_SIZE) oi[ob + i] = i < kk ? ~cand_lo[i] : 0xFFFFFFFFu;
}
