#version 460
#extension GL_GOOGLE_include_directive : require
// Sparse attention with sink on f16 tiles (kernels::sparse_attention in the f16 GEMM modes, for shapes of more than
// one row: prefill chunks; never split over keys). The contract is attn_sparse.comp's; the arithmetic differs: q and
// the keys are rounded once to f16 (saturating), the products summed in f32, the probabilities rounded to f16.
// One workgroup of 256 invocations per (query row, block of 32 heads): the row's key slots are walked in tiles of
// 16 keys, each tile's rows gathered into shared memory once for the 32 heads. Two passes, so that no accumulator
// is ever rescaled: (1) the logits l = (q_h · K_k) · scale of every tile → per head the running max m and
// denominator d, starting at the sink (m = sink, d = 1; no sink: −inf, 0); (2) the logits again,
// p = e^(l − m) / d rounded to f16, o_h += Σ_k p_k K_k (K == V). o is final after pass 2 (d folded into p): an
// all-masked row gives 0, an index ≥ kv_a rows + kv_b rows (or < −1) NaN for the row and head. A tile of masked
// slots only is skipped; the next tile's key rows are loaded into registers while this one is computed.
// ATT_COOP 1: the products on the tensor cores (VK_NV_cooperative_matrix, 16 × 16 × 16 f16, f32 sums; 8 subgroups
// of 32). Subgroup j owns head block hb = j % 2 (16 heads) and channel quarter qc = j / 2 (ATT_HD / 4 channels):
// it holds q of that block and quarter as ATT_QN matrices in registers (staged once through shared memory), forms
// the 16 × 16 logit partial over its quarter (the 4 quarters' partials summed in order through shared memory), and
// accumulates the ATT_QN output blocks of its quarter for its head block. ATT_COOP 2: the same roundings in plain
// GLSL with q in shared memory (each invocation sums two logits over every channel in order and owns
// 32·ATT_HD/256 outputs), so that devices without cooperative matrices (lavapipe in CI) run this mode's gathers,
// masking and stores. The output goes to the stores (and the fused inverse rope) through shared memory, a quarter
// of the block (16 heads × ATT_HD / 2 channels) at a time.
// Defines: ATT_HD (head_dim, a multiple of 64, ≤ 512), ATT_QN (= ATT_HD / 64), ATT_IROPE, ATT_COOP. WG_SIZE = 256.
#extension GL_EXT_shader_explicit_arithmetic_types_float16 : require
#if ATT_COOP == 1
#extension GL_NV_cooperative_matrix : require
#extension GL_KHR_memory_scope_semantics : require
#extension GL_KHR_shader_subgroup_basic : require
#endif
#include "common/base.glsl"

layout(push_constant) uniform attn_pc {
  uint rows, heads, keys, ka;
  uint kb, nhb, qoff, aoff;
  uint boff, ioff, soff, has_sink;
  uint ooff;
  float scale;
  uint splits, split_keys, xoff, csoff;
} pc;
layout(std430, binding = 0) readonly buffer Q { float qs[]; };
layout(std430, binding = 1) readonly buffer KA { float kva[]; };
layout(std430, binding = 2) readonly buffer KB { float kvb[]; };
// the same buffers four floats at a time (where the offsets allow: aligned4)
layout(std430, binding = 0) readonly buffer Q4 { vec4 qs4[]; };
layout(std430, binding = 1) readonly buffer KA4 { vec4 kva4[]; };
layout(std430, binding = 2) readonly buffer KB4 { vec4 kvb4[]; };
layout(std430, binding = 3) readonly buffer I { int idx[]; };
layout(std430, binding = 4) readonly buffer S { float sinks[]; };
layout(std430, binding = 5) writeonly buffer O { float os[]; };
#if ATT_IROPE
layout(std430, binding = 7) readonly buffer CS { float cs_rows[]; };
#include "common/att_irope.glsl"
#endif

#define HB 32u               // heads per workgroup (two 16-row blocks)
#define KT 16u               // keys per tile
#define HDP (ATT_HD + 8u)    // row stride of the key (and q) tiles in halves (16-byte multiple, rows across banks)
#define KW (KT * HDP / 8u)   // uvec4 words of the key tile: also 16 heads of q, or 16 heads × ATT_HD / 2 floats of o
#define PP 24u               // row stride of the p tile in halves
#define QC (ATT_HD / 4u)     // channels of a quarter
const int MASKED = -1, INVALID = -2;

