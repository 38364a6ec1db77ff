#version 460
#extension GL_GOOGLE_include_directive : require
// MoE routing of one token per workgroup (ops/routing.hpp):
//   s[e]  = f32(sqrt(softplus(z[e] / temp))), softplus(z) = z for z > 20 else log1p(exp(z)), evaluated in double
//           (common/f64math.glsl) when ACC_DOUBLE — then s equals the CPU's bit for bit — else in f32;
//   score mode: idx = top-k of s + bias (f32 sum) with the tie rule of ops/topk.hpp (larger first, equal → lower
//           index, NaN = −inf, −0 = +0): k rounds of a workgroup max over the 64-bit key (order-preserving
//           value, ~index), each round below the previous winner (subgroup maxima, then across the subgroups);
//   hash mode: idx = tid2eid[min(token, V−1)] (entries checked on the host; an id ≥ n gives 0xFFFFFFFF, w NaN);
//   w[j]  = s[idx[j]] · (route_scale / (Σ_j s[idx[j]] + norm_eps)), in ACC, sum in j order.
// Defines: ROUTE_MAX (scores per row held in shared memory), ROUTE_HASH (0 / 1), ROUTE_SG (score mode: > 0 = the
// top-k in subgroup 0 with ROUTE_SG keys per lane; 0 = over the workgroup).
// ROUTE_FUSED = 1 (kernels::router_route; one token): the router's logits z[e] = Σ_c W[e, c]·x[c] (W f32, or bf16
// with RT_BF16 = 1, [n, d], binding 7; x f32 [d], binding 8) in the same dispatch — each workgroup computes RT_RPW rows, each row over
// WG_SIZE / RT_RPW invocations (4 consecutive columns per load, strided, at most RT_LOADS loads each; the partials
// added by subgroups, then the subgroups in order, or by a shared-memory tree), writes them to logits, and the last
// workgroup to count itself (binding 9, per-call arrival counter) reads them back and routes: one dependent step
// instead of two. (Rows are split by (subgroup, lane) slot, so no mapping of local ids onto subgroups is assumed.)
#include "common/base.glsl"
#if ACC_DOUBLE
#include "common/f64math.glsl"
#endif
#ifndef ROUTE_FUSED
#define ROUTE_FUSED 0
#endif

layout(push_constant) uniform route_pc {
  uint rows, n, k, loff;
  uint boff, has_bias, soff, has_s;
  uint ioff, woff, toff, vocab;
  float temp, route_scale, norm_eps;
  uint taboff;
#if ROUTE_FUSED
  uint xoff, wtoff, cntoff, d;
#endif
} pc;
#if ROUTE_FUSED
layout(std430, binding = 0) coherent buffer L { float logits[]; };  // written by every workgroup, read by the last
#if RT_BF16  // the router's weights [n, d] (d % 4 == 0), 4 at a time (pc.wtoff, the row bases: in those units)
layout(std430, binding = 7) readonly buffer Wr { uvec2 wr[]; };
vec4 w4(const uint i) {  // bf16: element 2m in the low half of word m (little-endian)
  const uvec2 p = wr[i];
  return vec4(uintBitsToFloat(p.x << 16), uintBitsToFloat(p.x & 0xFFFF0000u), uintBitsToFloat(p.y << 16),
              uintBitsToFloat(p.y & 0xFFFF0000u));
}
#else
layout(std430, binding = 7) readonly buffer Wr { vec4 wr[]; };
vec4 w4(const uint i) { return wr[i]; }
#endif
layout(std430, binding = 8) readonly buffer Xr { vec4 xr[]; };      // its input [d]
layout(std430, binding = 9) coherent buffer Cnt { uint cnt[]; };    // arrival counter, 0 between uses
shared float rt_red[WG_SIZE];
shared bool rt_last;
#else
layout(std430, binding = 0) readonly buffer L { float logits[]; };
#endif
layout(std430, binding = 1) readonly buffer B { float bias[]; };
layout(std430, binding = 2) writeonly buffer S { float s_out[]; };
layout(std430, binding = 3) writeonly buffer I { uint idx_out[]; };
layout(std430, binding = 4) writeonly buffer Wt { float w_out[]; };
layout(std430, binding = 5) readonly buffer T { uint table[]; };    // hash: tid2eid [V, k]
layout(std430, binding = 6) readonly buffer Tk { uint tokens[]; };  // hash: token id per row

