#version 460
#extension GL_GOOGLE_include_directive : require
// Lightning-indexer scores (dsv4-architecture.md §3.3; the CPU loops of dsv4_attention.cpp / dsv41_attention.cpp):
//   score[t, j] = Σ_h relu(q[t, h] · key[j]) · w[t, h]  for j < count[t];  −inf for count[t] ≤ j < n.
// One workgroup per (row t, tile of WG_SIZE / IX_HS keys); the IX_HS invocations of key j (lid / IX_HS) hold it in
// registers and split the heads (invocation hs takes heads hs, hs + IX_HS, …), whose q rows go through shared
// memory IX_QB heads at a time (broadcast reads; every load of a block issued before its stores: H200, 8-layer
// V4-Flash decode, 18.3 → 14.4 µs per CSA layer against the strided copy loop); their partial sums are added in hs
// order through shared memory.
// Dots in f32 (fma, channel order), the sums over heads in ACC. Defines: IX_HD (head_dim), IX_QB, IX_HS (a power
// of two dividing WG_SIZE): with 16 a decode step's few keys still spread over the head count's worth of lanes.
#include "common/base.glsl"

layout(push_constant) uniform ix_pc {
  uint rows, heads, n, tiles;
  uint qoff, koff, woff, coff;
  uint has_counts, ooff, pad0, pad1;
} pc;
layout(std430, binding = 0) readonly buffer Q { float qv[]; };
layout(std430, binding = 1) readonly buffer K { float kv[]; };
layout(std430, binding = 2) readonly buffer W { float wv[]; };
layout(std430, binding = 3) readonly buffer C { uint counts[]; };
layout(std430, binding = 4) writeonly buffer O { float ov[]; };

// q rows at a stride of IX_HD + 1 words: the IX_HS invocations of a key read the same channel of different heads
// at once, which an IX_HD-word stride (a multiple of the 32 banks) would put in one bank (an IX_HS-way conflict).
#define IX_QS (IX_HD + 1u)
shared float q_s[IX_QB * IX_QS];
shared float w_s[IX_QB];
shared ACC part_s[WG_SIZE];

void main() {
  const uint g = wg_index();
  if (g >= pc.rows * pc.tiles) return;  // uniform over the workgroup
  const uint row = g / pc.tiles, lid = gl_LocalInvocationID.x, hs = lid % IX_HS;
  const uint j = (g % pc.tiles) * (WG_SIZE / IX_HS) + lid / IX_HS;
  const uint cnt = pc.has_counts != 0u ? min(counts[pc.coff + row], pc.n) : pc.n;
  const bool live = j < cnt;
  float k[IX_HD];
  [[unroll]] for (uint c = 0u; c < IX_HD; ++c) k[c] = live ? kv[pc.koff + j * IX_HD + c] : 0.0;
  ACC s = ACC(0);
  for (uint h0 = 0u; h0 < pc.heads; h0 += IX_QB) {
    const uint hn = min(IX_QB, pc.heads - h0);
    barrier();  // the previous block's readers are done
    // every load of the block first (a compile-time count: all in flight together), then the stores
    float qt[(IX_QB * IX_HD + WG_SIZE - 1u) / WG_SIZE];
    [[unroll]] for (uint u = 0u; u < (IX_QB * IX_HD + WG_SIZE - 1u) / WG_SIZE; ++u) {
      const uint i = lid + u * WG_SIZE;
      qt[u] = i < hn * IX_HD ? qv[pc.qoff + (row * pc.heads + h0) * IX_HD + i] : 0.0;
    }
    [[unroll]] for (uint u = 0u; u < (IX_QB * IX_HD + WG_SIZE - 1u) / WG_SIZE; ++u) {
      const uint i = lid + u * WG_SIZE;
      if (i < hn * IX_HD) q_s[(i / IX_HD) * IX_QS + i % IX_HD] = qt[u];
    }
    if (lid < hn) w_s[lid] = wv[pc.woff + row * pc.heads + h0 + lid];
    barrier();
    if (live)
      for (uint h = hs; h < hn; h += IX_HS) {
        float d = 0.0;
        [[unroll]] for (uint c = 0u; c < IX_HD; ++c) d = fma(q_s[h * IX_QS + c], k[c], d);
        s += ACC(max(d, 0.0)) * ACC(w_s[h]);
      }
  }
  part_s[lid] = s;
  barrier();
  if (hs == 0u && j < pc.n) {
    ACC t = ACC(0);
    for (uint i = 0u; i < IX_HS; ++i) t += part_s[lid + i];
    ov[pc.ooff + row * pc.n + j] = live ? float(t) : -F32_INF;
  }
}
