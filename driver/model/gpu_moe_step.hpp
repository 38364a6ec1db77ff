#pragma once
// The experts of one decode step, shared by the V4 and V4.1 GPU graphs (dsv4_gpu.cpp, dsv41_gpu.cpp).
#include "cmfx/kernels/act_precision.hpp"
#include "cmfx/vk/kernels.hpp"

namespace cmfx::driver {

/// A shared expert kept apart from the stacked routed ones (another format: the FP8 shared expert of V4-Flash):
/// the caller records its gate/up products into g and u next to the router; record_experts records its SwiGLU (in
/// place in g) and down product (into out) next to the MoE's first two stages, and the next sublayer boundary adds
/// out to the MoE's output (kernels::hc_post's o_add) — so the MoE's sum can run in the tails of its down rows.
struct gpu_shared_apart {
  const gpu::gpu_matrix* down = nullptr;  ///< null: no shared expert apart
  gpu::view g, u, out;
  uint64_t inter = 0;
};

/// kernels::moe at batch 1 with the shared expert apart as its side work (no dependent step of its own on the int8
/// path); `prepared`: kernels::moe_prepare already quantised u into h. `cur` is read when the side work is recorded
/// (the expert cache may have moved it to a new command buffer before this call). Returns the vector the caller
/// adds to `out` (the shared expert's output: pass it as the next hc_post's o_add), or an empty view.
[[nodiscard]] inline gpu::view record_experts(gpu::kernels& k, gpu::commands*& cur, const gpu::gpu_moe& moe,
                                              const gpu_shared_apart& sh, gpu::view u, gpu::view ids,
                                              gpu::view weights, uint32_t top_k, float limit, gpu::view h,
                                              gpu::view out, act_precision act, gpu::view slot_map, bool prepared) {
  gpu::moe_extras mx;
  mx.prepared = prepared;
  if (sh.down) {
    mx.side = [&](uint32_t stage) {
      if (stage == 0) k.swiglu_clamp(*cur, sh.g, sh.u, sh.g, sh.inter, limit);
      if (stage == 1) k.matmul(*cur, *sh.down, sh.g, 1, sh.out);
    };
  }
  k.moe(*cur, moe, u, 1, ids, weights, top_k, limit, h, out, act, slot_map, mx);
  return sh.down ? sh.out : gpu::view();
}

}  // namespace cmfx::driver