shared float sc[ROUTE_MAX];
shared uint best_hi[WG_SIZE], best_lo[WG_SIZE];
shared uint win[ROUTE_MAX_K];

#if !ACC_DOUBLE
// e^r for |r| ≤ ln2/2: the Taylor polynomial of degree 8 (remainder < 2^-30 relative), Horner in f32.
float exp_reduced(float r) {
  precise float p = 1.0 / 40320.0;
  p = p * r + 1.0 / 5040.0;
  p = p * r + 1.0 / 720.0;
  p = p * r + 1.0 / 120.0;
  p = p * r + 1.0 / 24.0;
  p = p * r + 1.0 / 6.0;
  p = p * r + 0.5;
  p = p * r + 1.0;
  return p * r + 1.0;
}
// log(1 + y) for y ≥ 0: for y < 1 as 2·atanh(s), s = y / (2 + y) ≤ 1/3, by the odd series 2s·(1 + s²/3 + … +
// s¹⁴/15) (remainder < 2^-29 relative); else log(1 + y), whose absolute error is then small against the value.
float log1p_pos(float y) {
  if (y >= 1.0) return log(1.0 + y);
  precise const float s = y / (2.0 + y), s2 = s * s;
  precise float p = 1.0 / 15.0;
  p = p * s2 + 1.0 / 13.0;
  p = p * s2 + 1.0 / 11.0;
  p = p * s2 + 1.0 / 9.0;
  p = p * s2 + 1.0 / 7.0;
  p = p * s2 + 1.0 / 5.0;
  p = p * s2 + 1.0 / 3.0;
  p = p * s2 + 1.0;
  return 2.0 * s * p;
}
#endif

float score(float z) {
#if ACC_DOUBLE
  precise const double zd = pc.temp == 1.0 ? double(z) : double(z) / double(pc.temp);
  // f32(z / temp) as the CPU: the double quotient rounded once to f32 is the correctly rounded f32 quotient
  const double zf = double(float(zd));
  precise const double sp = zf > 20.0LF ? zf : log1p_f64(exp_f64(zf));
  return float(sqrt(sp));
#else
#if HAS_F64
  // z / temp correctly rounded, as the CPU's f32 quotient: through one f64 division (exact enough that the rounding
  // to f32 is the correct one); a device's f32 division may be a reciprocal and a product, and a few ulp of
  // z / temp become |z / temp| times as many of e^(z / temp)
  const float zf = pc.temp == 1.0 ? z : float(double(z) / double(pc.temp));
#else
  const float zf = pc.temp == 1.0 ? z : z / pc.temp;  // (without f64: the device's division, maybe a few ulp off)
#endif
  if (zf > 20.0) return sqrt(zf);
  // e^z with the argument reduced exactly (z = n·ln2 + r, ln2 split as cephes' 0.693145751953125 +
  // 1.428606765330187e-6, n·hi exact): exp(z) itself loses |z|·2^−24 relative in the reduction. e^r and log1p
  // are polynomials here, not the device's exp / log: those may be approximations (NVIDIA's log has an absolute
  // error near 2^-21, a large relative error where log(1 + y) is small: 50–70 ulp of the score, measured).
  precise const float n = round(zf * 1.44269504), r = (zf - n * 0.693145751953125) - n * 1.428606765330187e-6;
  precise const float er = exp_reduced(r);
  // × 2^n exactly: the power of two from its bits (a device's ldexp / exp2 may be approximate)
  if (n < -100.0) {  // y = er · 2^n < 2^-99: log1p(y) = y to far below an f32 ulp, and
    // sqrt(y) = sqrt(er · 2^(n mod 2)) · 2^floor(n / 2), every factor normal. (Below 2^-126 y itself would be
    // subnormal, and near 2^-125 log1p_pos's s = y / (2 + y) is: a device that flushes subnormals, as NVIDIA's
    // does, returned a score of 0 there — H200, suite seed 16737710038653918140, z / temp = −86.7.)
    const int ni = int(n), h = (ni >> 1) + 127;  // arithmetic shift: floor(n / 2)
    if (h < 1) return 0.0;  // a score below 2^-126 (z / temp < -174): 0, where the CPU's is subnormal or 0
    return sqrt(er * ((ni & 1) != 0 ? 2.0 : 1.0)) * uintBitsToFloat(uint(h) << 23);
  }
  precise const float y = er * uintBitsToFloat(uint(int(n) + 127) << 23);
  return sqrt(log1p_pos(y));
#endif
}

