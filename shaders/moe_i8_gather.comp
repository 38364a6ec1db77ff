#version 460
#extension GL_GOOGLE_include_directive : require
// Expert-grouped int8 MoE on the tensor cores (kernels_moe.cpp moe_grouped_i8 with matvec_tuning::moe_i8_tc), the
// gather in front of each product (moe_i8_tc.comp): every expert's pairs' quantised activation vectors
// (common/act_q8.glsl's layout: quantize_act.comp for x, the SwiGLU quantisation for h) copied into tiles of 16
// pairs in expert order (common/moe_tiles.glsl's off[]: expert e's tiles are off[e] / 16 ...), each tile laid out
// the way moe_i8_tc.comp loads its activation fragments. A tile of B blocks of 32 values is I8T_BLOCK_WORDS·B
// words (kernels::moe_i8_tile_block_words: 144):
//   word 128·kb + 8·t + w   (kb < B, t < 16, w < 8): packed word w of block kb of the tile's pair t (the bytes in
//                           the vector's plane order, so that they pair with the weights' bit planes)
//   word 128·B + B·t + kb:  that block's sx / 2 (f32; a pair's scales contiguous, for vector loads)
// Rows past an expert's count up to the tile's end are zero (quantised values and scales).
// Workgroup g owns tile g; workgroup 0 also writes off[0 .. TG_NE] to binding 3 (the product's tile → expert map).
// Bindings: 0 counts + lists (moe_group.comp's layout from word pc.loff), 1 the vectors (pc.xoff words, one per
// ACT_VEC_WORDS(B) words), 2 the tiles (pc.goff words, a multiple of 4), 3 off (pc.ooff).
// Defines: TG_NE (= E + MOE_SHARED), MOE_TOPK, MOE_SHARED, MOE_X_TOKEN (1: pair p reads its token's vector p / KS,
// 0: its own), the weight format's (act_q8.glsl's plane order).
#include "common/base.glsl"
#include "common/act_q8.glsl"

layout(push_constant) uniform tg_pc {
  uint n, loff, xoff, blocks, goff, ooff;
} pc;
layout(std430, binding = 0) readonly buffer Lists { uint lists[]; };
layout(std430, binding = 1) readonly buffer X4 { uvec4 xv4[]; };
layout(std430, binding = 1) readonly buffer X1 { uint xv1[]; };
layout(std430, binding = 2) writeonly buffer G4 { uvec4 g4[]; };
layout(std430, binding = 2) writeonly buffer G1 { uint g1[]; };
layout(std430, binding = 3) writeonly buffer Off { uint offs_out[]; };

#define KS (MOE_TOPK + MOE_SHARED)
#if MOE_X_TOKEN
#define XVEC(p) ((p) / KS)
#else
#define XVEC(p) (p)
#endif
#include "common/moe_tiles.glsl"
#include "common/moe_i8_tiles.glsl"
shared uint row_src[16];  // first word of each of the tile's pairs' vectors; ~0u: a padding row

void main() {
  const uint lid = gl_LocalInvocationID.x, g = wg_index();
  tile_offsets(pc.loff);
  if (g == 0u)
    for (uint e = lid; e <= TG_NE; e += WG_SIZE) offs_out[pc.ooff + e] = offs[e];
  const uint q0 = 16u * g;
  if (q0 >= offs[TG_NE]) return;  // uniform: past the last tile
  if (lid < 16u) {
    const uint e = tile_expert(q0);
    const uint i = q0 - offs[e] + lid;
    uint src = 0xFFFFFFFFu;
    if (i < lists[pc.loff + e])
      src = pc.xoff + XVEC(lists[pc.loff + TG_NE + e * pc.n * MOE_TOPK + i]) * ACT_VEC_WORDS(pc.blocks);
    row_src[lid] = src;
  }
  barrier();
  const uint B = pc.blocks, tw = I8T_BLOCK_WORDS * B, base = pc.goff + g * tw;
  // quantised values: uvec4 i = (kb, t, half): contiguous stores
  for (uint i = lid; i < 32u * B; i += WG_SIZE) {
    const uint kb = i / 32u, t = (i / 2u) % 16u, src = row_src[t];
    g4[(base >> 2) + i] = src != 0xFFFFFFFFu ? xv4[(src >> 2) + 2u * kb + (i & 1u)] : uvec4(0u);
  }
  // scales: word (t, kb)
  for (uint i = lid; i < 16u * B; i += WG_SIZE) {
    const uint t = i / B, kb = i % B, src = row_src[t];
    g1[base + I8T_SCALE_WORD(B) + i] = src != 0xFFFFFFFFu ? xv1[src + ACT_SCALE_WORD(B) + kb] : 0u;
  }
}
