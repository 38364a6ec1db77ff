#version 460
#extension GL_GOOGLE_include_directive : require
#extension GL_EXT_shader_explicit_arithmetic_types_float16 : require
// Expert-grouped MoE on f16 tiles split by subgroups (kernels_moe.cpp moe_grouped_tc, matvec_tuning::moe_tiles = 2),
// step 2 of 5: every expert's pairs as f16 rows in expert order, in blocks of 16 rows laid out
// the way moe_tc.comp's 16 × 16 activation fragments are loaded. Expert e's rows start at block off[e] / 16,
// off = the exclusive prefix sum of the counts rounded up to 16 (moe_group.comp's counts); row off[e] + i is pair
// p = list_e[i]: its token's input x[p / KS] rounded to f16 (common/f16_sat.glsl: the rounding of gemm.comp's
// activation tile); rows past e's count up to the block's end are zero. A block of 16 rows × cols is stored as
// cols / 16 tiles of 16 rows × 16 columns, row-major inside a tile: element (r, c) at (c / 16)·256 + 16r + c % 16,
// so that a fragment is 512 contiguous bytes.
//
// Workgroup g owns block g: it builds off[] in shared memory (common/moe_tiles.glsl), finds its expert by bisection; workgroup 0 also writes off[0 .. ne] to binding 3.
// Bindings: 0 counts + lists (moe_group.comp's layout from word pc.loff), 1 x (f32, pc.xoff in floats), 2 xg (f16
// pairs, pc.goff in words), 3 off (pc.ooff).
// Defines: TG_NE (= E + MOE_SHARED), MOE_TOPK, MOE_SHARED.
#include "common/base.glsl"
#include "common/f16_sat.glsl"

layout(push_constant) uniform tg_pc {
  uint n, loff, xoff, cols, goff, ooff;
} pc;
layout(std430, binding = 0) readonly buffer Lists { uint lists[]; };
layout(std430, binding = 1) readonly buffer X4 { vec4 xv[]; };
layout(std430, binding = 2) writeonly buffer XG { uvec2 xg[]; };
layout(std430, binding = 3) writeonly buffer Off { uint offs_out[]; };

#define KS (MOE_TOPK + MOE_SHARED)
#include "common/moe_tiles.glsl"
shared uint row_src[16];  // x offset (vec4 units) of each of the block's rows; ~0u: a padding row

void main() {
  const uint lid = gl_LocalInvocationID.x, g = wg_index();
  tile_offsets(pc.loff);
  if (g == 0u)
    for (uint e = lid; e <= TG_NE; e += WG_SIZE) offs_out[pc.ooff + e] = offs[e];
  const uint q0 = 16u * g;
  if (q0 >= offs[TG_NE]) return;  // uniform: past the last block
  if (lid < 16u) {
    const uint lo = tile_expert(q0);  // the expert e with off[e] <= q0 < off[e + 1]
    const uint i = q0 - offs[lo] + lid;
    uint src = 0xFFFFFFFFu;
    if (i < lists[pc.loff + lo]) {
      const uint p = lists[pc.loff + TG_NE + lo * pc.n * MOE_TOPK + i];
      src = (pc.xoff >> 2) + (p / KS) * (pc.cols >> 2);
    }
    row_src[lid] = src;
  }
  barrier();
  // thread i: 4 values of tile j = i / 64, row r = (i / 4) % 16, columns 16j + 4(i % 4): the stores contiguous
  const uint nv = 4u * pc.cols;  // vec4 per block
  for (uint i = lid; i < nv; i += WG_SIZE) {
    const uint j = i / 64u, r = (i / 4u) % 16u, src = row_src[r];
    xg[(pc.goff >> 1) + g * nv + i] = src != 0xFFFFFFFFu ? h4sat(xv[src + 4u * j + i % 4u]) : uvec2(0u);
  }
}
