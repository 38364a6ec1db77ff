// Internal to cmfx_vk: the pieces kernels::moe's paths share — defined in kernels_moe.cpp (the common steps) and
// kernels_moe_i8.cpp (the int8-activation paths); each definition carries its full comment.
#pragma once

#include <cstdint>
#include <string>

#include "kernels_ops.hpp"

namespace cmfx::gpu::moe_parts {

/// The expert-cache defines (MOE_SLOTS, MOE_E) of a cached layer; empty for a resident one.
std::string slot_defines(const gpu_moe& m);
/// The defines of moe_up / moe_down (.comp and the _g variants) for matrix w.
std::string moe_defines(const detail::op_env& e, const gpu_matrix& w, uint32_t rpw, uint32_t top_k, const gpu_moe& m,
                        float limit);
/// out [n, d] = Σ of y [n·S, d] over each token's slots (moe_sum.comp), + add where given.
/// ignore_slots: every pair's row is in y whatever the slot map holds now (kernels::moe_pass_sum).
void moe_sum(const detail::op_env& e, commands& c, const gpu_moe& m, uint32_t n, uint32_t top_k, view y, view ids,
             view out, view slot_map, view add = {}, bool ignore_slots = false);
/// hq = int8(SwiGLU(gu) · w) per (token, slot) pair, packed for the down matrix's format (quantize_act.comp).
void swiglu_quantize(const detail::op_env& e, commands& c, const gpu_moe& m, uint32_t top_k, float limit,
                     uint64_t pairs, const detail::bound& gub, const detail::bound& hqb, const detail::bound& wb);
/// The expert-grouped paths' pair lists (moe_group.comp): their words, and the dispatch that fills them at lb.
uint64_t grouped_list_words(const gpu_moe& m, uint32_t n, uint32_t top_k);
/// pass (a bound slot map): only the experts it holds get their pairs, the shared expert only with pass_shared
/// (moe_extras::pass).
void pair_lists(const detail::op_env& e, commands& c, const gpu_moe& m, uint32_t n, uint32_t top_k,
                const detail::bound& ib, const detail::bound& lb, const detail::bound* pass = nullptr,
                bool pass_shared = false);
/// Whether both expert matrices of m bind on the chunked fast path.
bool planes_fast(const detail::op_env& e, const gpu_moe& m);
/// The scratch h of the expert-grouped paths: [h | gu | y | the pair lists], each part on 16 bytes.
struct grouped_scratch {
  uint64_t o_gu = 0, o_y = 0, o_l = 0, l_bytes = 0;
};
grouped_scratch grouped_layout(const gpu_moe& m, uint32_t n, uint32_t top_k);

/// Batch 1 with int8 activations (kernels_moe_i8.cpp); false, recording nothing, where the path does not apply.
bool moe_rows_i8(kernels& k, kernels::impl& p, const detail::op_env& e, commands& c, const gpu_moe& m, view x,
                 view ids, view weights, uint32_t top_k, float limit, view h, view out, view slot_map,
                 const moe_extras& ex);
/// Where the n >= 2 int8 path applies (its formats, shapes, scratch and alignment): its work split and scratch layout.
struct grouped_i8_plan {
  bool ok = false;
  uint32_t rpt = 0, rpw = 0;  // rows per subgroup, per workgroup
  grouped_scratch gs;
  uint64_t hq_bytes = 0, o_xq = 0, xq_bytes = 0;  // h: quantised SwiGLU rows, then (at o_xq) quantised x
};
grouped_i8_plan plan_grouped_i8(const kernels& k, const kernels::impl& p, const detail::op_env& e, const gpu_moe& m,
                                uint32_t n, uint32_t top_k, view h);
/// n >= 2 with int8 activations (kernels_moe_i8.cpp); false, recording nothing, where the path does not apply.
bool moe_grouped_i8(kernels& k, const kernels::impl& p, const detail::op_env& e, commands& c, const gpu_moe& m, view x,
                    uint32_t n, view ids, view weights, uint32_t top_k, float limit, view h, view out,
                    view slot_map, const moe_extras* pass = nullptr);

}  // namespace cmfx::gpu::moe_parts