// The key tile [KT, HDP) halves at word 0 (8 halves per word); ATT_COOP 2: q [HB, HDP) halves after it.
#if ATT_COOP == 1
shared uvec4 tl[KW];
#else
shared uvec4 tl[KW + HB * HDP / 8u];
#define QH (KW * 8u)  // first half (f16) of q
#endif
shared float16_t ph[HB * PP];  // p [head, key] of the tile
shared float lg[HB * KT];      // logits [head, key] of the tile
#if ATT_COOP == 1
shared float sp[4u * HB * KT];  // the logit partials [quarter, head block, 16 × 16]
#endif
shared int kid[KT];
shared float m_s[HB], d_s[HB];

// Four values rounded to f16 with saturation (±65504, never ±inf) into halves [i, i + 4) of the tiles (i % 4 == 0).
void put4(uint i, vec4 v) {
  const uvec2 w = uvec2(packFloat2x16(clamp(f16vec2(v.xy), f16vec2(-65504.0), f16vec2(65504.0))),
                        packFloat2x16(clamp(f16vec2(v.zw), f16vec2(-65504.0), f16vec2(65504.0))));
  if ((i & 4u) == 0u) tl[i >> 3u].xy = w;
  else tl[i >> 3u].zw = w;
}
float half_at(uint i) { return float(unpackFloat2x16(tl[i >> 3u][(i >> 1u) & 3u])[i & 1u]); }
float max_nf(float a, float b) { return a > b ? a : b; }  // a NaN never wins (the CPU's `a > m ? a : m`)

// Four consecutive floats of buffer b (0 q, 1 kv_a, 2 kv_b) from float index i (i % 4 == 0 when aligned4).
vec4 load4(uint b, uint i, bool aligned4) {
  if (aligned4) return b == 0u ? qs4[i >> 2u] : b == 1u ? kva4[i >> 2u] : kvb4[i >> 2u];
  if (b == 0u) return vec4(qs[i], qs[i + 1u], qs[i + 2u], qs[i + 3u]);
  if (b == 1u) return vec4(kva[i], kva[i + 1u], kva[i + 2u], kva[i + 3u]);
  return vec4(kvb[i], kvb[i + 1u], kvb[i + 2u], kvb[i + 3u]);
}

// q of heads [h0 + hfirst, + n) of the row as f16 rows of HDP halves from half index `at` (heads past the last: zeros).
void stage_q(uint row, uint h0, uint hfirst, uint n, uint at, uint lid) {
  for (uint i = lid; i < n * ATT_HD / 4u; i += WG_SIZE) {
    const uint h = i / (ATT_HD / 4u), c = (i % (ATT_HD / 4u)) * 4u, head = h0 + hfirst + h;
    const uint b = pc.qoff + (row * pc.heads + head) * ATT_HD + c;
    put4(at + h * HDP + c, head < pc.heads ? load4(0u, b, (pc.qoff & 3u) == 0u) : vec4(0.0));
  }
}

#define NI ((KT * ATT_HD / 4u + 255u) / 256u)  // four-float items of a key tile per invocation
// The loads of the tile of key slots [k0, k0 + KT) into registers (masked and invalid slots: zeros); rid: slot
// k0 + lid's id (lid < KT).
void load_keys(uint k0, uint ib, uint lid, out vec4 v[NI], out int rid) {
  const uint total = pc.ka + pc.kb;
  const bool al = ((pc.aoff | pc.boff) & 3u) == 0u;
  rid = lid < KT && k0 + lid < pc.keys ? idx[ib + k0 + lid] : MASKED;
  [[unroll]] for (uint j = 0u; j < NI; ++j) {
    const uint i = lid + 256u * j, k = i / (ATT_HD / 4u), c = (i % (ATT_HD / 4u)) * 4u;
    v[j] = vec4(0.0);
    if (i < KT * ATT_HD / 4u) {
      const int r = k0 + k < pc.keys ? idx[ib + k0 + k] : MASKED;
      if (r >= 0 && uint(r) < total)
        v[j] = uint(r) < pc.ka ? load4(1u, pc.aoff + uint(r) * ATT_HD + c, al)
                               : load4(2u, pc.boff + (uint(r) - pc.ka) * ATT_HD + c, al);
    }
  }
}
// The loaded tile into shared memory (key rows as f16, ids as MASKED / INVALID / row).
void store_keys(uint lid, vec4 v[NI], int rid) {
  if (lid < KT) kid[lid] = rid == MASKED ? MASKED : (rid < 0 || uint(rid) >= pc.ka + pc.kb) ? INVALID : rid;
  [[unroll]] for (uint j = 0u; j < NI; ++j) {
    const uint i = lid + 256u * j;
    if (i < KT * ATT_HD / 4u) put4((i / (ATT_HD / 4u)) * HDP + (i % (ATT_HD / 4u)) * 4u, v[j]);
  }
}

