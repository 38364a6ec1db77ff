#version 460
#extension GL_GOOGLE_include_directive : require
// Sparse attention with sink (dsv4-architecture.md §3.3; the CPU loop of driver/model/dsv4_attention.cpp), one
// workgroup per (query row, block of ATT_HB heads, split of the key slots):
//   l_k = (q_h · K_k) · scale over the row's key slots (K_k = row idx[t, k] of [kv_a; kv_b]; −1 = masked),
//   p_k = e^(l_k − m) / (Σ_k e^(l_k − m) + e^(sink_h − m)),  o_h = Σ_k p_k K_k   (K == V).
// Online over tiles of ATT_KT keys: per head a running max m (starting at the sink) and denominator d (1 for a
// finite sink, else 0); a tile rescales the accumulators by e^(m_old − m_new). An all-masked row (d == 0) gives
// 0; an index ≥ kv_a rows + kv_b rows or < −1 gives NaN for the row (never read).
// pc.splits == 1: the workgroup owns all key slots and writes o. pc.splits > 1 (flash decoding): it owns slots
// [split · split_keys, +split_keys) and starts without the sink (m = −inf, d = 0); it writes its running max,
// denominator and unnormalised accumulator to the scratch xs, laid out as acc [(row·heads + h)·splits + split]
// [ATT_HD] followed by (m, d) pairs in the same order; attn_combine.comp then adds the sink and normalises.
// Work of a tile: (A) ATT_KT groups of WG_SIZE / ATT_KT invocations, one per key, form the ATT_HB dot products of
// their key with the heads' q (shared memory); (B) one invocation per head updates m, d and the tile's p;
// (C) every invocation owns ATT_OPT channels of all ATT_HB heads and adds p_k · K_k[c] (coalesced rows).
// ATT_QPREP = 1 (kernels::attn_shape::q_norm_rope; needs ATT_IROPE): q arrives before its per-head RMSNorm (no
// weight, eps pc.q_eps) and the RoPE of its last ATT_IROPE channels by the row's cos/sin; every workgroup applies
// both to its staged heads — rmsnorm.comp's RMS_ROPE operations in its order (strided squares, wg_sum, r = 1 /
// sqrt(mean + eps), y = q · r, rope_pair), so the values of rmsnorm_rope() then this kernel, one dependent dispatch
// fewer. (Split workgroups of one head block each redo it: a few hundred values.) ATT_QPREP = 2
// (kernels::attn_shape::q_rope): the RoPE alone (V4.1's q has no per-head norm) — rope.comp's operations on the
// staged heads, so the values of rope() then this kernel.
// Defines: ATT_HD (head_dim), ATT_HB (heads per workgroup), ATT_KT (keys per tile, also the granule of
// split_keys), ATT_OPT (= ceil(HD / WG)).
#include "common/base.glsl"

layout(push_constant) uniform attn_pc {
  uint rows, heads, keys, ka;
  uint kb, nhb, qoff, aoff;
  uint boff, ioff, soff, has_sink;
  uint ooff;
  float scale;
  uint splits, split_keys, xoff, csoff;
  float q_eps;  // ATT_QPREP
} pc;
layout(std430, binding = 0) readonly buffer Q { float qs[]; };
layout(std430, binding = 1) readonly buffer KA { float kva[]; };
layout(std430, binding = 2) readonly buffer KB { float kvb[]; };
layout(std430, binding = 3) readonly buffer I { int idx[]; };
layout(std430, binding = 4) readonly buffer S { float sinks[]; };
layout(std430, binding = 5) writeonly buffer O { float os[]; };
layout(std430, binding = 6) writeonly buffer X { float xs[]; };
#ifndef ATT_IROPE
#define ATT_IROPE 0
#endif
#if ATT_IROPE
layout(std430, binding = 7) readonly buffer CS { float cs_rows[]; };
#include "common/att_irope.glsl"
#endif
#ifndef ATT_QPREP
#define ATT_QPREP 0
#endif
#if ATT_QPREP
#if !ATT_IROPE
#error "ATT_QPREP rotates q by the rows' cos/sin of ATT_IROPE"
#endif
#if ATT_QPREP == 1
#include "common/reduce.glsl"
#endif
#endif