uint value_key(float v) {  // order-preserving, NaN → −inf, −0 → +0 (as topk.comp)
  uint u = isnan(v) ? 0xFF800000u : floatBitsToUint(v);
  if ((u & 0x7FFFFFFFu) == 0u) u = 0u;
  return (u & 0x80000000u) != 0u ? ~u : (u | 0x80000000u);
}
bool key_less(uint ah, uint al, uint bh, uint bl) { return ah < bh || (ah == bh && al < bl); }

#if ROUTE_FUSED
// Workgroup g's RT_RPW logit rows; true in the last workgroup to finish (which then routes the token).
bool router_rows(const uint g, const uint lid) {
  const uint T = WG_SIZE / RT_RPW, rr = lid / T, j = lid % T, e = g * RT_RPW + rr, q = pc.d / 4u;
  float acc = 0.0;
  if (e < pc.n) {
    const uint wb = pc.wtoff + e * q, xb = pc.xoff / 4u;
    vec4 wv[RT_LOADS], xv[RT_LOADS];  // all of this invocation's loads in flight together (q ≤ RT_LOADS · T)
    [[unroll]] for (uint i = 0u; i < RT_LOADS; ++i) {
      const bool inr = j + i * T < q;
      wv[i] = inr ? w4(wb + j + i * T) : vec4(0.0);
      xv[i] = inr ? xr[xb + j + i * T] : vec4(0.0);
    }
    [[unroll]] for (uint i = 0u; i < RT_LOADS; ++i) acc += dot(wv[i], xv[i]);
  }
#if REDUCE_SUBGROUP
  // T is a multiple of the subgroup size (host) and lid is the (subgroup, lane) slot (main): a row's subgroups
  // are consecutive, added in order
  acc = subgroupAdd(acc);
  if (subgroupElect()) rt_red[gl_SubgroupID] = acc;
  barrier();
  const uint spr = T / gl_SubgroupSize;
  if (lid < RT_RPW && g * RT_RPW + lid < pc.n) {
    float z = 0.0;
    for (uint i = 0u; i < spr; ++i) z += rt_red[lid * spr + i];
    logits[pc.loff + g * RT_RPW + lid] = z;
  }
#else
  rt_red[lid] = acc;
  barrier();
  for (uint st = T / 2u; st > 0u; st >>= 1) {
    if (j < st) rt_red[lid] += rt_red[lid + st];
    barrier();
  }
  if (j == 0u && e < pc.n) logits[pc.loff + e] = rt_red[lid];
#endif
  memoryBarrierBuffer();
  barrier();
  if (lid == 0u) {  // device-scope fences on both sides of the count (release before, acquire after)
    memoryBarrierBuffer();
    rt_last = atomicAdd(cnt[pc.cntoff], 1u) + 1u == (pc.n + RT_RPW - 1u) / RT_RPW;
    memoryBarrierBuffer();
  }
  barrier();
  if (!rt_last) return false;  // uniform (shared)
  if (lid == 0u) cnt[pc.cntoff] = 0u;
  memoryBarrierBuffer();
  return true;
}
#endif

