#version 460
#extension GL_GOOGLE_include_directive : require
// out[(r0 + r) * cols + c] = W[r, c], bit-exactly F::decode_row (both the chunked and the element paths, so
// the parity suite proves the decoders the matvec uses). One row per team of LANES invocations.
// Defines: ROWS_PER_WG (= TEAMS) and the format's.
#include "common/base.glsl"
#include "common/formats.glsl"

layout(std430, binding = 4) writeonly buffer OUT { float outs[]; };
layout(std430, binding = 4) writeonly buffer OUT4 { vec4 outv[]; };

void main() {
  const uint wg = wg_index();
  tables_init(wg);
  const uint team = gl_LocalInvocationID.x / LANES, lane = gl_LocalInvocationID.x % LANES;
  const uint r = wg * ROWS_PER_WG + team;
  if (r >= pc.rows) return;
  const row_t R = row_begin(r, team);
  if (pc.fast != 0u) {
    const uint nch = pc.cols / CHUNK;
    for (uint k = lane; k < nch; k += LANES) {
      const raw_t q = fetch(R, r, k);
      const float s = chunk_scale(R, q);
      const uint ob = (pc.yoff + r * pc.cols + k * CHUNK) >> 2;
      for (uint j = 0u; j < CHUNK / 4u; ++j) outv[ob + j] = decode4(R, q, s, k, j);
    }
  } else {
    for (uint c = lane; c < pc.cols; c += LANES) outs[pc.yoff + r * pc.cols + c] = decode_elem(R, r, c);
  }
}