const uint G = WG_SIZE / ATT_KT;  // invocations per key in (A)
const int MASKED = -1, INVALID = -2;

shared float q_s[ATT_HB * ATT_HD];
shared float red[ATT_HB * WG_SIZE];
shared float lg[ATT_HB * ATT_KT];
shared int kid[ATT_KT];
shared float m_s[ATT_HB], d_s[ATT_HB], al_s[ATT_HB];

// max that never lets a NaN win (as the CPU's `a > m ? a : m`)
float max_nf(float a, float b) { return a > b ? a : b; }

float key_at(int r, uint c) {
  return uint(r) < pc.ka ? kva[pc.aoff + uint(r) * ATT_HD + c] : kvb[pc.boff + (uint(r) - pc.ka) * ATT_HD + c];
}

void main() {
  const uint wg = wg_index();
  if (wg >= pc.rows * pc.nhb * pc.splits) return;  // uniform over the workgroup
  const uint split = wg % pc.splits, rb = wg / pc.splits;
  const uint row = rb / pc.nhb, h0 = (rb % pc.nhb) * ATT_HB, lid = gl_LocalInvocationID.x;
  const bool partial = pc.splits > 1u;
  const uint kbeg = split * pc.split_keys, kend = min(pc.keys, kbeg + pc.split_keys);
  for (uint i = lid; i < ATT_HB * ATT_HD; i += WG_SIZE) {
    const uint h = h0 + i / ATT_HD;
    q_s[i] = h < pc.heads ? qs[pc.qoff + (row * pc.heads + h) * ATT_HD + i % ATT_HD] : 0.0;
  }
#if ATT_QPREP
  barrier();  // q_s
  {
    ACC r[ATT_HB];
#if ATT_QPREP == 2
    [[unroll]] for (uint h = 0u; h < ATT_HB; ++h) r[h] = ACC(1);  // no norm: y = q exactly
#elif REDUCE_SUBGROUP
    // every head's sum in one pass: wg_sum's operations (the subgroup's sum, then the subgroups' in order) per
    // head, with one barrier for all of them; the partials in reduce.glsl's red_acc ([head][subgroup]: ATT_HB ·
    // subgroups ≤ WG_SIZE for subgroups of ≥ ATT_HB invocations) — no shared memory of its own, which would cost
    // the split shapes' occupancy
    [[unroll]] for (uint h = 0u; h < ATT_HB; ++h) {
      precise ACC ss = ACC(0);
      for (uint i = lid; i < ATT_HD; i += WG_SIZE) {
        const ACC v = ACC(q_s[h * ATT_HD + i]);
        ss += v * v;
      }
      ss = acc_subgroup_sum(ss);
      if (subgroupElect()) red_acc[h * gl_NumSubgroups + gl_SubgroupID] = ss;
    }
    barrier();
    [[unroll]] for (uint h = 0u; h < ATT_HB; ++h) {
      ACC t = ACC(0);
      for (uint i = 0u; i < gl_NumSubgroups; ++i) t += red_acc[h * gl_NumSubgroups + i];
      r[h] = ACC(1) / sqrt(t / ACC(ATT_HD) + ACC(pc.q_eps));
    }
#else
    [[unroll]] for (uint h = 0u; h < ATT_HB; ++h) {
      precise ACC ss = ACC(0);
      for (uint i = lid; i < ATT_HD; i += WG_SIZE) {
        const ACC v = ACC(q_s[h * ATT_HD + i]);
        ss += v * v;
      }
      ss = wg_sum(ss);
      r[h] = ACC(1) / sqrt(ss / ACC(ATT_HD) + ACC(pc.q_eps));
    }
#endif
    // the new values in registers, written back after a barrier: a rope pair reads both channels' old values
    const uint t0 = ATT_HD - ATT_IROPE;
    float nv[ATT_HB][ATT_OPT];
    [[unroll]] for (uint h = 0u; h < ATT_HB; ++h)
      [[unroll]] for (uint i = 0u; i < ATT_OPT; ++i) {
        const uint c = lid + i * WG_SIZE;
        nv[h][i] = 0.0;
        if (c >= ATT_HD) continue;
        const float y = float(ACC(q_s[h * ATT_HD + c]) * r[h]);
        nv[h][i] = y;
        if (c < t0) continue;
        const uint j = c - t0, cb = pc.csoff + row * ATT_IROPE + (j & ~1u);
        const float py = float(ACC(q_s[h * ATT_HD + (c ^ 1u)]) * r[h]);
        nv[h][i] = (j & 1u) == 0u ? rope_pair(y, py, cs_rows[cb], cs_rows[cb + 1u]).x
                                  : rope_pair(py, y, cs_rows[cb], cs_rows[cb + 1u]).y;
      }
    barrier();
    [[unroll]] for (uint h = 0u; h < ATT_HB; ++h)
      [[unroll]] for (uint i = 0u; i < ATT_OPT; ++i) {
        const uint c = lid + i * WG_SIZE;
        if (c < ATT_HD) q_s[h * ATT_HD + c] = nv[h][i];
      }
  }
#endif
  if (lid < ATT_HB) {
    const uint h = h0 + lid;
    const float sink = !partial && pc.has_sink != 0u && h < pc.heads ? sinks[pc.soff + h] : -F32_INF;
    m_s[lid] = sink;
    d_s[lid] = sink > -F32_INF ? 1.0 : 0.0;
  }
  float acc[ATT_HB][ATT_OPT];
  [[unroll]] for (uint h = 0u; h < ATT_HB; ++h)
    [[unroll]] for (uint i = 0u; i < ATT_OPT; ++i) acc[h][i] = 0.0;
  const uint total = pc.ka + pc.kb, ib = pc.ioff + row * pc.keys;
  const uint kk = lid / G, lane = lid % G;
  barrier();  // q_s, m_s, d_s (also read at the end when there are no keys)

  for (uint k0 = kbeg; k0 < kend; k0 += ATT_KT) {
    if (lid < ATT_KT) {
      const int r = k0 + lid < kend ? idx[ib + k0 + lid] : MASKED;
      kid[lid] = r == MASKED ? MASKED : (r < 0 || uint(r) >= total) ? INVALID : r;
    }
    barrier();
    // (A) partial dot products of key kk with the ATT_HB heads over channels lane, lane + G, ...
    {
      float part[ATT_HB];
      [[unroll]] for (uint h = 0u; h < ATT_HB; ++h) part[h] = 0.0;
      const int r = kid[kk];
      if (r >= 0) {
        [[unroll]] for (uint j = 0u; j < (ATT_HD + G - 1u) / G; ++j) {  // unrolled: the key loads overlap
          const uint c = lane + j * G;
          if (c < ATT_HD) {
            const float kv = key_at(r, c);
            [[unroll]] for (uint h = 0u; h < ATT_HB; ++h) part[h] = fma(q_s[h * ATT_HD + c], kv, part[h]);
          }
        }
      }
      [[unroll]] for (uint h = 0u; h < ATT_HB; ++h) red[h * WG_SIZE + lid] = part[h];
    }
    barrier();
    if (lid < ATT_HB * ATT_KT) {  // logit of (head lid / KT, key lid % KT), partials summed in lane order
      const uint h = lid / ATT_KT, k = lid % ATT_KT;
      const int r = kid[k];
      float s = 0.0;
      [[unroll]] for (uint j = 0u; j < G; ++j) s += red[h * WG_SIZE + k * G + j];
      lg[lid] = r >= 0 ? s * pc.scale : r == MASKED ? -F32_INF : uintBitsToFloat(0x7FC00000u);
    }
    barrier();
    // (B) running max, rescale factor, the tile's unnormalised p (in place of the logits) and the denominator
    if (lid < ATT_HB) {
      const float m_old = m_s[lid];
      float m = m_old;
      [[unroll]] for (uint k = 0u; k < ATT_KT; ++k) m = max_nf(lg[lid * ATT_KT + k], m);
      float d = d_s[lid];
      if (m > -F32_INF) {
        const float al = m_old > -F32_INF ? exp(m_old - m) : 0.0;
        d *= al;
        [[unroll]] for (uint k = 0u; k < ATT_KT; ++k) {
          const float l = lg[lid * ATT_KT + k];
          const float e = l > -F32_INF ? exp(l - m) : (isnan(l) ? l : 0.0);
          lg[lid * ATT_KT + k] = e;
          d += e;
        }
        al_s[lid] = al;
      } else {  // nothing finite yet (no sink, masked keys): nothing to add
        for (uint k = 0u; k < ATT_KT; ++k) {
          const float l = lg[lid * ATT_KT + k];
          lg[lid * ATT_KT + k] = isnan(l) ? l : 0.0;
          d += isnan(l) ? l : 0.0;
        }
        al_s[lid] = 1.0;
      }
      m_s[lid] = m;
      d_s[lid] = d;
    }
    barrier();
    // (C) acc = acc · al + Σ_k p_k K_k over this invocation's channels
    [[unroll]] for (uint h = 0u; h < ATT_HB; ++h) {
      const float al = al_s[h];
      [[unroll]] for (uint i = 0u; i < ATT_OPT; ++i) acc[h][i] *= al;
    }
    [[unroll]] for (uint k = 0u; k < ATT_KT; ++k) {
      const int r = kid[k];
      if (r == MASKED) continue;
      [[unroll]] for (uint i = 0u; i < ATT_OPT; ++i) {
        const uint c = lid + i * WG_SIZE;
        if (c < ATT_HD) {
          const float kv = r >= 0 ? key_at(r, c) : 0.0;
          [[unroll]] for (uint h = 0u; h < ATT_HB; ++h) acc[h][i] = fma(lg[h * ATT_KT + k], kv, acc[h][i]);
        }
      }
    }
    barrier();
  }
  if (partial) {  // the split's state for attn_combine.comp
    const uint x0 = (row * pc.heads + h0) * pc.splits + split;  // (row, head h0 + h, split) = x0 + h · splits
    [[unroll]] for (uint h = 0u; h < ATT_HB; ++h) {
      if (h0 + h >= pc.heads) break;
      [[unroll]] for (uint i = 0u; i < ATT_OPT; ++i) {
        const uint c = lid + i * WG_SIZE;
        if (c < ATT_HD) xs[pc.xoff + (x0 + h * pc.splits) * ATT_HD + c] = acc[h][i];
      }
    }
    if (lid < ATT_HB && h0 + lid < pc.heads) {
      const uint md = pc.xoff + pc.rows * pc.heads * pc.splits * ATT_HD + 2u * (x0 + lid * pc.splits);
      xs[md] = m_s[lid];
      xs[md + 1u] = d_s[lid];
    }
    return;
  }
#if ATT_IROPE
  // the output through q_s (no longer read: every invocation passed the last tile's barriers), so that the
  // inverse rope can pair each channel with its neighbour
  barrier();
#endif
  [[unroll]] for (uint h = 0u; h < ATT_HB; ++h) {
    if (h0 + h >= pc.heads) break;
    const float d = d_s[h];
    const float inv = d > 0.0 ? 1.0 / d : 0.0;
    const bool bad = isnan(d);
    [[unroll]] for (uint i = 0u; i < ATT_OPT; ++i) {
      const uint c = lid + i * WG_SIZE;
#if ATT_IROPE
      if (c < ATT_HD) q_s[h * ATT_HD + c] = bad ? d : acc[h][i] * inv;
#else
      if (c < ATT_HD)
        os[pc.ooff + (row * pc.heads + h0 + h) * ATT_HD + c] = bad ? d : acc[h][i] * inv;
#endif
    }
  }
#if ATT_IROPE
  barrier();
  [[unroll]] for (uint h = 0u; h < ATT_HB; ++h) {
    if (h0 + h >= pc.heads) break;
    [[unroll]] for (uint i = 0u; i < ATT_OPT; ++i) {
      const uint c = lid + i * WG_SIZE;
      if (c < ATT_HD)
        os[pc.ooff + (row * pc.heads + h0 + h) * ATT_HD + c] =
            att_irope(q_s[h * ATT_HD + c], q_s[h * ATT_HD + (c ^ 1u)], c, row, pc.csoff);
    }
  }
#endif
}
