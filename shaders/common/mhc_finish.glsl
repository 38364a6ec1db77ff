// The coefficients and collapse of one token of an mHC site (ops/mhc.hpp hc_pre / hc_head) by one workgroup, from
// the block partials of mhc_block.comp (added in block order) — the body of mhc_finish.comp (one workgroup per token)
// and of mhc_block.comp's HC_TAIL mode (the last workgroup of a token's blocks runs it, one dispatch fewer):
//   m[i]    = dot_i · 1/sqrt(Σx²/(hc·d) + norm_eps)
//   pre[j]  = sigmoid(m[j]·s0 + base[j]) + hc_eps,  post[j] = 2·sigmoid(m[hc+j]·s1 + base[hc+j])
//   C       = row-softmax(m[2hc + j·hc + k]·s2 + base[..]) + hc_eps; column pass; then iters−1 × {row, column}
//   y[c]    = Σ_j pre[j]·X[j][c] in f32, j ascending
// The coefficients in ACC with exp in double (common/f64math.glsl) when the device has f64, as the CPU.
// HC_HEAD = 1: hc_head (pre only, scalar scale). HC_FOLD (V4.1's one-sublayer lag, dsv4-architecture.md §4.1):
// 1 = the collapse uses the weights fold[foldoff + t·fstride + j] instead of this sublayer's pre (the coefficients
// are still computed and written); 2 = the collapse (and norm) alone, no coefficients (V4.1's final collapse).
// HC_SG = 1: the Sinkhorn through subgroup shuffles (hc·hc ≤ the subgroup size).
// HC_PART (not with HC_HEAD / HC_FOLD 2): 0 = everything; 1 = all but the Sinkhorn (C is not written); 2 = the
// Sinkhorn alone (only C is written) — kernels::hc_pre_finish(..., false) + hc_sinkhorn, so that the C the collapse
// does not need is computed off the decode's critical path.
// HC_NORM = 1: the RMSNorm that follows the collapse, in the same dispatch: the operations of rmsnorm.comp on the
// stored y values in its order (strided partial sums, wg_sum, r = 1 / sqrt(mean + eps), y · r · weight), so
// bit-identical. HC_Q8 = 1 (with HC_NORM; d % 32 == 0): y also quantised to int8 (common/act_q8.glsl's vectors,
// hqw / hqf / hqi from word a.qoff, one per token): the normed values written to y are read back through its
// coherent binding after a barrier, and one invocation per block runs act_q8_block — quantize_act.comp's operations,
// so its bits — a few hundred instructions per invocation instead of a dependent quantisation step.
// Defines: HC_MAX, HC_HEAD, HC_NORM, HC_FOLD, HC_SG, HC_PART, HC_N (= hc), HC_COLS (= ceil(d / WG_SIZE)),
// HC_NBLK (= the mhc_block.comp column blocks of d: the partials per row).
// The including shader declares the buffers part[] (ACC), base[], scale[], coeff[], ys[] (nw[] with HC_NORM,
// fold[] with HC_FOLD), includes common/reduce.glsl with HC_NORM, and defines HCF_X(i): element i of the X whose
// copies are collapsed; it may define HCF_C(i) (default coeff[i]): the coefficient element i the finish writes (the
// a.coff offsets are into it). Every invocation of the workgroup calls hc_finish (it contains barriers).
#ifndef HC_PART
#define HC_PART 0
#endif
#ifndef HC_Q8
#define HC_Q8 0
#endif
#if HC_Q8 && !HC_NORM
#error "HC_Q8 quantises the normed y: needs HC_NORM"
#endif
#ifndef HCF_C
#define HCF_C(i) coeff[i]
#endif
#if HC_PART != 0 && (HC_HEAD || HC_FOLD == 2)
#error "HC_PART splits hc_pre_finish's coefficients: not with HC_HEAD or HC_FOLD 2"
#endif
#define HC_COLLAPSE (HC_PART != 2)
#define HC_SINKHORN (HC_PART != 1)
#if ACC_DOUBLE
#include "common/f64math.glsl"
#define EXP(x) exp_f64(x)
#else
#define EXP(x) exp(x)
#endif

#if HC_SG
#extension GL_KHR_shader_subgroup_shuffle : require
ACC shf(ACC v, uint i) {
#if ACC_DOUBLE
  return packDouble2x32(subgroupShuffle(unpackDouble2x32(v), i));
#else
  return subgroupShuffle(v, i);
#endif
}
#endif

shared ACC m[(2 + HC_MAX) * HC_MAX + 1];

shared float pre_s[HC_MAX];
shared ACC cm[HC_MAX * HC_MAX];

ACC sigm(ACC x) { return ACC(1) / (ACC(1) + EXP(-x)); }