void main() {
#if ROUTE_FUSED
#if REDUCE_SUBGROUP
  // rows by (subgroup, lane), not by local id: a row's T = WG_SIZE / RT_RPW slots are then whole subgroups however
  // the implementation maps local ids onto subgroups (full subgroups: WG_SIZE and T multiples of the size, host)
  const uint slot = gl_SubgroupID * gl_SubgroupSize + gl_SubgroupInvocationID;
#else
  const uint slot = gl_LocalInvocationID.x;
#endif
  if (!router_rows(wg_index(), slot)) return;  // uniform
  const uint row = 0u;
#else
  const uint row = wg_index();
  if (row >= pc.rows) return;  // uniform over the workgroup
#endif
  const uint lid = gl_LocalInvocationID.x, n = pc.n, k = pc.k;
  for (uint e = lid; e < n; e += WG_SIZE) {
    const float s = score(logits[pc.loff + row * n + e]);
    sc[e] = s;
    if (pc.has_s != 0u) s_out[pc.soff + row * n + e] = s;
  }
  barrier();
#if ROUTE_HASH
  if (lid < k) {
    const uint tok = min(tokens[pc.toff + row], pc.vocab - 1u);
    win[lid] = table[pc.taboff + tok * k + lid];
  }
#elif ROUTE_SG
  // All n keys in subgroup 0's registers (ROUTE_SG per lane, n ≤ ROUTE_SG · the smallest subgroup size): each round is a lane-local
  // maximum below the previous winner and two subgroup maxima — no barrier, no memory traffic. The same keys and
  // the same rule as the workgroup version below, so the same winners.
  if (gl_SubgroupID == 0u) {
    const uint lane = gl_SubgroupInvocationID;
    uint kh[ROUTE_SG], kl[ROUTE_SG];
    [[unroll]] for (uint i = 0u; i < ROUTE_SG; ++i) {
      const uint e = lane + i * gl_SubgroupSize;
      const bool real = e < n;
      const float v = real ? (pc.has_bias != 0u ? sc[e] + bias[pc.boff + e] : sc[e]) : 0.0;
      kh[i] = real ? value_key(v) : 0u;  // (0, 0): below every real key, never picked
      kl[i] = real ? ~e : 0u;
    }
    uint ph = 0xFFFFFFFFu, pl = 0xFFFFFFFFu;  // previous winner (every real key is below)
    for (uint j = 0u; j < k; ++j) {
      uint bh = 0u, bl = 0u;
      [[unroll]] for (uint i = 0u; i < ROUTE_SG; ++i)
        if (key_less(kh[i], kl[i], ph, pl) && key_less(bh, bl, kh[i], kl[i])) bh = kh[i], bl = kl[i];
      ph = subgroupMax(bh);
      pl = subgroupMax(bh == ph ? bl : 0u);
      if (lane == 0u) win[j] = ~pl;
    }
  }
#else
  uint ph = 0xFFFFFFFFu, pl = 0xFFFFFFFFu;  // previous winner (every real key is below)
  for (uint j = 0u; j < k; ++j) {
    uint bh = 0u, bl = 0u;  // below every real key (K(−inf) = 0x007FFFFF)
    bool any = false;
    for (uint e = lid; e < n; e += WG_SIZE) {
      const float v = pc.has_bias != 0u ? sc[e] + bias[pc.boff + e] : sc[e];
      const uint h = value_key(v), l = ~e;
      if (key_less(h, l, ph, pl) && (!any || key_less(bh, bl, h, l))) {
        bh = h;
        bl = l;
        any = true;
      }
    }
#if REDUCE_SUBGROUP
    // The subgroup's largest composite (hi first, then lo among the lanes holding that hi), one per subgroup in
    // shared memory, then every invocation takes the largest of those: 2 barriers per round instead of log2(WG)+2.
    const uint mh = subgroupMax(bh), ml = subgroupMax(bh == mh ? bl : 0u);
    if (subgroupElect()) {
      best_hi[gl_SubgroupID] = mh;
      best_lo[gl_SubgroupID] = ml;
    }
    barrier();
    ph = best_hi[0];
    pl = best_lo[0];
    for (uint i = 1u; i < gl_NumSubgroups; ++i)
      if (key_less(ph, pl, best_hi[i], best_lo[i])) ph = best_hi[i], pl = best_lo[i];
    if (lid == 0u) win[j] = ~pl;
    barrier();
#else
    best_hi[lid] = bh;
    best_lo[lid] = bl;
    barrier();
    for (uint st = WG_SIZE / 2u; st > 0u; st >>= 1) {
      if (lid < st && key_less(best_hi[lid], best_lo[lid], best_hi[lid + st], best_lo[lid + st])) {
        best_hi[lid] = best_hi[lid + st];
        best_lo[lid] = best_lo[lid + st];
      }
      barrier();
    }
    ph = best_hi[0];
    pl = best_lo[0];
    if (lid == 0u) win[j] = ~pl;
    barrier();
#endif
  }
#endif
  barrier();
  if (lid == 0u) {
    ACC sum = ACC(0);
    for (uint j = 0u; j < k; ++j) sum += win[j] < n ? ACC(sc[win[j]]) : ACC(0);
    const ACC f = ACC(pc.route_scale) / (sum + ACC(pc.norm_eps));
    for (uint j = 0u; j < k; ++j) {
      const uint id = win[j];
      const bool ok = id < n;
      idx_out[pc.ioff + row * k + j] = ok ? id : 0xFFFFFFFFu;
      w_out[pc.woff + row * k + j] = ok ? float(ACC(sc[id]) * f) : uintBitsToFloat(0x7FC00000u);
    }
  }
}
