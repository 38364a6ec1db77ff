#version 460
#extension GL_GOOGLE_include_directive : require
// Y[t, r] = Σ_c W[r, c] · X[t, c] for t < n ≤ NB: matvec (NB = 1) and small-batch GEMM (NB = 8).
//
// A workgroup is TEAMS teams of LANES invocations (a team is a subgroup when REDUCE_SUBGROUP). A team owns one
// row and 1/SPLIT of its columns; SPLIT teams together cover a row, so a workgroup covers ROWS_PER_WG =
// TEAMS / SPLIT rows. Lane l of a team reads the team's chunks l, l + LANES, ... (one 16-byte load per chunk,
// coalesced across the team), UNROLL chunks of loads in flight before any is decoded. Partial sums: team
// reduction, then (SPLIT > 1) the SPLIT partials of a row added in a fixed order through shared memory.
// Activations (fast path) go through shared memory in tiles of X_TILE columns: loaded once per workgroup with
// coalesced 16-byte loads, stored swizzled so that the lanes' chunk-strided reads are free of bank conflicts.
// The hot loop is unrolled by the preprocessor (REP_* below): no per-thread arrays, nothing a driver could
// leave in local memory.
// Defines: TEAMS, SPLIT, ROWS_PER_WG, NB (1 or 8), UNROLL (1, 2, 4, 8), X_TILE, and the format's.
#include "common/base.glsl"
#include "common/formats.glsl"

layout(std430, binding = 3) readonly buffer X { float xs[]; };
layout(std430, binding = 3) readonly buffer X4 { vec4 xv[]; };
layout(std430, binding = 4) writeonly buffer Y { float ys[]; };

#if NB == 1
#define REP_NB(M) M(0)
#elif NB == 8
#define REP_NB(M) M(0) M(1) M(2) M(3) M(4) M(5) M(6) M(7)
#else
#error "NB must be 1 or 8"
#endif
#if UNROLL == 1
#define REP_U(M) M(0)
#elif UNROLL == 2
#define REP_U(M) M(0) M(1)
#elif UNROLL == 4
#define REP_U(M) M(0) M(1) M(2) M(3)
#elif UNROLL == 8
#define REP_U(M) M(0) M(1) M(2) M(3) M(4) M(5) M(6) M(7)
#else
#error "UNROLL must be 1, 2, 4 or 8"
#endif
#define XQ (CHUNK / 4)
#if XQ == 1
#define REP_J(M) M(0)
#elif XQ == 2
#define REP_J(M) M(0) M(1)
#elif XQ == 4
#define REP_J(M) M(0) M(1) M(2) M(3)
#elif XQ == 8
#define REP_J(M) M(0) M(1) M(2) M(3) M(4) M(5) M(6) M(7)
#endif

#if !REDUCE_SUBGROUP
shared float team_red[WG_SIZE];
// Sum over the LANES invocations of a team; every invocation of the workgroup calls it (barriers).
float team_sum(float v, uint team, uint lane) {
  const uint id = gl_LocalInvocationID.x;
  team_red[id] = v;
  barrier();
  for (uint s = LANES / 2u; s > 0u; s >>= 1) {
    if (lane < s) team_red[id] += team_red[id + s];
    barrier();
  }
  const float t = team_red[team * LANES];
  barrier();
  return t;
}
#endif
#if SPLIT > 1
shared float partial[TEAMS * NB];
#endif

// Swizzled position of vec4 j of chunk kt in a tile: 8 consecutive chunks put vec4 j in 8 different 16-byte
// bank groups (a 128-bit shared load serves 8 lanes per pass).
uint xswz(uint kt, uint j) { return kt * XQ + (j ^ ((kt / (8u / XQ)) % XQ)); }
shared vec4 xsh[NB * (X_TILE / 4)];

#define ACC_DECL(t) float acc##t = 0.0;
// one batch row: acc_t += w4 · x_t (W4, XI bound by DOT_J)
#define DOT_T(t) if (t < pc.n) acc##t += dot(W4, xsh[t * (X_TILE / 4) + XI]);
#define DOT_J(j)                                  \
  {                                               \
    const vec4 W4 = decode4(R, Q, S, K, j);       \
    const uint XI = xswz(KT, j);                  \
    REP_NB(DOT_T)                                 \
  }
#define FETCH(u) const raw_t q##u = fetch(R, row, k0 + kt + u * step);
#define CONSUME(u)                                \
  {                                               \
    const raw_t Q = q##u;                         \
    const uint KT = kt + u * step, K = k0 + KT;   \
    const float S = chunk_scale(R, Q);            \
    REP_J(DOT_J)                                  \
  }
#define GEN_T(t) if (t < pc.n) acc##t += w * xs[pc.xoff + t * pc.x_stride + c];
#if REDUCE_SUBGROUP
#define REDUCE(t) acc##t = subgroupAdd(acc##t);
#else
#define REDUCE(t) acc##t = team_sum(acc##t, team, lane);
#endif
#define PART_ST(t) partial[team * NB + t] = acc##t;
#define PART_SUM(t)                                                  \
  {                                                                  \
    float s = 0.0;                                                   \
    for (uint p = 0u; p < SPLIT; ++p) s += partial[(team + p) * NB + t]; \
    acc##t = s;                                                      \
  }
#define WRITE(t) if (t < pc.n) ys[pc.yoff + t * pc.y_stride + r] = acc##t;

void main() {
  const uint wg = wg_index();
  tables_init(wg);
  const uint team = gl_LocalInvocationID.x / LANES, lane = gl_LocalInvocationID.x % LANES;
  const uint group = team / SPLIT, part = team % SPLIT;
  const uint r = wg * ROWS_PER_WG + group;
  // a row past the end is computed on the last row (uniform control flow for the barriers) and not written
  const uint row = min(r, pc.rows - 1u);
  const row_t R = row_begin(row, group);
  REP_NB(ACC_DECL)

  if (pc.fast != 0u) {
    const uint step = SPLIT * LANES;
    for (uint c0 = 0u; c0 < pc.cols; c0 += X_TILE) {  // uniform over the workgroup (barriers)
      const uint tv = min(X_TILE, pc.cols - c0) / 4u;  // vec4 in this tile
      barrier();
      for (uint v = gl_LocalInvocationID.x; v < NB * tv; v += WG_SIZE) {
        const uint t = v / tv, e = v % tv;
        if (t < pc.n) xsh[t * (X_TILE / 4) + xswz(e / XQ, e % XQ)] = xv[((pc.xoff + t * pc.x_stride + c0) >> 2) + e];
      }
      barrier();
      const uint nct = tv / XQ, k0 = c0 / CHUNK;
      uint kt = part * LANES + lane;
      for (; kt + (UNROLL - 1u) * step < nct; kt += UNROLL * step) {
        REP_U(FETCH)
        REP_U(CONSUME)
      }
      for (; kt < nct; kt += step) {
        FETCH(0)
        CONSUME(0)
      }
    }
  } else {
    for (uint c = part * LANES + lane; c < pc.cols; c += SPLIT * LANES) {
      const float w = decode_elem(R, row, c);
      REP_NB(GEN_T)
    }
  }

  REP_NB(REDUCE)
#if SPLIT > 1
  if (lane == 0u) {
    REP_NB(PART_ST)
  }
  barrier();
  if (part != 0u) return;
  REP_NB(PART_SUM)
#endif
  if (lane != 0u || r >= pc.rows) return;
  REP_NB(WRITE)
}
