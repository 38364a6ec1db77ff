// The sum of one token's routed slots in ascending expert id, ties in slot order (moe_down.comp's order):
// yv[j] is slot j's value, id[j] its expert. Slot j's rank is the number of slots before it in that order, so the
// sum needs no data-dependent loads (every id and value is loaded before the call). moe_sum.comp and the sum tail
// of matvec_rows.comp's MoE down rows call it, so their sums agree bit for bit. Needs MOE_TOPK.
float moe_ordered_sum(const uint id[MOE_TOPK], const float yv[MOE_TOPK]) {
  uint rank[MOE_TOPK];
  [[unroll]] for (uint j = 0u; j < MOE_TOPK; ++j) {
    uint before = 0u;
    [[unroll]] for (uint q = 0u; q < MOE_TOPK; ++q) before += (id[q] < id[j] || (id[q] == id[j] && q < j)) ? 1u : 0u;
    rank[j] = before;
  }
  float total = 0.0;
  [[unroll]] for (uint pos = 0u; pos < MOE_TOPK; ++pos) {  // the slot of rank pos, added pos-th
    float v = 0.0;
    [[unroll]] for (uint j = 0u; j < MOE_TOPK; ++j)
      if (rank[j] == pos) v = yv[j];
    total = pos == 0u ? v : total + v;
  }
  return total;
}
