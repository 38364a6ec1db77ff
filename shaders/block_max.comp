#version 460
#extension GL_GOOGLE_include_directive : require
// Block maxima of V4.1's candidate-block selection (dsv41_candidate_blocks, driver/model/dsv41_attention.cpp), one
// invocation per (row, block): bm[row, b] = max of score[row, b·bs .. min((b+1)·bs, len)) in index order with the
// comparison of std::max (m < v ? v : m: NaN never wins, the first of equal values stays), −inf for an empty
// block; the row's newest block (the one holding entry len − 1) is pinned to +inf. len = lens[row] when
// has_lens, else n (blocks past the row's length are −inf).
#include "common/base.glsl"

layout(push_constant) uniform bm_pc {
  uint rows, n, bs, nb;  // nb = ceil(n / bs) blocks per row
  uint soff, boff, loff, has_lens;
} pc;
layout(std430, binding = 0) readonly buffer S { float sc[]; };
layout(std430, binding = 1) writeonly buffer B { float bm[]; };
layout(std430, binding = 2) readonly buffer L { uint lens[]; };

void main() {
  const uint g = wg_index() * WG_SIZE + gl_LocalInvocationID.x;
  if (g >= pc.rows * pc.nb) return;
  const uint row = g / pc.nb, b = g % pc.nb;
  const uint len = pc.has_lens != 0u ? min(lens[pc.loff + row], pc.n) : pc.n;
  const uint j0 = b * pc.bs, j1 = min(j0 + pc.bs, len);
  float m = -F32_INF;
  if (len > 0u && b == (len - 1u) / pc.bs) {
    m = F32_INF;
  } else {
    const uint base = pc.soff + row * pc.n;
    // A zero maximum keeps the sign of the block's first zero (std::max never replaces −0 by +0): the NVIDIA
    // compiler turns `m < v ? v : m` into a max instruction that returns +0 for (−0, +0), so the sign is tracked
    // apart (H200 parity, `candidate_blocks` with tied ±0 maxima).
    float z = 0.0;
    bool zero_seen = false;
    for (uint j = j0; j < j1; ++j) {
      const float v = sc[base + j];
      if (m < v) m = v;
      if (v == 0.0 && !zero_seen) {
        z = v;
        zero_seen = true;
      }
    }
    if (m == 0.0) m = z;
  }
  bm[pc.boff + g] = m;
}
