// Shared by moe_up_g.comp and moe_down_g.comp (the expert-grouped MoE, kernels::moe with n >= 2): one row of a
// stacked expert matrix dotted with MOE_NB activation vectors at once, so each weight chunk is fetched and decoded
// once per tile of pairs. Per vector the lane's partial sum is formed in row_dot_part's order (common/moe.glsl).
// Requires common/moe.glsl (bindings X / X4, team_sum).
#ifndef MOE_NB
#define MOE_NB 8
#endif

// acc[t] = this lane's share of Σ_c W[row, c] · x[xb[t] + c]; fast: every xb[t] is a multiple of 4.
void rows_dot_part(row_t R, uint row, uint xb[MOE_NB], bool fast, uint lane, inout float acc[MOE_NB]) {
  if (fast) {
    const uint nc = pc.cols / CHUNK;
    for (uint k = lane; k < nc; k += LANES) {
      const raw_t q = fetch(R, row, k);
      const float s = chunk_scale(R, q);
      [[unroll]] for (uint j = 0u; j < XQ; ++j) {
        const vec4 w4 = decode4(R, q, s, k, j);
        [[unroll]] for (uint t = 0u; t < MOE_NB; ++t) acc[t] += dot(w4, xv[(xb[t] >> 2) + k * XQ + j]);
      }
    }
  } else {
    for (uint c = lane; c < pc.cols; c += LANES) {
      const float w = decode_elem(R, row, c);
      [[unroll]] for (uint t = 0u; t < MOE_NB; ++t) acc[t] += w * xs[xb[t] + c];
    }
  }
}
