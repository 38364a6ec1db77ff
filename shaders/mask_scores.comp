#version 460
#extension GL_GOOGLE_include_directive : require
// V4.1 candidate mask applied to scores, in place (dsv41_candidate_blocks + the uses_candidates masking of
// driver/model/dsv41_attention.cpp): score[row, j] ← −inf unless j < len and block j / bs is one of the row's k
// picks idx[row, ·] whose block maximum bm[row, pick] is not −inf (the CPU drops −inf picks). Slots of
// 0xFFFFFFFF (topk's past-n marker) or ≥ nb pick nothing. len = lens[row] when has_lens, else n.
// A workgroup owns bpw consecutive blocks of one row: it scans the row's k picks into a shared flag per owned
// block, then writes the entries of those blocks. Defines: MS_MAX_BLOCKS (shared capacity, ≥ bpw).
#include "common/base.glsl"

layout(push_constant) uniform ms_pc {
  uint rows, n, bs, nb;
  uint k, bpw, groups, soff;
  uint boff, ioff, loff, has_lens;
} pc;
layout(std430, binding = 0) buffer S { float sc[]; };
layout(std430, binding = 1) readonly buffer B { float bm[]; };
layout(std430, binding = 2) readonly buffer I { uint idx[]; };
layout(std430, binding = 3) readonly buffer L { uint lens[]; };

shared uint picked[MS_MAX_BLOCKS];

void main() {
  const uint g = wg_index();
  if (g >= pc.rows * pc.groups) return;  // uniform over the workgroup
  const uint row = g / pc.groups, b0 = (g % pc.groups) * pc.bpw, lid = gl_LocalInvocationID.x;
  const uint nbl = min(pc.bpw, pc.nb - b0);
  for (uint i = lid; i < nbl; i += WG_SIZE) picked[i] = 0u;
  barrier();
  for (uint q = lid; q < pc.k; q += WG_SIZE) {
    const uint p = idx[pc.ioff + row * pc.k + q];
    if (p >= b0 && p < b0 + nbl && bm[pc.boff + row * pc.nb + p] != -F32_INF) picked[p - b0] = 1u;
  }
  barrier();
  const uint len = pc.has_lens != 0u ? min(lens[pc.loff + row], pc.n) : pc.n;
  const uint j0 = b0 * pc.bs, j1 = min(pc.n, (b0 + nbl) * pc.bs), base = pc.soff + row * pc.n;
  for (uint j = j0 + lid; j < j1; j += WG_SIZE)
    if (j >= len || picked[(j - j0) / pc.bs] == 0u) sc[base + j] = -F32_INF;
}
