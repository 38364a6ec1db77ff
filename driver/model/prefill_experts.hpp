#pragma once
// Which activation precision the experts of a V4 / V4.1 prefill chunk run in on the GPU
// (dsv4_gpu_options::prefill_experts, the `--prefill-experts` flag of `cmfx run`, `cmfx ppl` and `cmfx bench`).
#include "cmfx/formats/format.hpp"
#include "cmfx/kernels/act_precision.hpp"

namespace cmfx::driver {

enum class prefill_expert_mode {
  /// The faster of the two per expert format, by the H200 kernel benchmarks (docs/PERF.md "Fourteenth session" and
  /// "Twenty-eighth session", 256 experts of 4096 × 2048, 512 tokens): with expert_act = i8 the ladders (q4tp, q2tp)
  /// keep the int8 grouped kernels (q2tp 3.57 ms against 6.89 on f16 tiles) and every other format takes the f16
  /// tiles (MXFP4 5.31 ms on gemm.comp's tiles against 6.28 in int8); with expert_act = f32, the f16 tiles (the
  /// --gemm precision).
  fastest,
  f16,  ///< f32 activations into kernels::moe: the --gemm tiles (f16: gemm.comp's), whatever --act says
  act,  ///< expert_act's precision (i8: the int8 grouped kernels, moe_rows_g8.comp)
};

/// The prefill chunks' router (E rows, 256 on V4-Flash) on the tensor cores' largest 128 × 128 tiles is 8
/// workgroups of the full K, as long as the 16-times larger shared gate/up products beside it (H200: router alone
/// 9.85 ms per 512-token chunk, with them 16.9): its grid takes smaller tiles until it has this many workgroups (the
/// smallest tiles: 32 for a 512-token chunk). Only the router: smaller tiles for every small product lost as much
/// elsewhere (docs/PERF.md "Twenty-sixth session"). kernels::matmul's min_groups, V4 and V4.1 chunks.
inline constexpr uint32_t prefill_router_min_groups = 128;

/// The activation precision kernels::moe gets for a chunk whose experts are in format f.
inline act_precision prefill_expert_act(prefill_expert_mode mode, act_precision expert_act, format f) {
  if (mode == prefill_expert_mode::f16) return act_precision::f32;
  if (mode == prefill_expert_mode::act) return expert_act;
  const bool ladder = f == format::q4tp || f == format::q2tp;
  return expert_act == act_precision::i8 && ladder ? act_precision::i8 : act_precision::f32;
}

}  // namespace cmfx::driver
