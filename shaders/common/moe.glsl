// Shared by moe_up.comp and moe_down.comp: one row of a stacked expert matrix (common/formats.glsl decoders)
// dotted with an activation vector by one team of LANES invocations, and the team reduction.
// The workgroup is TEAMS teams; a team owns one row (teams ≥ ROWS_PER_WG idle but take part in the barriers).
// Fast path (pc.fast, a 16-byte aligned activation): lane l takes chunks l, l + LANES, … — fetch / chunk_scale /
// decode4 as matvec.comp; otherwise the element-wise decode_elem. MOE_SUB > 1 (formats with HAS_CHUNK_WORDS): a
// chunk's words are shared by MOE_SUB lanes, lane l taking units l, l + LANES, … of 1/MOE_SUB chunk each, so that
// the team's activation loads touch fewer cache lines (matvec_rows.comp SUB).

layout(std430, binding = 3) readonly buffer X { float xs[]; };
layout(std430, binding = 3) readonly buffer X4 { vec4 xv[]; };

#define XQ (CHUNK / 4)
#ifndef MOE_SUB
#define MOE_SUB 1
#endif
#if MOE_SUB > 1 && (!HAS_CHUNK_WORDS || CHUNK_WORDS % MOE_SUB != 0 || XQ % MOE_SUB != 0)
#error "MOE_SUB splits whole words of a chunk"
#endif

#if !REDUCE_SUBGROUP
shared float team_red[WG_SIZE];
#endif
// Sum over the LANES invocations of a team; every invocation of the workgroup calls it (barriers).
float team_sum(float v) {
#if REDUCE_SUBGROUP
  return subgroupAdd(v);
#else
  const uint id = gl_LocalInvocationID.x, lane = id % LANES, team = id / LANES;
  team_red[id] = v;
  barrier();
  for (uint s = LANES / 2u; s > 0u; s >>= 1) {
    if (lane < s) team_red[id] += team_red[id + s];
    barrier();
  }
  const float t = team_red[team * LANES];
  barrier();
  return t;
#endif
}

// Σ_c W[row, c] · x[xb + c] over this lane's share of the columns (not yet reduced over the team).
float row_dot_part(row_t R, uint row, uint xb, uint lane) {
  float acc = 0.0;
  if (pc.fast != 0u && (xb & 3u) == 0u) {
    const uint nc = pc.cols / CHUNK, x4 = xb >> 2;
#if MOE_SUB > 1
    for (uint u = lane; u < nc * MOE_SUB; u += LANES) {
      const uint k = u / MOE_SUB, p = u % MOE_SUB;
      const raw_t q = fetch_words(R, row, k, p, CHUNK_WORDS / MOE_SUB);
      const float s = chunk_scale(R, q);
      [[unroll]] for (uint j = 0u; j < XQ / MOE_SUB; ++j)
        acc += dot(decode4(R, q, s, k, j), xv[x4 + k * XQ + p * (XQ / MOE_SUB) + j]);
    }
#else
    for (uint k = lane; k < nc; k += LANES) {
      const raw_t q = fetch(R, row, k);
      const float s = chunk_scale(R, q);
      [[unroll]] for (uint j = 0u; j < XQ; ++j) acc += dot(decode4(R, q, s, k, j), xv[x4 + k * XQ + j]);
    }
#endif
  } else {
    for (uint c = lane; c < pc.cols; c += LANES) acc += decode_elem(R, row, c) * xs[xb + c];
  }
  return acc;
}
