#version 460
#extension GL_GOOGLE_include_directive : require
// out[(r0 + r) * cols + c] = W[r, c], bit-exactly F::decode_row (both the chunked and the element paths, so
// the parity suite proves the decoders the matvec uses). One row per team of LANES invocations.
// DQ_GATHER = 1 (kernels::embed_rows): output row i (< pc.n) is W[ids[xoff + i]] written pc.x_stride times
// (copies i·x_stride … i·x_stride + x_stride − 1: the hc copies of an embedding); an id ≥ rows writes NaN.
// Defines: ROWS_PER_WG (= TEAMS), DQ_GATHER and the format's.
#include "common/base.glsl"
#ifndef DQ_GATHER
#define DQ_GATHER 0
#endif
#if DQ_GATHER
layout(std430, binding = 3) readonly buffer IDS { uint ids[]; };
// team j of workgroup wg decodes the row of token wg·ROWS_PER_WG + j (per-row tables, e.g. the ladders, too)
#define TABLE_ROW(wg, j) ((wg) * ROWS_PER_WG + (j) < pc.n ? ids[pc.xoff + (wg) * ROWS_PER_WG + (j)] : 0xFFFFFFFFu)
#endif
#include "common/formats.glsl"

layout(std430, binding = 4) writeonly buffer OUT { float outs[]; };
layout(std430, binding = 4) writeonly buffer OUT4 { vec4 outv[]; };

void main() {
  const uint wg = wg_index();
  tables_init(wg);
  const uint team = gl_LocalInvocationID.x / LANES, lane = gl_LocalInvocationID.x % LANES;
  const uint i = wg * ROWS_PER_WG + team;
#if DQ_GATHER
  if (i >= pc.n) return;
  const uint r = ids[pc.xoff + i], copies = pc.x_stride;
  if (r >= pc.rows) {
    for (uint c = lane; c < pc.cols * copies; c += LANES) outs[pc.yoff + i * copies * pc.cols + c] = uintBitsToFloat(0x7FC00000u);
    return;
  }
#else
  const uint r = i, copies = 1u;
  if (r >= pc.rows) return;
#endif
  const uint o0 = pc.yoff + i * copies * pc.cols;  // the output row's first float
  const row_t R = row_begin(r, team);
  if (pc.fast != 0u) {
    const uint nch = pc.cols / CHUNK;
    for (uint k = lane; k < nch; k += LANES) {
      const raw_t q = fetch(R, r, k);
      const float s = chunk_scale(R, q);
      for (uint cp = 0u; cp < copies; ++cp) {
        const uint ob = (o0 + cp * pc.cols + k * CHUNK) >> 2;
        for (uint j = 0u; j < CHUNK / 4u; ++j) outv[ob + j] = decode4(R, q, s, k, j);
      }
    }
  } else {
    for (uint c = lane; c < pc.cols; c += LANES) {
      const float v = decode_elem(R, r, c);
      for (uint cp = 0u; cp < copies; ++cp) outs[o0 + cp * pc.cols + c] = v;
    }
  }
}
