// Every expert's pairs in blocks of 16 (the gathers moe_tc_gather.comp and moe_i8_gather.comp): off[e] = the
// exclusive prefix sum over experts of their pair counts rounded up to 16, so that expert e's blocks are
// off[e] / 16 ... off[e + 1] / 16 − 1. tile_offsets() builds off[0 .. TG_NE] in shared memory (WG_SIZE counts
// per round, one Hillis-Steele scan each; every invocation must call it) from the counts at lists[loff ...]
// (moe_group.comp's layout); tile_expert(q0) is the expert whose blocks hold pair row q0 (q0 < off[TG_NE]).
// Needs: a `lists` buffer of uint, TG_NE (experts + the shared one).
shared uint offs[TG_NE + 1];
shared uint tile_scan[WG_SIZE];

void tile_offsets(uint loff) {
  const uint lid = gl_LocalInvocationID.x;
  uint base = 0u;
  for (uint e0 = 0u; e0 < TG_NE; e0 += WG_SIZE) {  // uniform
    const uint e = e0 + lid;
    tile_scan[lid] = e < TG_NE ? (lists[loff + e] + 15u) & ~15u : 0u;
    barrier();
    for (uint s = 1u; s < WG_SIZE; s <<= 1) {  // inclusive prefix sum
      const uint v = lid >= s ? tile_scan[lid - s] : 0u;
      barrier();
      tile_scan[lid] += v;
      barrier();
    }
    if (e < TG_NE) offs[e + 1u] = base + tile_scan[lid];
    base += tile_scan[WG_SIZE - 1u];
    barrier();
  }
  if (lid == 0u) offs[0] = 0u;
  barrier();
}

// the largest e with off[e] <= q0 (bisection over the shared off[])
uint tile_expert(uint q0) {
  uint lo = 0u, hi = TG_NE;
  while (hi - lo > 1u) {
    const uint mid = (lo + hi) / 2u;
    if (offs[mid] <= q0) lo = mid;
    else hi = mid;
  }
  return lo;
}
