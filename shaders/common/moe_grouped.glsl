// Shared by moe_up_g.comp and moe_down_g.comp (the expert-grouped MoE, kernels::moe with n >= 2): one row of a
// stacked expert matrix dotted with MOE_NB activation vectors at once, so each weight chunk is fetched and decoded
// once per tile of pairs. Per vector the lane's partial sum is formed in row_dot_part's order (common/moe.glsl).
// Everything is unrolled by the preprocessor (accumulators acc0.., activation offsets xb0..): no per-invocation
// arrays that a driver could leave in local memory. Requires common/moe.glsl (bindings X / X4, team_sum).
#ifndef MOE_NB
#define MOE_NB 8
#endif
#if MOE_NB == 8
#define G_REP(M) M(0) M(1) M(2) M(3) M(4) M(5) M(6) M(7)
#elif MOE_NB == 16
#define G_REP(M) M(0) M(1) M(2) M(3) M(4) M(5) M(6) M(7) M(8) M(9) M(10) M(11) M(12) M(13) M(14) M(15)
#else
#error "MOE_NB must be 8 or 16"
#endif
#if XQ == 1
#define G_REP_J(M) M(0)
#elif XQ == 2
#define G_REP_J(M) M(0) M(1)
#elif XQ == 4
#define G_REP_J(M) M(0) M(1) M(2) M(3)
#elif XQ == 8
#define G_REP_J(M) M(0) M(1) M(2) M(3) M(4) M(5) M(6) M(7)
#endif

// The caller defines G_XB(t): the float offset of pair t's activation vector in the tile (t a literal).
#define G_DECL(t) float acc##t = 0.0; const uint xb##t = G_XB(t);
#define G_FMA4(t) acc##t += dot(W4, xv[(xb##t >> 2) + K * XQ + J]);
#define G_J(j)                                 \
  {                                            \
    const uint J = j;                          \
    const vec4 W4 = decode4(R_, Q_, S_, K, J); \
    G_REP(G_FMA4)                              \
  }
#define G_FMA1(t) acc##t += w * xs[xb##t + c];
#define G_RED(t) acc##t = team_sum(acc##t);

// acc0.. = Σ_c W[row, c] · x[xb_t + c] reduced over the team (every invocation of the workgroup takes part).
#define G_TILE_DOT(R_IN, ROW, FAST, LANE)                                   \
  G_REP(G_DECL)                                                             \
  {                                                                         \
    const row_t R_ = R_IN;                                                  \
    if (FAST) {                                                             \
      const uint nc = pc.cols / CHUNK;                                      \
      for (uint K = LANE; K < nc; K += LANES) {                             \
        const raw_t Q_ = fetch(R_, ROW, K);                                 \
        const float S_ = chunk_scale(R_, Q_);                               \
        G_REP_J(G_J)                                                        \
      }                                                                     \
    } else {                                                                \
      for (uint c = LANE; c < pc.cols; c += LANES) {                        \
        const float w = decode_elem(R_, ROW, c);                            \
        G_REP(G_FMA1)                                                       \
      }                                                                     \
    }                                                                       \
  }                                                                         \
  G_REP(G_RED)
