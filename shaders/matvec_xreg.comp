#version 460
#extension GL_GOOGLE_include_directive : require
// y[r] = Σ_c W[r, c] · x[c] with f32 activations held in registers (matvec_tuning::x_source = 3): the batch-1
// product on the fast path (cols % CHUNK == 0, planes aligned) of devices with subgroup reductions.
//
// matvec_rows.comp reads a chunk's activations again for every row it multiplies (from shared memory or L1), so
// for 4-bit weights each weight byte costs 8 / RPT bytes of activation loads — the bound of its f32 products
// (docs/VULKAN.md "f32 products"). Here the roles turn: lane l of the KSPLIT subgroups that share a row team owns
// the chunks kc(s) = (s · KSPLIT + part) · LANES + l, s < XC, of EVERY row, loads their activations once into
// registers (XC · CHUNK floats), then walks its team's rows in NB batches of RPT: per row one load of each owned
// chunk (the subgroup's lanes read consecutive chunks: one contiguous run of bytes), its decode, and a dot product
// with the registers. The loads of a batch's RPT rows are issued before its first row is consumed. A chunk's
// values are summed unscaled and the sum scaled once (acc += S · C: one multiplication per chunk, not per weight).
// Per row, one subgroupAdd; the KSPLIT subgroups' sums meet in shared memory and are added in subgroup order.
//
// Batches share the activation registers and the workgroup's ladders (built once for all its rows) between
// RPT · NB rows while a batch holds only RPT rows' loads: on the H200, 4 rows × 4 batches (64–80 registers per
// invocation) beat 8 rows × 1 batch (124–159) and 8 rows with the next batch's loads in flight during the current
// one (slower still), docs/PERF.md "Thirty-seventh session".
// Defines: KSPLIT (any count, TEAMS % KSPLIT == 0), TEAMS (subgroups per workgroup), RPT (rows per team and
// batch), NB (batches), ROWS_PER_WG (= TEAMS / KSPLIT · RPT · NB), XC (chunks per lane), the format's. Lanes whose
// chunk is past the row's end hold zeros and skip it; rows past the end are computed on the last row, not written.
#include "common/base.glsl"
#include "common/formats.glsl"
#if TEAMS % KSPLIT != 0 || ROWS_PER_WG != TEAMS / KSPLIT * RPT * NB
#error "KSPLIT must divide TEAMS and ROWS_PER_WG = TEAMS / KSPLIT * RPT * NB"
#endif
#if CHUNK % 4 != 0
#error "a chunk is whole vec4s of activations"
#endif
#define XQ (CHUNK / 4)

layout(std430, binding = 3) readonly buffer X4 { vec4 xv[]; };
layout(std430, binding = 4) writeonly buffer Y { float ys[]; };

#if defined(FMT_FP8_B128) || defined(FMT_FP8_B32)
#define DEC4(R, Q, K, j) fp8_dec4(Q, j)
#define SCALE(R, Q) (256.0 * chunk_scale(R, Q))
#else
// decode4 is linear in its scale argument for every format: the unscaled values
#define DEC4(R, Q, K, j) decode4(R, Q, 1.0, K, j)
#define SCALE(R, Q) chunk_scale(R, Q)
#endif

#if KSPLIT > 1
shared float ksum[2 * TEAMS * RPT];  // [batch parity][subgroup][row of its team]
#endif

// Batch b of row team rteam: rows wg·ROWS_PER_WG + (b·TEAMS / KSPLIT + rteam)·RPT + i, i < RPT (the workgroup's
// teams work on neighbouring rows at a time); its ladder slots are those rows' places in the workgroup.
#define RTEAMS (TEAMS / KSPLIT)
#define LOAD_BATCH(b, q, R, row)                                                                    \
  {                                                                                                 \
    const uint first = wg * ROWS_PER_WG + ((b) * RTEAMS + rteam) * RPT;                             \
    [[unroll]] for (uint i = 0u; i < RPT; ++i) {                                                    \
      row[i] = min(first + i, pc.rows - 1u);                                                        \
      R[i] = row_begin(row[i], ((b) * RTEAMS + rteam) * RPT + i);                                   \
    }                                                                                               \
    [[unroll]] for (uint i = 0u; i < RPT; ++i)                                                      \
      [[unroll]] for (uint s = 0u; s < XC; ++s) q[i * XC + s] = fetch(R[i], row[i], min(kc[s], nct - 1u)); \
  }

void main() {
  const uint team = gl_LocalInvocationID.x / LANES, lane = gl_LocalInvocationID.x % LANES;
  const uint rteam = team / KSPLIT, part = team % KSPLIT;
  const uint wg = wg_index(), nct = pc.cols / CHUNK;

  uint kc[XC];
  [[unroll]] for (uint s = 0u; s < XC; ++s) kc[s] = (s * KSPLIT + part) * LANES + lane;
  // the first batch's loads in flight first (a chunk past the end loads the row's last one, not consumed)
  uint row[RPT];
  row_t R[RPT];
  raw_t q[RPT * XC];
  LOAD_BATCH(0u, q, R, row)
  vec4 xr[XC * XQ];
  [[unroll]] for (uint s = 0u; s < XC; ++s)
    [[unroll]] for (uint j = 0u; j < XQ; ++j)
      xr[s * XQ + j] = kc[s] < nct ? xv[(pc.xoff >> 2) + kc[s] * XQ + j] : vec4(0.0);
  tables_init(wg);  // every invocation: it may hold a barrier

  for (uint b = 0u; b < NB; ++b) {  // uniform over the workgroup
    // batch 0's loads were issued before the activations and the tables; later ones here (prefetching batch b + 1
    // during batch b doubled the registers and measured slower)
    if (b > 0u) LOAD_BATCH(b, q, R, row)
    const uint first = wg * ROWS_PER_WG + (b * RTEAMS + rteam) * RPT;
    float acc[RPT];
    [[unroll]] for (uint i = 0u; i < RPT; ++i) {
      acc[i] = 0.0;
      [[unroll]] for (uint s = 0u; s < XC; ++s) {
        if (kc[s] < nct) {
          const raw_t Q = q[i * XC + s];
          float C = 0.0;
          [[unroll]] for (uint j = 0u; j < XQ; ++j) C += dot(DEC4(R[i], Q, kc[s], j), xr[s * XQ + j]);
          acc[i] += SCALE(R[i], Q) * C;
        }
      }
      acc[i] = subgroupAdd(acc[i]);
    }
#if KSPLIT > 1
    const uint kb = (b & 1u) * TEAMS * RPT;  // alternate halves: one barrier per batch
    if (lane == 0u)
      [[unroll]] for (uint i = 0u; i < RPT; ++i) ksum[kb + team * RPT + i] = acc[i];
    barrier();
    if (part == 0u)
      for (uint i = lane; i < RPT; i += LANES) {
        float v = ksum[kb + rteam * KSPLIT * RPT + i];
        for (uint p = 1u; p < KSPLIT; ++p) v += ksum[kb + (rteam * KSPLIT + p) * RPT + i];
        if (first + i < pc.rows) ys[pc.yoff + first + i] = v;
      }
#else
    if (lane == 0u)
      [[unroll]] for (uint i = 0u; i < RPT; ++i)
        if (first + i < pc.rows) ys[pc.yoff + first + i] = acc[i];
#endif
  }
}
