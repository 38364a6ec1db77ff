#pragma once
// The MoE sublayer of one decode step, shared by the V4 and V4.1 GPU graphs (dsv4_gpu.cpp, dsv41_gpu.cpp): the
// router, the routing, the expert cache's hand-over and the experts (record_moe_sublayer), and the experts alone
// with a shared expert kept apart (record_experts).
#include <cstdint>

#include "cmfx/kernels/act_precision.hpp"
#include "cmfx/ops/routing.hpp"
#include "cmfx/vk/kernels.hpp"
#include "gpu_dense_i8.hpp"
#include "gpu_expert_cache.hpp"
#include "gpu_recording.hpp"

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

/// What a decode step's MoE sublayer reads and writes besides its layer's weights (record_moe_sublayer).
struct gpu_moe_sublayer_io {
  gpu::kernels::hc_shape sh;
  gpu::view partials;  ///< the boundary's mix partials: the FFN's Sinkhorn reads them
  gpu::view coeff;     ///< the FFN site's coefficients: the Sinkhorn writes their C
  gpu::view u;         ///< the sublayer's input (ffn_norm of the collapse)
  const gpu_act_q8_slots* q_u = nullptr;  ///< u's int8 copies (the shared expert apart)
  gpu::view rlogits, moe_h, moe_out;      ///< router logits, the experts' scratch, the routed sum
  gpu::view sh_g, sh_u, sh_out;           ///< the shared expert apart: gate, up, output
  route_config rc;
  uint32_t experts = 0;  ///< routed experts (the router's rows)
  float limit = 0;       ///< the SwiGLU clamp
  uint64_t inter = 0;    ///< the shared expert's width
  act_precision act = act_precision::f32;  ///< the experts' activations
  bool fuse_route = true;                  ///< the routing in the router's dispatch where kernels::router_route can
  /// Hash routing (V4's first layers): the token-to-experts table, the vocabulary and the token id's buffer; an empty
  /// table routes by score.
  gpu::view tid2eid, token;
  uint32_t vocab = 0;
};

/// Records layer l's MoE sublayer of a decode step into *cur after its boundary: the FFN's Sinkhorn, the router with
/// x's int8 copy for the experts and the shared expert's u (one concurrent group), the routing (in the router's
/// dispatch with fuse_route, else after it), the shared expert's gate/up beside the routing, and — where the step is
/// segmented (the expert cache) — the selected ids (and the CPU experts' inputs) handed to the host before cut();
/// then the experts (record_experts), and the CPU experts' sum in a part of its own. Layer: the graph's layer (gate,
/// gate_bias, route_idx, route_w, moe, shared_apart, sh_gate / sh_up / sh_down, hc_ffn_base / hc_ffn_scale).
/// Returns the vector the next boundary adds (the shared expert apart), or an empty view.
template <class Layer, class Cut>
[[nodiscard]] gpu::view record_moe_sublayer(gpu::kernels& k, const gpu_dense_act& da, gpu::commands*& cur,
                                            gpu_stamps& ts, const Layer& G, uint32_t l, const gpu_moe_sublayer_io& s,
                                            gpu_expert_cache& cache, bool segmented, Cut&& cut) {
  const uint32_t K = s.rc.top_k;
  const bool hash = bool(s.tid2eid);
  cur->begin_concurrent();
  k.hc_sinkhorn(*cur, s.sh, s.partials, G.hc_ffn_base, G.hc_ffn_scale, 1, s.coeff);
  const bool routed = s.fuse_route && k.router_route(*cur, G.gate, s.u, s.rlogits, G.gate_bias, s.tid2eid, s.vocab,
                                                     s.token, s.rc, G.route_idx, G.route_w);
  if (!routed) k.matmul(*cur, G.gate, s.u, 1, s.rlogits);
  const bool prepared = s.act == act_precision::i8 && k.moe_prepare(*cur, G.moe, s.u, K, s.moe_h);
  if (G.shared_apart) da.quantize(*cur, {&G.sh_gate, &G.sh_up}, s.u, *s.q_u);
  cur->end_concurrent();
  ts.op(routed ? "router + route (+ x int8) (concurrent)" : "router (+ x int8) (concurrent)");
  // the FP8 shared expert's gate/up beside the routing (one workgroup): off the router's critical path
  if (!routed || G.shared_apart) {
    cur->begin_concurrent();
    if (!routed && hash)
      k.route_hash(*cur, s.rlogits, s.tid2eid, s.vocab, s.token, 1, s.experts, s.rc, gpu::view(), G.route_idx,
                   G.route_w);
    else if (!routed)
      k.route_score(*cur, s.rlogits, G.gate_bias, 1, s.experts, s.rc, gpu::view(), G.route_idx, G.route_w);
    if (G.shared_apart) {
      da.matvec(*cur, G.sh_gate, s.u, *s.q_u, s.sh_g);
      da.matvec(*cur, G.sh_up, s.u, *s.q_u, s.sh_u);
    }
    cur->end_concurrent();
    ts.op(routed ? "shared gate/up (concurrent)" : "route (+ shared gate/up) (concurrent)");
  }
  ts.mark(&gpu_graph_profile::route);
  if (segmented) {  // the selected ids to the host; the expert cache makes those experts resident here
    cur->copy(G.route_idx, cache.ids_slot(l), uint64_t(K) * 4);
    if (cache.cpu_fallback()) {  // and what the host needs to run the experts it keeps (--cold-experts cpu)
      cur->copy(G.route_w, cache.weights_slot(l), uint64_t(K) * 4);
      cur->copy(s.u, cache.input_slot(l), cache.input_slot(l).bytes);
    }
    cut();
    // the routing weights with the experts the host runs zeroed (written by the host before this part)
    if (cache.cpu_fallback()) cur->copy(cache.weights_in(l), G.route_w, uint64_t(K) * 4);
  }
  const gpu_shared_apart sha{G.shared_apart ? &G.sh_down : nullptr, s.sh_g, s.sh_u, s.sh_out, s.inter};
  const gpu::view add = record_experts(k, cur, G.moe, sha, s.u, G.route_idx, G.route_w, K, s.limit, s.moe_h,
                                       s.moe_out, s.act, cache.slot_map(l), prepared);
  if (segmented && cache.cpu_fallback()) {  // a new part: the host computes its experts while this one runs
    cut();
    k.add(*cur, cache.cpu_sum(l), s.moe_out, cache.cpu_sum(l).bytes / 4);
  }
  ts.op("moe (+ shared expert apart, concurrent)");
  ts.mark(&gpu_graph_profile::experts);
  return add;
}

}  // namespace cmfx::driver