/// The scalars of one token's finish (offsets in elements of their buffers).
struct hcf_args {
  uint t, hc, d, nblk, rows, iters, xoff, poff, boff, soff, coff, yoff, cstride, nwoff, foldoff, fstride, qoff;
  float norm_eps, hc_eps, head_scale, rms_eps;
};

void hc_finish(const hcf_args a) {
  const uint t = a.t, lid = gl_LocalInvocationID.x, hc = a.hc, d = a.d, R = a.rows + 1u;
  const uint xrow = a.xoff + t * hc * d;
  // This invocation's columns of X (and of the norm weight), requested now so that their latency overlaps the
  // coefficient computation below (HC_N = hc and HC_COLS = ceil(d / WG_SIZE) are compile-time: registers).
#if HC_COLLAPSE
  float xr[HC_N * HC_COLS];
  [[unroll]] for (uint i = 0u; i < HC_COLS; ++i) {
    const uint c = lid + i * WG_SIZE;
    [[unroll]] for (uint j = 0u; j < HC_N; ++j) xr[j * HC_COLS + i] = c < d ? HCF_X(xrow + j * d + c) : 0.0;
  }
#endif
#if HC_NORM && HC_COLLAPSE
  float nwr[HC_COLS];
  [[unroll]] for (uint i = 0u; i < HC_COLS; ++i) {
    const uint c = lid + i * WG_SIZE;
    nwr[i] = c < d ? nw[a.nwoff + c] : 0.0;
  }
#endif
#if HC_FOLD == 2
  if (lid < hc) pre_s[lid] = fold[a.foldoff + t * a.fstride + lid];
#else
  // The block partials of every row, all loads in flight together (HC_NBLK = nblk is a compile-time constant),
  // then added in block order.
  for (uint r = lid; r < R; r += WG_SIZE) {
    ACC pv[HC_NBLK];
    [[unroll]] for (uint b = 0u; b < HC_NBLK; ++b) pv[b] = part[a.poff + (t * HC_NBLK + b) * R + r];
    ACC s = ACC(0);
    [[unroll]] for (uint b = 0u; b < HC_NBLK; ++b) s += pv[b];
    m[r] = s;
  }
  barrier();
  // Coefficients, spread over the first hc·hc invocations (lane i = j·hc + k owns C[j, k]; lanes < hc own pre[j]
  // and post[j]). Every sum is read back from shared memory in the serial order (k = 0 … hc−1), so the result is
  // the single-invocation computation's bit for bit; the barriers stay in uniform control flow.
  const ACC rs = ACC(1) / sqrt(m[a.rows] / ACC(hc * d) + ACC(a.norm_eps));
  const ACC eps = ACC(a.hc_eps);
  const uint cb = a.coff + t * a.cstride;
#if HC_HEAD
  if (lid < hc) {
    precise const ACC zh = m[lid] * rs * ACC(a.head_scale) + ACC(base[a.boff + lid]);
    const float p = float(sigm(zh) + eps);
    pre_s[lid] = p;
    HCF_C(cb + lid) = p;
  }
#else
  const ACC s0 = ACC(scale[a.soff]), s1 = ACC(scale[a.soff + 1u]), s2 = ACC(scale[a.soff + 2u]);
  if (HC_COLLAPSE && lid < hc) {
    precise const ACC zp = m[lid] * rs * s0 + ACC(base[a.boff + lid]);
    precise const ACC zq = m[hc + lid] * rs * s1 + ACC(base[a.boff + hc + lid]);
    const float p = float(sigm(zp) + eps);
#if HC_FOLD
    pre_s[lid] = fold[a.foldoff + t * a.fstride + lid];
#else
    pre_s[lid] = p;
#endif
    HCF_C(cb + lid) = p;
    HCF_C(cb + hc + lid) = float(ACC(2) * sigm(zq));
  }
#if HC_SINKHORN
  const bool own = lid < hc * hc;
  const uint j = own ? lid / hc : 0u, k = own ? lid % hc : 0u;
  precise ACC v = ACC(0);
  precise const ACC vz = m[2u * hc + (own ? lid : 0u)] * rs * s2 + ACC(base[a.boff + 2u * hc + (own ? lid : 0u)]);
  if (own) v = vz;
#if HC_SG
  // The Sinkhorn in subgroup 0 (hc·hc ≤ the subgroup size): lane sl of it owns C entry sl, reads its row's /
  // column's values through shuffles and adds them in the serial order (q = 0 … hc−1), so the result is the
  // shared-memory version's bit for bit, without its ~4·iters workgroup barriers. Everything is indexed by the
  // subgroup invocation id (no assumption on how local ids map to subgroups); lanes past hc·hc follow lane 0's row
  // and store nothing.
  if (gl_SubgroupID == 0u) {
    const uint sl = gl_SubgroupInvocationID;
    const bool sown = sl < hc * hc;
    const uint sj = sown ? sl / hc : 0u, sk = sown ? sl % hc : 0u, rb = sj * hc;
    precise ACC w = m[2u * hc + (sown ? sl : 0u)] * rs * s2 + ACC(base[a.boff + 2u * hc + (sown ? sl : 0u)]);
    ACC mx = ACC(-F32_INF);
    for (uint q = 0u; q < HC_N; ++q) mx = max(mx, shf(w, rb + q));
    w = EXP(w - mx);
    ACC sum = ACC(0);
    for (uint q = 0u; q < HC_N; ++q) sum += shf(w, rb + q);
    w = w / sum + eps;  // precise (w is)
    for (uint it = 0u; it < max(a.iters, 1u); ++it) {
      if (it > 0u) {  // row pass (not before the first column pass)
        ACC sr = ACC(0);
        for (uint q = 0u; q < HC_N; ++q) sr += shf(w, rb + q);
        w /= sr + eps;
      }
      ACC sc = ACC(0);
      for (uint q = 0u; q < HC_N; ++q) sc += shf(w, q * hc + sk);
      w /= sc + eps;
    }
    if (sown) HCF_C(cb + 2u * hc + sl) = float(w);
  }
#else
  // row softmax + eps
  if (own) cm[lid] = v;
  barrier();
  if (own) {
    ACC mx = ACC(-F32_INF);
    for (uint q = 0u; q < hc; ++q) mx = max(mx, cm[j * hc + q]);
    v = EXP(v - mx);
  }
  barrier();
  if (own) cm[lid] = v;
  barrier();
  if (own) {
    ACC sum = ACC(0);
    for (uint q = 0u; q < hc; ++q) sum += cm[j * hc + q];
    v = v / sum + eps;
  }
  for (uint it = 0u; it < max(a.iters, 1u); ++it) {
    if (it > 0u) {  // row pass (not before the first column pass)
      barrier();
      if (own) cm[lid] = v;
      barrier();
      if (own) {
        ACC sr = ACC(0);
        for (uint q = 0u; q < hc; ++q) sr += cm[j * hc + q];
        v /= sr + eps;
      }
    }
    barrier();  // column pass
    if (own) cm[lid] = v;
    barrier();
    if (own) {
      ACC sc = ACC(0);
      for (uint q = 0u; q < hc; ++q) sc += cm[q * hc + k];
      v /= sc + eps;
    }
  }
  if (own) HCF_C(cb + 2u * hc + lid) = float(v);
#endif
#endif  // HC_SINKHORN
#endif
#endif  // HC_FOLD == 2
#if HC_COLLAPSE
  barrier();
  precise ACC ss = ACC(0);  // precise: the same sum in mhc_finish.comp and in mhc_block.comp's tail
  float yv[HC_COLS];
  [[unroll]] for (uint i = 0u; i < HC_COLS; ++i) {
    const uint c = lid + i * WG_SIZE;
    yv[i] = 0.0;
    if (c < d) {
      precise float y = pre_s[0] * xr[i];
      [[unroll]] for (uint j = 1u; j < HC_N; ++j) y += pre_s[j] * xr[j * HC_COLS + i];
      yv[i] = y;
#if HC_NORM
      const ACC v = ACC(y);
      ss += v * v;
#else
      ys[a.yoff + t * d + c] = y;
#endif
    }
  }
#if HC_NORM
  ss = wg_sum(ss);
  const ACC r = ACC(1) / sqrt(ss / ACC(d) + ACC(a.rms_eps));
  [[unroll]] for (uint i = 0u; i < HC_COLS; ++i) {
    const uint c = lid + i * WG_SIZE;
    if (c < d) {
      const float u = float(ACC(yv[i]) * r * ACC(nwr[i]));
      ys[a.yoff + t * d + c] = u;
    }
  }
#if HC_Q8
  memoryBarrierBuffer();  // the workgroup's y writes, read back below through the coherent binding
  barrier();
  const uint qblocks = d / 32u, qbase = a.qoff + t * ACT_VEC_WORDS(qblocks);
  for (uint b = lid; b < qblocks; b += WG_SIZE) {
    float v[32];
    [[unroll]] for (uint i = 0u; i < 32u; ++i) v[i] = ys[a.yoff + t * d + b * 32u + i];
    const act_block q = act_q8_block(v);
    [[unroll]] for (uint s = 0u; s < 8u; ++s) hqw[qbase + 8u * b + s] = q.w[s];
    hqf[qbase + ACT_SCALE_WORD(qblocks) + b] = q.half_sx;
    hqi[qbase + ACT_BSUM_WORD(qblocks) + b] = q.bsum2;
  }
#endif
#endif
#endif  // HC_COLLAPSE
}