#if ATT_COOP == 1
#define ACC_T fcoopmatNV<32, gl_ScopeSubgroup, 16, 16>
#define HALF_T fcoopmatNV<16, gl_ScopeSubgroup, 16, 16>
#if ATT_QN == 1
#define REP_N(M) M(0)
#elif ATT_QN == 2
#define REP_N(M) M(0) M(1)
#elif ATT_QN == 3
#define REP_N(M) M(0) M(1) M(2)
#elif ATT_QN == 4
#define REP_N(M) M(0) M(1) M(2) M(3)
#elif ATT_QN == 5
#define REP_N(M) M(0) M(1) M(2) M(3) M(4)
#elif ATT_QN == 6
#define REP_N(M) M(0) M(1) M(2) M(3) M(4) M(5)
#elif ATT_QN == 7
#define REP_N(M) M(0) M(1) M(2) M(3) M(4) M(5) M(6)
#elif ATT_QN == 8
#define REP_N(M) M(0) M(1) M(2) M(3) M(4) M(5) M(6) M(7)
#else
#error "attn_tc.comp: unsupported head_dim"
#endif
// block j of this subgroup's quarter: channels QC · qc + 16 j
#define Q_DECL(j) HALF_T qf##j;
#define Q_LOAD(j) coopMatLoadNV(qf##j, tl, (QC * qc + 16u * j) / 8u, HDP / 8u, false);
#define S_MMA(j)                                                                                \
  {                                                                                             \
    HALF_T b;                                                                                   \
    coopMatLoadNV(b, tl, (QC * qc + 16u * j) / 8u, HDP / 8u, true); /* Kᵀ: (channel, key) */   \
    s = coopMatMulAddNV(qf##j, b, s);                                                           \
  }
#define O_DECL(j) ACC_T oacc##j = ACC_T(0.0);
#define O_MMA(j)                                                                                \
  {                                                                                             \
    HALF_T b;                                                                                   \
    coopMatLoadNV(b, tl, (QC * qc + 16u * j) / 8u, HDP / 8u, false); /* V [key, channel] */    \
    oacc##j = coopMatMulAddNV(pm, b, oacc##j);                                                  \
  }
// into the output quarter staged at words [0, KW): [16 heads, ATT_HD / 2 floats] of channel half hc2
#define O_STORE(j) coopMatStoreNV(oacc##j, tl, (QC * qc + 16u * j - hc2 * (ATT_HD / 2u)) / 4u, ATT_HD / 8u, false);
#endif

void main() {
  const uint wg = wg_index();
  if (wg >= pc.rows * pc.nhb) return;  // uniform over the workgroup
  const uint row = wg / pc.nhb, h0 = (wg % pc.nhb) * HB, lid = gl_LocalInvocationID.x;
  const uint ib = pc.ioff + row * pc.keys;
  if (lid < HB) {
    const float sink = pc.has_sink != 0u && h0 + lid < pc.heads ? sinks[pc.soff + h0 + lid] : -F32_INF;
    m_s[lid] = sink;
    d_s[lid] = sink > -F32_INF ? 1.0 : 0.0;
  }
#if ATT_COOP == 1
  const uint sg = gl_SubgroupID, hb = sg & 1u, qc = sg >> 1u;
  REP_N(Q_DECL)
  [[unroll]] for (uint r = 0u; r < 2u; ++r) {  // q of head block r through the key tile's space
    barrier();
    stage_q(row, h0, 16u * r, 16u, 0u, lid);
    barrier();
    if (hb == r) { REP_N(Q_LOAD) }
  }
  REP_N(O_DECL)
#else
  stage_q(row, h0, 0u, HB, QH, lid);
  float oacc[HB * ATT_HD / 256u];  // outputs lid + 256·i: head (lid + 256·i) / ATT_HD, channel % ATT_HD
  [[unroll]] for (uint i = 0u; i < HB * ATT_HD / 256u; ++i) oacc[i] = 0.0;
#endif
  // Tiles it < nt: pass 1 (max and denominator per head, online over the tiles: attn_sparse.comp's (B), one
  // invocation per head); nt ≤ it < 2·nt: pass 2 (p = e^(l − m) / d in f16, o += P · V).
  const uint nt = (pc.keys + KT - 1u) / KT;
  vec4 kv[NI];
  int rid;
  if (nt > 0u) load_keys(0u, ib, lid, kv, rid);
  for (uint it = 0u; it < 2u * nt; ++it) {
    barrier();  // the tile before is consumed (key tile, ids, logits, p; q's staging), max and denominator written
    store_keys(lid, kv, rid);
    barrier();
    if (it + 1u < 2u * nt) load_keys(((it + 1u) % nt) * KT, ib, lid, kv, rid);
    bool live = false;
    [[unroll]] for (uint k = 0u; k < KT; ++k) live = live || kid[k] != MASKED;
    if (!live) continue;  // uniform: every invocation read the same ids
    // the tile's logits [head, key] into lg: scale applied, masked −inf, invalid NaN
#if ATT_COOP == 1
    {
      ACC_T s = ACC_T(0.0);
      REP_N(S_MMA)
      coopMatStoreNV(s, sp, (qc * 2u + hb) * 256u, KT, false);
    }
    barrier();
#endif
    [[unroll]] for (uint u = 0u; u < 2u; ++u) {
      const uint e = lid + 256u * u, head = e / KT, k = e % KT;
#if ATT_COOP == 1
      float v = 0.0;
      [[unroll]] for (uint q = 0u; q < 4u; ++q) v += sp[(q * 2u + e / 256u) * 256u + e % 256u];
#else
      float v = 0.0;
      for (uint c = 0u; c < ATT_HD; ++c) v += half_at(QH + head * HDP + c) * half_at(k * HDP + c);
#endif
      const int r = kid[k];
      lg[e] = r >= 0 ? v * pc.scale : r == MASKED ? -F32_INF : uintBitsToFloat(0x7FC00000u);
    }
    if (it < nt) {
      barrier();
      if (lid < HB) {
        const float m_old = m_s[lid];
        float m = m_old, d = d_s[lid];
        [[unroll]] for (uint k = 0u; k < KT; ++k) m = max_nf(lg[lid * KT + k], m);
        if (m > -F32_INF) d *= m_old > -F32_INF ? exp(m_old - m) : 0.0;
        [[unroll]] for (uint k = 0u; k < KT; ++k) {
          const float l = lg[lid * KT + k];
          d += l > -F32_INF ? exp(l - m) : (isnan(l) ? l : 0.0);
        }
        m_s[lid] = m;
        d_s[lid] = d;
      }
      continue;
    }
    [[unroll]] for (uint u = 0u; u < 2u; ++u) {  // each invocation's own two logits
      const uint e = lid + 256u * u, head = e / KT;
      const float l = lg[e], m = m_s[head], d = d_s[head];
      ph[head * PP + e % KT] = float16_t(l > -F32_INF ? exp(l - m) / d : (isnan(l) ? l : 0.0));
    }
    barrier();
#if ATT_COOP == 1
    {
      HALF_T pm;
      coopMatLoadNV(pm, ph, hb * 16u * PP, PP, false);  // P [head, key] of this subgroup's head block
      REP_N(O_MMA)
    }
#else
    [[unroll]] for (uint i = 0u; i < HB * ATT_HD / 256u; ++i) {
      const uint o = lid + 256u * i, h = o / ATT_HD, c = o % ATT_HD;
      float a = oacc[i];
      for (uint k = 0u; k < KT; ++k) a += float(ph[h * PP + k]) * half_at(k * HDP + c);
      oacc[i] = a;
    }
#endif
  }
  // the block's output a quarter at a time (head block b, channel half hc2) through the key tile's space (f32 [16
  // heads, ATT_HD / 2]) to the stores
  [[unroll]] for (uint r = 0u; r < 4u; ++r) {
    const uint b = r & 1u, hc2 = r >> 1u;
    barrier();
#if ATT_COOP == 1
    if (hb == b && qc / 2u == hc2) { REP_N(O_STORE) }
#else
    [[unroll]] for (uint i = 0u; i < HB * ATT_HD / 256u; ++i) {
      const uint o = lid + 256u * i, h = o / ATT_HD, c = o % ATT_HD;
      if (h / 16u == b && c / (ATT_HD / 2u) == hc2) {
        const uint f = (h % 16u) * (ATT_HD / 2u) + c - hc2 * (ATT_HD / 2u);
        tl[f >> 2u][f & 3u] = floatBitsToUint(oacc[i]);
      }
    }
#endif
    barrier();
    for (uint f = lid; f < 16u * ATT_HD / 2u; f += WG_SIZE) {
      const uint h = f / (ATT_HD / 2u), c = hc2 * (ATT_HD / 2u) + f % (ATT_HD / 2u), head = h0 + 16u * b + h;
      if (head >= pc.heads) break;  // heads in order: the rest of this invocation's outputs are past the last
      const float v = uintBitsToFloat(tl[f >> 2u][f & 3u]);
#if ATT_IROPE
      const uint pf = f ^ 1u;
      os[pc.ooff + (row * pc.heads + head) * ATT_HD + c] = att_irope(v, uintBitsToFloat(tl[pf >> 2u][pf & 3u]), c, row, pc.csoff);
#else
      os[pc.ooff + (row * pc.heads + head) * ATT_HD + c] = v;
#endif
    }
  }
}
