#version 460
#extension GL_GOOGLE_include_directive : require
// Lightning-indexer scores (dsv4-architecture.md §3.3; the CPU loops of dsv4_attention.cpp / dsv41_attention.cpp):
//   score[t, j] = Σ_h relu(q[t, h] · key[j]) · w[t, h]  for j < count[t];  −inf for count[t] ≤ j < n.
// One workgroup per (row t, tile of WG_SIZE keys); invocation lid holds key j = tile·WG_SIZE + lid in registers
// and runs over the heads, whose q rows go through shared memory IX_QB heads at a time (broadcast reads).
// Dots and the sum over heads in ACC (double where the device has it, as the CPU: the f32 products are exact there,
// so FP4-quantised q and keys — V4.1's indexer — give the CPU's scores bit for bit, ties included); f32 fma in
// channel order otherwise. Defines: IX_HD (head_dim), IX_QB.
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

shared float q_s[IX_QB * IX_HD];
shared float w_s[IX_QB];

void main() {
  const uint g = wg_index();
  if (g >= pc.rows * pc.tiles) return;  // uniform over the workgroup
  const uint row = g / pc.tiles, lid = gl_LocalInvocationID.x, j = (g % pc.tiles) * WG_SIZE + lid;
  const uint cnt = pc.has_counts != 0u ? min(counts[pc.coff + row], pc.n) : pc.n;
  const bool live = j < cnt;
  float k[IX_HD];
  [[unroll]] for (uint c = 0u; c < IX_HD; ++c) k[c] = live ? kv[pc.koff + j * IX_HD + c] : 0.0;
  ACC s = ACC(0);
  for (uint h0 = 0u; h0 < pc.heads; h0 += IX_QB) {
    const uint hn = min(IX_QB, pc.heads - h0);
    barrier();  // the previous block's readers are done
    for (uint i = lid; i < hn * IX_HD; i += WG_SIZE) q_s[i] = qv[pc.qoff + (row * pc.heads + h0) * IX_HD + i];
    if (lid < hn) w_s[lid] = wv[pc.woff + row * pc.heads + h0 + lid];
    barrier();
    if (live)
      for (uint h = 0u; h < hn; ++h) {
        ACC d = ACC(0);
        [[unroll]] for (uint c = 0u; c < IX_HD; ++c) d = fma(ACC(q_s[h * IX_HD + c]), ACC(k[c]), d);
        s += max(d, ACC(0)) * ACC(w_s[h]);
      }
  }
  if (j < pc.n) ov[pc.ooff + row * pc.n + j] = live ? float(s) : -F32_INF;
}
