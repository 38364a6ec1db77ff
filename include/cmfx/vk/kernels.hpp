#pragma once
/// @file kernels.hpp
/// @brief GPU kernels over a gpu::device: matvec / small-batch GEMM of every weight format of all_formats, exact
///        dequantisation, RMSNorm, RoPE, softmax with sink, exact top-k, clamped SwiGLU. The contracts are those
///        of the CPU ops (include/cmfx/ops/, include/cmfx/ref/); docs/VULKAN.md gives the tolerances.
///
/// Shaders are GLSL files (shaders/) compiled at run time by glslang; each format's constants reach GLSL as
/// #defines generated from its C++ trait. Pipelines are built on first use (or by prepare()) and cached.
/// Every call records into `commands`; nothing runs until device::submit.
#include <algorithm>
#include <cstdint>
#include <functional>
#include <memory>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "cmfx/formats/format.hpp"
#include "cmfx/kernels/act_precision.hpp"
#include "cmfx/ops/routing.hpp"
#include "cmfx/vk/device.hpp"
#include "cmfx/vk/gemm_precision.hpp"

namespace cmfx {
struct expert_view;  // kernels/moe.hpp
}

namespace cmfx::gpu {

/// A weight matrix resident on the device: the payload exactly as the file holds it (plus external scales).
struct gpu_matrix {
  format fmt = format::f32;
  scale_encoding scale_enc = scale_encoding::none;
  uint64_t rows = 0, cols = 0;
  buffer data, scale;
};

/// Checks a hash-routing table [V, top_k] (int32, or f32 in some conversions) on the host — every entry an integer
/// expert id in [0, experts), else usage_error naming the entry — and uploads it as uint32.
buffer upload_tid2eid(device& dev, std::span<const int32_t> t, uint32_t top_k, uint32_t experts);
buffer upload_tid2eid(device& dev, std::span<const float> t, uint32_t top_k, uint32_t experts);

/// Copies a host matrix (format f) to the device. Throws usage_error for shapes the format cannot hold.
gpu_matrix upload_matrix(device& dev, format f, const matrix_view& w);

/// The GLSL #define lines of format f (the preamble of every format-specialised shader): generated from the
/// format trait, exposed for tests and docs.
std::string format_defines(format f, scale_encoding enc);
/// The ACT_T_* #define lines of common/act_q8.glsl that pack int8 activation vectors for format f's integer-dot
/// products (q4tp, q2tp, MXFP4) in a shader whose own weights are in another format (the batch-1 MoE's SwiGLU tail
/// packs h for the down matrix). usage_error for other formats.
std::string act_target_defines(format f);

/// Expert matrices of one MoE layer stacked into one device matrix: expert e's rows are rows
/// [e·rows_per_expert, (e+1)·rows_per_expert) of `w`, in the format's own layout of the stacked [count·rows, cols]
/// matrix (each plane is the concatenation of the experts' planes). For the fused gate/up tensor the list is
/// gate_0, up_0, gate_1, up_1, … (2 matrices per expert, see upload_moe).
struct gpu_experts {
  gpu_matrix w;
  uint32_t count = 0;          ///< matrices stacked
  uint64_t rows_per_expert = 0;
};

/// Stacks `mats` (same format f, shape and scale encoding; the per-expert matrix_views moe.hpp receives) into one
/// device matrix. Throws usage_error naming the expert for a mismatch, and for layouts that cannot be stacked:
/// q8_2f (one column-scale vector per matrix), FP8 scale tiles or q4 groups that would straddle two experts.
gpu_experts upload_experts(device& dev, format f, std::span<const matrix_view> mats);

/// A MoE layer on the device: gate and up of every expert in one stacked matrix (gate_e, up_e per expert), down
/// [·d, I]. The shared expert, when uploaded, is stacked as expert `experts` (after the routed ones). Built by
/// upload_moe from the expert_views of kernels/moe.hpp.
struct gpu_moe {
  gpu_experts gate_up;  ///< 2(E + shared) matrices [I, d]
  gpu_experts down;     ///< E + shared matrices [d, I]
  uint32_t experts = 0;  ///< routed experts
  bool shared = false;   ///< a shared expert follows the routed ones
  uint64_t dim = 0, inter = 0;
  /// 0: every routed expert resident, expert e at stacked index e. > 0 (an expert cache, alloc_moe_slots): the
  /// stacked matrices hold `slots` routed experts at indices 0..slots−1 and the shared expert (if any) at index
  /// `slots`; routed expert e is read from stacked index slot_map[e] (kernels::moe's slot_map).
  uint32_t slots = 0;
};

/// Uploads the experts of one layer (gate/up/down of every expert: one format per role, equal shapes), and the
/// shared expert (or nullptr) when it has the routed experts' formats and shapes — else usage_error: run it with
/// matmul / swiglu_clamp / matmul instead.
gpu_moe upload_moe(device& dev, std::span<const expert_view> experts, const expert_view* shared = nullptr);

/// An expert cache of one MoE layer of `experts` routed experts (issue #9, --vram-budget): stacked matrices for
/// `slots` routed experts (contents unspecified until write_moe_slot) plus the shared expert (or nullptr), uploaded
/// now at index `slots`. Formats and shapes come from `proto` (any expert of the layer; its payload is not
/// uploaded); the checks are upload_moe's and upload_experts' (gate/up one format, stacking rules, FP8 scale tiles,
/// q8_2f refused) — usage_error otherwise, and for slots == 0 or experts == 0.
gpu_moe alloc_moe_slots(device& dev, const expert_view& proto, uint32_t experts, uint32_t slots,
                        const expert_view* shared = nullptr);
/// Copies one expert's gate, up and down (every plane) into slot `slot` < m.slots of a layer from alloc_moe_slots
/// (device::upload at the slot's offsets; synchronous like upload, so never while a recording that reads that slot
/// runs). usage_error for a fully resident layer, a slot out of range, or formats / shapes / sizes other than
/// the layer's.
void write_moe_slot(device& dev, const gpu_moe& m, uint32_t slot, const expert_view& ex);
/// Device bytes of one expert of m (gate, up and down, all planes): what write_moe_slot moves.
uint64_t moe_slot_bytes(const gpu_moe& m);
/// While it lives (and `on`), m describes its routed experts alone: shared = false and the stacked counts without
/// the shared expert — the buffers unchanged, the shared expert left in them unread, every plane where it was. For
/// recording kernels::moe (which bakes m into the commands it records) while the shared expert runs apart
/// (kernels::matmul on copies of its matrices). Restores m when it ends.
class routed_only_scope {
 public:
  explicit routed_only_scope(gpu_moe& m, bool on = true) : m_(on && m.shared ? &m : nullptr) {
    if (m_) m_->shared = false, m_->gate_up.count -= 2, m_->down.count -= 1;
  }
  ~routed_only_scope() {
    if (m_) m_->shared = true, m_->gate_up.count += 2, m_->down.count += 1;
  }
  routed_only_scope(const routed_only_scope&) = delete;
  routed_only_scope& operator=(const routed_only_scope&) = delete;

 private:
  gpu_moe* m_;
};
/// write_moe_slot in two halves, for streaming without host waits: moe_slot_sources lists the expert's host
/// spans (checked as write_moe_slot checks them) whose concatenation, moe_slot_bytes(m) bytes, is the packed image
/// the caller copies into host-visible memory (e.g. a mapped device::alloc_upload buffer, with as many threads as
/// it likes); record_moe_slot records the copies of such an image (src) into slot `slot` (commands::copy, so it is
/// ordered with the recording's other work).
std::vector<std::pair<const uint8_t*, uint64_t>> moe_slot_sources(const gpu_moe& m, const expert_view& ex);
void record_moe_slot(commands& c, const gpu_moe& m, uint32_t slot, const view& src);

/// Counters of the pipeline machinery (for tests of the caches).
struct pipeline_stats {
  uint32_t pipelines = 0;        ///< distinct pipelines created
  uint32_t compiled = 0;         ///< GLSL → SPIR-V compilations run
  uint32_t spirv_disk_hits = 0;  ///< SPIR-V read from the cache directory instead
  double compile_seconds = 0;
  uint64_t nontemporal_loads = 0;  ///< loads given the Nontemporal hint (device_options::nontemporal_weights)
};

/// Optional parts of kernels::moe (default: none).
struct moe_extras {
  /// [n, d]: added to each token's output after the routed experts and the shared slot (y = out + add, exact f32)
  /// — e.g. a shared expert kept apart in another format. Must not overlap out.
  view add;
  /// Called once per stage s = 0, 1, … of the path taken (at most kernels::moe_stages; not at all when n == 0), in
  /// order, to record work that neither reads h or out nor writes anything the MoE reads. On the batch-1 int8 path
  /// each call is inside a concurrent group with that stage's dispatch — gate/up rows, SwiGLU + quantised h, down
  /// rows, the sum; 2 stages where the tails apply (matvec_tuning::moe_tails: gate/up rows + h, down rows + sum),
  /// 3 with `add` (the sum apart) — so the side work costs no dependent step of its own; elsewhere the calls come
  /// before the MoE's dispatches. The work of stage s may read what stage s − 1's side work wrote (a barrier
  /// separates the stages); `add` may be written by any stage's side work but the last's.
  std::function<void(uint32_t stage)> side;
  /// x is already quantised into h (kernels::moe_prepare returned true for the same m, x, top_k and h).
  bool prepared = false;
  /// One pass of an expert cache whose slots cannot hold every expert a batch selects (m.slots > 0, n >= 2, int8
  /// activations on the expert-grouped int8 path; usage_error otherwise): only the pairs of the experts the slot map
  /// holds (entry < m.slots) run — the shared expert's only with pass_shared — and their down rows stay in h; `out`
  /// is not written. After passes that ran every selected expert (and the shared one) once, kernels::moe_pass_sum
  /// writes the output: the bits of the resident layer's.
  bool pass = false;
  bool pass_shared = false;
};

/// Work split of one matmul dispatch (shaders/matvec.comp). 0 = chosen by the kernels from the shape.
struct matvec_tuning {
  /// teams (subgroups) that share a row's columns, a power of two: more teams for few rows — matvec.comp's SPLIT and
  /// the batch-1 row kernel's KSPLIT (capped at the subgroups of a workgroup)
  uint32_t split = 0;
  uint32_t unroll = 0;  ///< chunks whose loads a lane issues before decoding them: 1, 2, 4 or 8
  /// Batch-1 row kernel (shaders/matvec_rows.comp): rows one subgroup computes together (1, 2 or 4), so that
  /// each activation value read serves that many rows. 0: chosen from the shape.
  uint32_t rows_per_team = 0;
  /// Batch-1 row kernel with f32 activations: 1 = staged in shared memory per workgroup, 2 = read by every lane
  /// from the buffer (no staging barrier, no shared tile), 3 = held in registers, each lane owning some chunks of
  /// every row while its subgroup walks batches of rows_per_team rows (shaders/matvec_xreg.comp; rows_per_team
  /// 1–16, 0: 4; falls back to 2 where it does not apply; faster alone on large products, slower in the
  /// whole decode: docs/VULKAN.md). 0: 2.
  uint32_t x_source = 0;
  /// x_source 3: batches of rows_per_team rows a subgroup walks, sharing its activation registers (1–64). 0: 4.
  uint32_t xreg_batches = 0;
  /// Batch-1 row kernel with f32 activations read from the buffer (x_source 2): lanes that share one chunk's words
  /// (1, 2 or 4; matvec_rows.comp SUB), so that a subgroup's activation loads touch fewer cache lines. Applies to
  /// the formats whose chunks are whole words (q4tp, q2tp ≤ 2, MXFP4, FP8, q8_row, f16 / bf16 ≤ 2); elsewhere 1.
  /// 0: chosen per format.
  uint32_t sub = 0;
  /// Batch-1 row kernel: the subgroups a dispatch aims at. 0: 4096 (rows per subgroup 1 for ≤ 512 rows, else 2;
  /// columns split until 4096 subgroups). N > 0: also more rows per subgroup (up to 4) while rows / RPT > N, and
  /// the split until N — a dependent dispatch of more workgroups than the GPU holds at once runs in waves.
  uint32_t target_subgroups = 0;
  /// Batch-1 row kernel, q2tp with int8 activations: chunks a lane takes per unit — 1, or 2 (two consecutive
  /// chunks: one 16-byte value load and one code load for both, matvec_rows.comp PAIR; rows whose chunk count is
  /// even). 0: chosen (kernels.cpp choose_rows: 2 under the throughput rule below, else 1).
  uint32_t pairs = 0;
  /// Batch-1 row kernel, products recorded inside a concurrent group (commands::in_concurrent): 1 = the rule of
  /// dependent products (2 rows per subgroup, single chunks); 2 = a throughput rule (4 rows per subgroup, q2tp
  /// chunk pairs), for independent products that overlap each other. 0: chosen (1).
  uint32_t concurrent = 0;
  bool legacy = false;  ///< true: never use the row kernel (comparisons in benchmarks)
  /// Expert-grouped int8 kernel (shaders/moe_rows_g8.comp, prefill chunks with int8 experts): rows per subgroup
  /// (1, 2, 4, 8), pairs per tile (2, 4, 8, 16), chunks in flight per lane (1, 2). 0: chosen (kernels_moe.cpp
  /// moe_grouped_i8).
  uint32_t moe_rows_per_team = 0, moe_pairs = 0, moe_unroll = 0;
  /// Expert-grouped products on f16 tiles (n >= 2, f32 activations, the f16 GEMM modes): 0 or 1 = gemm.comp's
  /// MOE_GEMM tiles (workgroup-shared, the faster on the H200 for every format measured: docs/PERF.md "Fourteenth
  /// session"); 2 = shaders/moe_tc.comp (split by subgroups, no workgroup barrier) where its layout applies.
  uint32_t moe_tiles = 0;
  /// Batch-1 int8 MoE (kernels::moe): 0 = the SwiGLU + quantisation of h and the sum run in the tails of the gate/up
  /// and down row dispatches where that applies (shaders/matvec_rows.comp MOE_TAIL: 2 dependent dispatches);
  /// 1 = never (4 dispatches: comparisons).
  uint32_t moe_tails = 0;
  /// Batch-1 int8 MoE (kernels::moe at n = 1, the row kernel's MOE_ROWS dispatches: the decode's largest
  /// products, every selected expert's gate/up or down rows at once): rows per subgroup (1, 2, 4), q2tp chunk pairs
  /// (1, 2) and chunks a lane loads before decoding (1, 2, 4) in place of rows_per_team / pairs / unroll. 0: rows
  /// per subgroup as every batch-1 product (the dependent-product rule), q2tp pairs 2, unroll 2.
  uint32_t moe_b1_rows_per_team = 0, moe_b1_pairs = 0, moe_b1_unroll = 0;
  /// Batch-1 int8 MoE: batches of rows a workgroup walks (1, 2, 4, 8; matvec_rows.comp RBATCH) — its tables, expert
  /// id and tail arrival paid once per that many batches; the same bits for every value. 0: 4, halved until a
  /// workgroup's rows divide an expert's gate / up half and its down rows. With pairs 2 and unroll 2: the MoE alone
  /// (vk_moe_b1) 49.0 → 44.5 µs on an H100 in two starts (docs/PERF.md "Forty-sixth session").
  uint32_t moe_b1_batches = 0;
  /// Expert-grouped int8 products (prefill chunks with q4tp / q2tp experts and int8 activations): 0 = the faster
  /// measured kernel (kernels_moe.cpp i8tc_default: moe_rows_g8.comp for now); 1 = shaders/moe_rows_g8.comp; 2 =
  /// shaders/moe_i8_tc.comp on the int8 tensor cores (device_info::coop_i8), its products emulated in plain GLSL
  /// where the device has no int8 cooperative matrices (the parity suite's way to run its layout on lavapipe).
  uint32_t moe_i8_tc = 0;
  /// Dense tiled GEMM (gemm.comp, n > gemm_tile batch rows): N > 0 = a product whose grid of the format's largest
  /// tiles would have fewer than N workgroups takes the next smaller tile that fits (128 × 128 → 64 × 128 → 64 × 64)
  /// until it has N or the tile is the smallest — a few large tiles leave most of a big GPU idle (the V4 prefill's
  /// 256-row router: 8 workgroups of 128 × 128). 0: always the largest tile.
  uint32_t gemm_min_groups = 0;
  /// mHC blocks of several tokens (hc_mix / hc_post of a prefill chunk; shaders/mhc_block.comp HC_TOK): tokens one
  /// workgroup walks with its mix weights held in registers, so fn is read once per that many tokens (1–64; the
  /// same bits for every value). 0: chosen (8: vk_mhc/chunk/512x4x4096 218 -> 170 us per boundary on the H200). The decode's one-token boundary
  /// (hc_post_finish's tail) always takes 1.
  uint32_t hc_tokens = 0;
  /// Dense f16 GEMM on cooperative matrices (gemm.comp GEMM_COOP 1): how a subgroup's 16 × 16 output blocks lie in
  /// the tile — 1: one row of blocks (one A fragment and a B fragment per block per 16 columns); 0 or 2: two rows of
  /// blocks where a subgroup holds 4 or 8 blocks (GEMM_WT2: 2 A and BPS / 2 B fragments; the same bits), else one
  /// row. The 12-layer prefill: +1.3 % on the H200, +2.1 % on an H100 (one run each; docs/PERF.md "Forty-sixth
  /// session").
  uint32_t gemm_warp_tile = 0;
};

class kernels {
 public:
  /// Chooses the shader variants once from the device's features (subgroup size and operations, 8/16-bit
  /// storage, f64) and uploads the shared tables (exp2 of every f16 for the ladder formats).
  explicit kernels(device& dev);
  ~kernels();
  kernels(const kernels&) = delete;
  kernels& operator=(const kernels&) = delete;

  /// Largest k of topk (candidates are sorted in shared memory).
  static constexpr uint32_t topk_max_k = 2048;
  /// Batch rows per GEMM dispatch; larger n runs in tiles of this many rows.
  static constexpr uint32_t gemm_tile = 8;

  /// Y[t*rows + r] = Σ_c W[r, c] · X[t*cols + c] for t < n (n >= 1; n == 1 is the matvec kernel).
  /// x holds n*cols floats, y n*rows floats.
  /// act = i8: activations quantised to int8 per 32-block and integer dot products (batch 1, q4tp / q2tp /
  /// MXFP4, devices with shaderIntegerDotProduct; elsewhere the f32 path runs) — see has_i8().
  /// min_groups > 0: on the f16 tensor-core tiles, this product's tile as matvec_tuning::gemm_min_groups = min_groups
  /// would choose it (smaller tiles while the grid has fewer workgroups) — e.g. a few-row product that would leave
  /// most of the GPU idle beside larger ones; 0: the tuning's rule.
  void matmul(commands& c, const gpu_matrix& w, view x, uint32_t n, view y, act_precision act = act_precision::f32,
              uint32_t min_groups = 0);
  /// y[r − r0] = Σ_c W[r, c] · x[c] for rows r in [r0, r1) of w (batch 1): one row block of a matrix, e.g. one
  /// group of V4's grouped output projection wo_a. r0 must be a multiple of the format's block_rows.
  void matmul_rows(commands& c, const gpu_matrix& w, uint64_t r0, uint64_t r1, view x, view y);
  /// Batched: y[t·y_stride + r − r0] = Σ_c W[r, c] · x[t·x_stride + c] for t < n (strides in floats, ≥ cols and
  /// ≥ r1 − r0; x_stride a multiple of 4) — e.g. one group of wo_a over a prefill chunk, reading its columns out of
  /// each row of the attention output and writing its rows into each row of z. n == 1: as above.
  void matmul_rows(commands& c, const gpu_matrix& w, uint64_t r0, uint64_t r1, view x, uint32_t n, uint64_t x_stride,
                   view y, uint64_t y_stride);
  /// Whether matmul(..., act_precision::i8) of a batch-1 product of format f takes the int8 path here.
  bool has_i8(format f) const;
  /// Bytes of the int8 activations of n tokens of `cols` values (shaders/common/act_q8.glsl: 40 per 32 values,
  /// each token's vector padded to 16 bytes so that the kernels read it as uvec4 at any token).
  static constexpr uint64_t act_q8_bytes(uint64_t cols, uint32_t n = 1) { return (cols / 32 * 40 + 15) / 16 * 16 * n; }
  /// Quantises x [n, cols] (cols % 32 == 0) to int8 blocks packed for format f's integer-dot matvec (has_i8(f)).
  /// One quantisation serves every matvec of that format on the same x (e.g. the projections of one norm output).
  void quantize_act(commands& c, format f, view x, uint32_t n, uint64_t cols, view out);
  /// y = W · x̃, x̃ the activations quantize_act(w.fmt, ...) wrote into xq (batch 1; xq 16-byte aligned).
  void matvec_q8(commands& c, const gpu_matrix& w, view xq, view y);
  /// y[r − r0] = Σ_c W[r, c] · x̃[c] for rows r in [r0, r1) of w: matvec_q8 over one row block (as matmul_rows; r0 a
  /// multiple of the format's block_rows), e.g. one group of wo_a with its group's quantised columns.
  void matvec_q8_rows(commands& c, const gpu_matrix& w, uint64_t r0, uint64_t r1, view xq, view y);
  /// out[r*cols + c] = W[r, c] bit-exactly as F::decode_row. generic = true forces the element-wise path.
  void dequant(commands& c, const gpu_matrix& w, view out, bool generic = false);
  /// Embedding lookup on the device: out row i·copies + j (j < copies) = row ids[i] of w decoded to f32 (bit for
  /// bit F::decode_row), for i < n; an id ≥ w.rows gives a NaN row. The whole matrix must fit one storage binding
  /// (usage_error otherwise). A decode step reads its token from the previous step's argmax this way, without the
  /// host in between.
  void embed_rows(commands& c, const gpu_matrix& w, view ids, uint32_t n, uint32_t copies, view out);
  /// Same as matmul but forces the element-wise (unaligned) path; for the parity suite.
  void matmul_generic(commands& c, const gpu_matrix& w, view x, uint32_t n, view y);

  /// y[r] = x[r] · rsqrt(mean(x[r]²) + eps) [· weight] for rows r of `dim` floats (rmsnorm / rmsnorm_heads).
  void rmsnorm(commands& c, view x, view weight, view y, uint32_t rows, uint32_t dim, float eps);
  /// rmsnorm, and y also quantised for format f's integer-dot matvec into xq (rows vectors; has_i8(f), dim % 32 ==
  /// 0): the bits quantize_act(c, f, y, rows, dim, xq) would write, without a step of its own.
  void rmsnorm_q8(commands& c, view x, view weight, view y, uint32_t rows, uint32_t dim, float eps, format f, view xq);
  /// rmsnorm, then rope of each row's last rope_dim channels, in one dispatch with the values of the two: rows are
  /// the heads of tokens (row r: head r % heads of token r / heads, rotated by cs [tokens, rope_dim]).
  void rmsnorm_rope(commands& c, view x, view weight, view y, uint32_t rows, uint32_t dim, float eps, view cs,
                    uint32_t heads, uint32_t rope_dim);
  /// In place: rotates the last rope_dim channels of every head of x [rows, heads, head_dim] by adjacent pairs
  /// with cs [rows, rope_dim] (cos, sin interleaved: rope_table::rotation of each row's position).
  void rope(commands& c, view x, view cs, uint32_t rows, uint32_t heads, uint32_t head_dim, uint32_t rope_dim,
            bool inverse);
  /// p [rows, n] = attend_sink(logits [rows, n], sink[r % sink_count]); no sink view (or sink_count 0): −inf.
  /// p may be the same range as logits.
  void softmax_sink(commands& c, view logits, view sinks, uint32_t sink_count, view p, uint32_t rows, uint32_t n);
  /// idx [rows, k] (uint32) = topk(scores [rows, n], k) with the tie rule of ops/topk.hpp; slots past min(k, n)
  /// get 0xFFFFFFFF. k <= topk_max_k. k = 1 with n >= argmax_min_n (the head's greedy token) splits each row over
  /// workgroups through a scratch buffer the kernels own: such calls must not share a begin_concurrent group.
  static constexpr uint32_t argmax_min_n = 8192;
  /// by_position: the selected set in ascending index order, without the sort by score (callers that need the set,
  /// not its order: the indexers); with k >= n every index, without a selection.
  void topk(commands& c, view scores, uint32_t rows, uint32_t n, uint32_t k, view idx, bool by_position = false);
  // ---- sampling on the device (kernels_sample.cpp, shaders/sample.comp, docs/VULKAN.md "Sampling on the device")
  /// Settings of sample(): sampling_params' temperature (> 0), top_p (in (0, 1]), min_p (in [0, 1]) and top_k
  /// (0 or ≥ n: off; else ≤ sample_max_top_k).
  struct sample_settings {
    float temperature = 1.0f, top_p = 1.0f, min_p = 0.0f;
    uint32_t top_k = 0;
    float repetition_penalty = 1.0f, presence_penalty = 0.0f, frequency_penalty = 0.0f;  ///< need `seen`
  };
  /// Largest top-k of sample() (its candidates come from topk()).
  static constexpr uint32_t sample_max_top_k = topk_max_k;
  /// Largest vocabulary of sample() (top-p's masses are summed in 14-bit parts into 32-bit words).
  static constexpr uint32_t sample_max_n = 1u << 18;
  /// Bytes of sample()'s scratch for n logits, and of its RNG state (mt19937_64_state: 312 words and the index).
  static uint64_t sample_scratch_bytes(uint32_t n);
  static constexpr uint64_t sample_rng_bytes = 313 * 8;
  /// Whether this device runs sample() (f64 and 64-bit integers in shaders).
  bool has_sample() const;
  /// out[0] (uint32) = the token cmfx::sampler::sample would choose from logits [n] with these settings and the
  /// MT19937-64 state in rng (sample_rng_bytes; advanced by the one draw, as the sampler draws) — bit for bit the
  /// same choice (sampling_params::device_samplable(n, sample_max_top_k): no logprobs). With a penalty, seen (uint32
  /// [n], sampler::penalty_state's words: the output count, bit 31 for a prompt token) is read and the chosen
  /// token counted there, as sample() records it. scratch: sample_scratch_bytes
  /// (n), its view 16-byte aligned; the rng view 8-byte aligned. 5–10 dispatches (fewer without top-p / min-p) and a
  /// fill; not inside begin_concurrent.
  void sample(commands& c, view logits, uint32_t n, const sample_settings& s, view rng, view scratch, view out,
              view seen = {});
  /// Largest top_n of logprobs() (OpenAI allows 20 alternatives).
  static constexpr uint32_t logprobs_max_top = 64;
  /// 32-bit words of logprobs()'s record with top_n alternatives.
  static constexpr uint32_t logprobs_words(uint32_t top_n) { return 4 + 2 * top_n; }
  /// The numbers cmfx::sampler::fill_logprobs derives the raw-logit logprobs of one position from, bit for bit
  /// (cmfx::logsumexp_parts; cmfx::logprob_from turns them into logprobs): out (uint32 [logprobs_words(top_n)]) =
  /// m (f32 bits: the largest logit, NaN as −inf), the sum of exp(z − m) (f64, low word first; NaN where m is ±inf),
  /// z of the token whose id is at chosen[0] (uint32; typically sample()'s or an argmax's out), then the top_n best
  /// ids (value descending, lower index first; 0xFFFFFFFF past n) and their z (f32 bits). scratch: as sample()'s
  /// (sample_scratch_bytes(n); the same one may serve both, in that order). top_n ≤ logprobs_max_top; has_sample();
  /// 5–7 dispatches, a fill and a copy; not inside begin_concurrent.
  void logprobs(commands& c, view logits, uint32_t n, uint32_t top_n, view chosen, view scratch, view out);
  // ---- V4.1 candidate blocks (dsv41_candidate_blocks; kernels_v41.cpp, docs/VULKAN.md "V4.1 kernels"):
  //      block_max → topk(blk, rows, nb, topk_blocks, idx) → mask_scores. nb = ceil(n / bs); lens (uint32 [rows],
  //      optional): row r has lens[r] ≤ n valid entries (no view: n), the rest count as absent.
  /// blk [rows, nb] = max of each block of bs scores (NaN ignored, −inf when empty); the row's newest block
  /// (holding entry len − 1) = +inf.
  void block_max(commands& c, view score, uint32_t rows, uint32_t n, uint32_t bs, view blk, view lens = {});
  /// In place: score[r, j] = −inf unless j < len and block j / bs is among idx [rows, k] with blk != −inf
  /// (0xFFFFFFFF slots pick nothing). blk, idx: the candidate source's (a reusing layer passes the same ones).
  void mask_scores(commands& c, view score, uint32_t rows, uint32_t n, uint32_t bs, view blk, view idx, uint32_t k,
                   view lens = {});
  /// The three above: blk [rows, nb], idx [rows, topk_blocks] (topk_blocks <= topk_max_k); score masked in place.
  void candidate_blocks(commands& c, view score, uint32_t rows, uint32_t n, uint32_t bs, uint32_t topk_blocks,
                        view blk, view idx, view lens = {});
  // ---- V4.1 Engram (model/engram.hpp; kernels_v41.cpp, docs/VULKAN.md "V4.1 kernels"): gather → matmul (wkv) →
  //      gate_add. Row ids are hashed on the host.
  /// E [tokens, cols·head_dim] (f32) = the table rows ids [tokens, cols] (int32) decoded as engram_decode_row,
  /// bit-exact: data = E4M3 bytes [rows, head_dim], scale = UE8M0 bytes [rows, head_dim / scale_block]. A token
  /// with any id outside [0, rows) gets NaN over its whole E row (the CPU throws). rows·head_dim < 2^32.
  void engram_gather(commands& c, view data, view scale, uint64_t rows, uint32_t head_dim, uint32_t scale_block,
                     view ids, uint32_t tokens, uint32_t cols, view E);
  /// engram_gate_add for `tokens` tokens: X [tokens, hc, d] updated in place with the gates of kv [tokens,
  /// (hc+1)·d] (key copies, then value) and qk [hc·d]; image (uint32 [tokens], optional): nonzero = image token
  /// (X untouched, gate 0); gates (f32 [tokens, hc], optional) receive the gates. hc <= 16.
  void engram_gate_add(commands& c, view X, view kv, view qk, uint32_t tokens, uint32_t hc, uint32_t d, float eps,
                       float clamp, view image = {}, view gates = {});
  /// out[i] = silu(min(g, limit)) · clamp(v, −limit, limit) · weight (limit <= 0: no clamp). out may alias.
  void swiglu_clamp(commands& c, view g, view v, view out, uint64_t n, float limit, float weight = 1.0f);
  // ---- prefill chunks (kernels_chunk.cpp)
  /// y[t, c] += x[(first + t) % period, c] for t < rows, c < n (x [period, n]; exact f32 adds): a per-position
  /// table such as a compressor's ape added to `rows` consecutive positions starting at one with index `first`.
  void add_tiled(commands& c, view x, uint32_t period, uint32_t first, view y, uint32_t rows, uint32_t n);
  /// idx[t·stride + offset + j] = picks[t, j] if picks[t, j] < counts[t], else −1 (int32), for t < rows, j < k:
  /// a chunk's indexer top-k (picks [rows, k] over the entries finished at the chunk's end) turned into each row's
  /// compressed key slots, dropping the entries not yet finished at that row's position (and 0xFFFFFFFF picks).
  void pick_keys(commands& c, view picks, view counts, uint32_t rows, uint32_t k, view idx, uint32_t stride,
                 uint32_t offset);
  /// y[i] += x[i] for i < n (f32, exact sums; x and y must not overlap).
  void add(commands& c, view x, view y, uint64_t n);
  /// y[i] *= a for i < n, in place.
  void scale(commands& c, view y, uint64_t n, float a);
  // ---- layer primitives of include/cmfx/ops/ (kernels_route.cpp, kernels_mhc.cpp, kernels_quant.cpp,
  //      kernels_moe.cpp; docs/VULKAN.md gives each contract and tolerance)

  /// Largest expert count of route_score / route_hash (the scores of a row live in shared memory).
  static constexpr uint32_t route_max_experts = 4096;
  /// Largest top_k of the routing kernels and of moe.
  static constexpr uint32_t route_max_k = 64;

  /// Score routing of `rows` tokens (ops/routing.hpp route_score): logits [rows, n] → s [rows, n] (unbiased
  /// sqrt-softplus scores; no view: not written), idx [rows, top_k] (uint32; top-k of s + bias, tie rule of
  /// topk.hpp), w [rows, top_k] (normalised from the unbiased s, × route_scale). bias [n] or no view. One dispatch.
  void route_score(commands& c, view logits, view bias, uint32_t rows, uint32_t n, const route_config& cfg, view s,
                   view idx, view w);
  /// Hash routing (route_hash): idx[t] = tid2eid[min(token[t], V−1)] (tid2eid: int32 [V, top_k], checked on the
  /// host by upload_tid2eid); w from the unbiased scores of logits as route_score. tokens: uint32 [rows].
  void route_hash(commands& c, view logits, view tid2eid, uint64_t vocab, view tokens, uint32_t rows, uint32_t n,
                  const route_config& cfg, view s, view idx, view w);
  /// The router and the routing of one token in one dispatch (shaders/route.comp ROUTE_FUSED): logits [n] =
  /// gate (f32 or bf16 [n, d]) · x [d], every workgroup a few rows, and the last to finish routes them as
  /// route_score (bias) or, with tid2eid, as route_hash (token: uint32 [1]) — one dependent step instead of matmul +
  /// route. The logits' sums run in another order than matmul's (selections may differ at near-ties). Returns
  /// false, recording nothing, where it does not apply (gate not f32 / bf16, d not a multiple of 4 or above 8192,
  /// unaligned views); the caller then records matmul + route_score / route_hash. s: the scores, as route_score
  /// writes them (optional).
  bool router_route(commands& c, const gpu_matrix& gate, view x, view logits, view bias, view tid2eid, uint64_t vocab,
                    view token, const route_config& cfg, view idx, view w, view s = {});

  /// Shape and constants of one mHC site (ops/mhc.hpp): hc copies of a d-vector, `iters` Sinkhorn iterations.
  /// Defaults are V4's (driver/model/dsv4_config.hpp: hc 4, eps 1e-6, 20 iterations); d has none.
  struct hc_shape {
    uint32_t hc = 4, d = 0;
    float norm_eps = 1e-6f, hc_eps = 1e-6f;
    uint32_t iters = 20;
  };
  /// Bytes of the partial-mix scratch of `tokens` tokens with `mix_rows` rows of the mixing projection (partials
  /// are per block of HC columns, summed in a fixed order by hc_pre_finish / hc_head_finish).
  uint64_t hc_partials_bytes(const hc_shape& sh, uint32_t tokens, uint32_t mix_rows) const;
  /// Floats per token of the coefficient buffer: pre [hc], post [hc], C [hc·hc] (row-major C[j·hc + k]).
  static uint32_t hc_coeff_floats(uint32_t hc) { return 2 * hc + hc * hc; }
  /// Partial mixes of X [tokens, hc·d] with fn [mix_rows, hc·d] (and Σ X²) into partials.
  void hc_mix(commands& c, const hc_shape& sh, view X, view fn, uint32_t mix_rows, uint32_t tokens, view partials);
  /// hc_pre from the partials of fn [(2+hc)·hc rows]: coeff [tokens, hc_coeff_floats] (pre, post, Sinkhorn C) and
  /// the collapse y [tokens, d] = Σ_j pre[j]·X[j]. base [(2+hc)·hc], scale [3]. One workgroup per token.
  /// norm [d] (optional): y ← rmsnorm(y, norm, sh.norm_eps) in the same dispatch, bit-identical to a following
  /// rmsnorm(y, norm, y, tokens, d, sh.norm_eps) (the sublayer's input norm without its own dispatch).
  /// sinkhorn = false: C is left to hc_sinkhorn (the collapse needs only pre).
  void hc_pre_finish(commands& c, const hc_shape& sh, view partials, view X, view base, view scale, uint32_t tokens,
                     view coeff, view y, view norm = {}, bool sinkhorn = true);
  /// The Sinkhorn C of hc_pre_finish alone (the C part of coeff, bit-identical): with hc_pre_finish(..., false) on
  /// the same partials, off the critical path — e.g. in a concurrent group with the next projections; nothing may
  /// overwrite partials before it ran, and hc_post reads the C it writes.
  void hc_sinkhorn(commands& c, const hc_shape& sh, view partials, view base, view scale, uint32_t tokens,
                   view coeff);
  /// V4.1's one-sublayer lag (dsv4-architecture.md §4.1): hc_pre_finish whose collapse uses the weights fold
  /// [tokens, fold_stride] (the first hc floats of each row; the previous sublayer's pre) instead of this
  /// sublayer's own: y = Σ_j fold[j]·X[j] (+ norm). coeff is written as hc_pre_finish writes it (its pre is the
  /// next sublayer's fold). fold must not overlap coeff.
  void hc_pre_finish_fold(commands& c, const hc_shape& sh, view partials, view X, view base, view scale,
                          uint32_t tokens, view coeff, view fold, uint32_t fold_stride, view y, view norm = {},
                          bool sinkhorn = true);
  /// The collapse alone: y [tokens, d] = Σ_j fold[j]·X[j] in f32, j ascending (ops_detail::hc_fold), then the
  /// optional RMSNorm by norm (eps sh.norm_eps) — V4.1's final collapse with the last FFN's pre.
  void hc_fold(commands& c, const hc_shape& sh, view X, view fold, uint32_t fold_stride, uint32_t tokens, view y,
               view norm = {});
  /// hc_head from the partials of fn [hc rows]: coeff (pre only, the first hc floats of a coefficient row) and y
  /// (norm: as hc_pre_finish).
  void hc_head_finish(commands& c, const hc_shape& sh, view partials, view X, view base, float scale,
                      uint32_t tokens, view coeff, view y, view norm = {});
  /// hc_post: out [tokens, hc·d] = post[k]·o + Σ_j C[j,k]·X[j] with coeff from hc_pre_finish; out must not
  /// overlap X. With next_fn (the mixing projection of the next sublayer, next_rows rows) the same dispatch also
  /// writes the partial mixes of `out` into next_partials, so a sublayer boundary costs two dispatches
  /// (hc_post + hc_pre_finish). o_add [tokens, d]: the sublayer output is o + o_add (one f32 add per value — a
  /// shared expert kept apart, added here instead of in kernels::moe's sum).
  void hc_post(commands& c, const hc_shape& sh, view o, view X, view coeff, uint32_t tokens, view out,
               view next_fn = {}, uint32_t next_rows = 0, view next_partials = {}, view o_add = {});
  /// The finish hc_post_finish runs on its mix: the next site's hc_pre_finish (base, scale, sinkhorn as there) or,
  /// with head, hc_head_finish (base, head_scale); y and the optional norm as there. fold (not with head; needs
  /// coeff_out): the collapse uses fold's weights as hc_pre_finish_fold does (V4.1's one-sublayer lag). coeff_out:
  /// where the finish writes its coefficients (empty: over the coeff the post read; must not overlap coeff or
  /// fold).
  struct hc_finish_args {
    view base, scale;
    bool head = false;
    float head_scale = 0.0f;
    bool sinkhorn = true;
    view y, norm;
    view fold;
    uint32_t fold_stride = 0;
    view coeff_out;
    /// With norm (d % 32 == 0): y also quantised for format y_q8_fmt's integer-dot products (has_i8) into y_q8 —
    /// the bits quantize_act(c, y_q8_fmt, y, tokens, d, y_q8) writes, by the finish itself (one invocation per
    /// block of 32, reading y back through a coherent binding), without a step of its own. Not with coeff_out
    /// (V4.1: no binding left).
    view y_q8;
    format y_q8_fmt = format::q4tp;
  };
  /// A sublayer boundary in one dispatch: hc_post (o given) or hc_mix (o empty: X' = X, out unused) with the mix
  /// next_fn [next_rows = the finish's rows] into next_partials, then the finish of that mix on X' — bit-identical
  /// to the separate calls; the last workgroup of each token runs the finish (arrival counters on the device).
  /// coeff is read by the post, then rewritten by the finish. o_add as in hc_post. fin.y_q8: y's int8 copy too.
  void hc_post_finish(commands& c, const hc_shape& sh, view o, view X, view coeff, uint32_t tokens, view out,
                      view next_fn, uint32_t next_rows, view next_partials, const hc_finish_args& fin,
                      view o_add = {});

  /// Activation fake-quant in place (ops/fake_quant.hpp), per row of n floats in blocks of `block` (a ragged
  /// last block uses its own amax): E4M3 (act_quant_e4m3), E2M1 with power-of-two scales (act_quant_e2m1) or
  /// E2M1 with E4M3 scales (act_quant_e2m1_e4m3, V4.1 compressed KV). Bit-exact.
  enum class fq_format { e4m3, e2m1, e2m1_e4m3 };
  void fake_quant(commands& c, view x, uint32_t rows, uint32_t n, uint32_t block, fq_format f);
  /// Largest Hadamard length (a row lives in shared memory).
  static constexpr uint32_t hadamard_max = 4096;
  /// In place: each of `rows` rows of n floats (n a power of two ≤ hadamard_max) ← scale · H_n row, with the
  /// butterflies of ops/hadamard.hpp in the same order (bit-exact).
  void hadamard(commands& c, view x, uint32_t rows, uint32_t n, float scale);

  /// MoE of n tokens (kernels/moe.hpp moe_forward): out [n, d] = Σ_j W2_e (silu(min(W1_e x, limit)) ·
  /// clamp(W3_e x, −limit, limit) · w_j), e = ids[t, j], summed in ascending expert id, then the shared expert
  /// (weight 1) when m has one. ids uint32 [n, top_k] and weights [n, top_k] as route_score writes them; h is
  /// scratch of moe_scratch_floats(m, n, top_k) floats. Two dispatches (gate/up + SwiGLU, then down + the weighted
  /// sum). limit > 0.
  /// act = i8 (batch 1, both expert formats with an int8 kernel — has_i8; otherwise the f32 path runs): the inputs
  /// of gate/up and of down are rounded to int8 per 32 values as in matmul(..., i8), and the selected experts' rows
  /// run on the batch-1 row kernel — five dependent dispatches (quantise x, gate/up rows, SwiGLU · weight
  /// quantised, down rows, the sum in ascending expert id).
  /// n >= 2 (prefill): expert-grouped — the (token, slot) pairs are listed per expert on the device and one
  /// workgroup per (expert, row block) runs its pairs in tiles of 8, so each selected expert's weights are read
  /// once per 8 of its pairs instead of once per pair (four dispatches: lists, gate/up, down, the sum in ascending
  /// expert id); needs the scratch of moe_scratch_floats (a shorter h takes the per-pair two-dispatch path).
  /// With act_precision::i8 (q4tp, q2tp, MXFP4 on devices with integer dot products; 2·I and dim multiples of
  /// the kernel's rows per workgroup):
  /// the grouped int8 path instead — lists, x quantised per token, gate/up, SwiGLU · weight quantised per pair,
  /// down, sum (six dispatches); each pair's numerics are those of the batch-1 int8 path, and no weight is decoded
  /// to floats (shaders/moe_rows_g8.comp).
  /// slot_map (uint32 [m.experts]; required iff m.slots > 0, usage_error otherwise): routed expert e's weights are
  /// read at stacked index slot_map[e]. ids stay expert ids and the sums stay in ascending expert id, so the output
  /// is bit-identical to that of the resident layer for the same experts; a selected expert whose entry is
  /// ≥ m.slots makes that token's output NaN (nothing is read out of range).
  ///
  /// extras (moe_extras): a vector added to every token's output, work recorded next to the MoE's stages, and x
  /// quantised ahead by moe_prepare (then the int8 path is four dependent dispatches).
  void moe(commands& c, const gpu_moe& m, view x, uint32_t n, view ids, view weights, uint32_t top_k, float limit,
           view h, view out, act_precision act = act_precision::f32, view slot_map = view(),
           const moe_extras& extras = {});
  /// out = the sum of the pair rows that moe passes (moe_extras::pass) left in h, per token in ascending expert id
  /// then the shared expert, as kernels::moe sums them (m, n, ids, top_k, h those of the passes).
  void moe_pass_sum(commands& c, const gpu_moe& m, uint32_t n, view ids, uint32_t top_k, view h, view out);
  /// Whether moe(c, m, x, n, ..., h, ..., act_precision::i8, slot_map, {.pass = true}) applies here: an expert cache
  /// (m.slots > 0), n >= 2, and the expert-grouped int8 path for m's formats and shapes, this device and scratch h.
  bool moe_takes_pass(const gpu_moe& m, uint32_t n, uint32_t top_k, view h) const;
  /// Stages of kernels::moe at which moe_extras::side is called, at most.
  static constexpr uint32_t moe_stages = 4;
  /// Records the int8 quantisation of x into h where moe(c, m, x, 1, ..., h, ..., act_precision::i8, ...) takes
  /// the batch-1 int8 path (the same m, x, h and top_k), so that it can run next to other work (e.g. in the
  /// router's concurrent group); returns whether it recorded — then pass moe_extras::prepared = true to that moe.
  bool moe_prepare(commands& c, const gpu_moe& m, view x, uint32_t top_k, view h);
  /// Whether moe(c, m, x, n, ..., h, ..., act_precision::f32) of n >= 2 tokens runs the expert-grouped products on
  /// shaders/moe_tc.comp here (matvec_tuning::moe_tiles = 2, the f16 GEMM modes; x 16-byte aligned), rather than
  /// on gemm.comp's tiles or the f32 kernels.
  bool moe_runs_tc(const gpu_moe& m, uint32_t n, uint32_t top_k, view h) const;
  /// Whether moe(c, m, x, n, ..., h, ..., act_precision::i8) of n >= 2 tokens runs its expert products on
  /// shaders/moe_i8_tc.comp here (matvec_tuning::moe_i8_tc; q4tp / q2tp experts, a scratch of moe_scratch_floats).
  bool moe_runs_i8_tc(const gpu_moe& m, uint32_t n, uint32_t top_k, view h) const;
  /// Words per 32-column block of one 16-pair tile of gathered int8 activations (moe_i8_gather.comp): 16 pairs × 8
  /// packed words, then their 16 scales. The shaders get it as I8T_BLOCK_WORDS.
  static constexpr uint32_t moe_i8_tile_block_words = 16 * 8 + 16;
  /// Upper bound of the 16-pair tiles of n tokens' pairs in expert order (moe_i8_tc.comp's gathered activations):
  /// every non-empty expert's count rounded up to 16.
  static uint64_t moe_pair_tiles(const gpu_moe& m, uint32_t n, uint32_t top_k) {
    const uint64_t np = uint64_t(n) * (top_k + (m.shared ? 1 : 0)), ne = m.experts + (m.shared ? 1 : 0);
    return std::min(np, (np + 15 * ne) / 16);
  }
  /// Floats of moe's scratch h for n tokens; with_tc: also moe_tc.comp's f16 rows (only that opt-in kernel,
  /// matvec_tuning::moe_tiles = 2, needs them: 88 MB more for V4-Flash's 512-token chunks). For n >= 2 it always
  /// holds moe_i8_tc.comp's gathered tiles (34 MB for V4-Flash's 512-token chunks), so that matvec_tuning::moe_i8_tc
  /// can be switched on a built model.
  static uint64_t moe_scratch_floats(const gpu_moe& m, uint32_t n, uint32_t top_k, bool with_tc = false) {
    const uint64_t slots = top_k + (m.shared ? 1 : 0), lists = (m.experts + 1ull) * (uint64_t(n) * top_k + 1);  // grouped path
    // moe_tc.comp's path (n >= 2): off[], then its f16 rows of x and h, each expert's rounded up to 16
    const uint64_t tc = n < 2 || !with_tc
                            ? 0
                            : m.experts + 2 + (uint64_t(n) * slots + 16 * (m.experts + 1ull)) * (m.dim + m.inter) / 2 + 12;
    // moe_i8_tc.comp's path (n >= 2): the gathered int8 tiles (144 words per 32 columns of x, then of h), off[]
    const uint64_t i8tc = n < 2 ? 0
                                : moe_pair_tiles(m, n, top_k) * moe_i8_tile_block_words * (std::max(m.dim, m.inter) / 32) +
                                      m.experts + 2 + 8;
    return uint64_t(n) * slots * (3 * m.inter + m.dim) + act_q8_bytes(m.dim) / 4 + act_q8_bytes(m.inter, uint32_t(slots)) / 4 +
           lists + 8 + tc + i8tc;
  }

  // ---- attention (kernels_attn.cpp; docs/VULKAN.md "Attention kernels")

  /// Shape of one sparse attention dispatch (dsv4-architecture.md §3.3 "sparse attention with sink"): `rows`
  /// query rows of `heads` heads × head_dim, each attending to `keys` index slots. Key slot k of row t is row
  /// idx[t·keys + k] of the concatenation [kv_a rows; kv_b rows] (the window ring, then the compressed entries at
  /// offset kv_a_rows); −1 = masked. K == V (the shared latent). scale multiplies the dot products (1/√head_dim).
  struct attn_shape {
    uint32_t rows = 0, heads = 0, head_dim = 0, keys = 0;
    uint32_t kv_a_rows = 0, kv_b_rows = 0;
    float scale = 0;
    /// > 0: the output's last inv_rope_dim channels of every head get the inverse RoPE of their row (cos/sin rows
    /// inv_rope_cs [rows, inv_rope_dim], as rope(..., inverse = true)) where they are written, bit-identical to
    /// that separate call. Even, ≤ head_dim.
    uint32_t inv_rope_dim = 0;
    /// true: q is taken before its per-head RMSNorm (no weight, eps q_norm_eps) and the RoPE of its last
    /// inv_rope_dim channels by inv_rope_cs (not inverse), which the kernel applies to its own staged copy — the
    /// values of rmsnorm_rope(q, {}, q', rows·heads, head_dim, q_norm_eps, inv_rope_cs, heads, inv_rope_dim) then
    /// the attention on q', one dependent dispatch fewer (q itself is not written). Needs inv_rope_dim > 0; not for
    /// a shape on f16 tiles (attn_f16_tiles: usage_error).
    bool q_norm_rope = false;
    float q_norm_eps = 0;
    /// true (not with q_norm_rope): q is taken before the RoPE of its last inv_rope_dim channels by inv_rope_cs (not
    /// inverse), which the kernel applies to its own staged copy — the values of rope(q, inv_rope_cs, rows, heads,
    /// head_dim, inv_rope_dim, false) then the attention (V4.1's q: no per-head norm), one dependent dispatch fewer.
    /// The same conditions as q_norm_rope.
    bool q_rope = false;
  };
  /// Largest head_dim of sparse_attention (q and the output accumulators of a head block live in shared memory).
  static constexpr uint32_t attn_max_head_dim = 512;
  /// o [rows, heads, head_dim] = Σ_k p_k · K_k, p = attend_sink((q_h·K_k)·scale, sinks[h]) over the row's unmasked
  /// slots (the sink enlarges the denominator only; an all-masked row gives 0). q [rows, heads, head_dim], kv_a
  /// [kv_a_rows, head_dim], kv_b [kv_b_rows, head_dim] (no view when kv_b_rows == 0), idx int32 [rows, keys],
  /// sinks [heads] (no view: −inf, no sink). An index ≥ kv_a_rows + kv_b_rows (or < −1) makes that row and head's
  /// output NaN. Any key count (online softmax over tiles of keys). Few rows × head blocks (decode): the key slots
  /// are split over several workgroups that write partial (max, denominator, unnormalised o) to `scratch`, and a
  /// second dispatch combines them with the sink (flash decoding; then never inside begin_concurrent); otherwise
  /// one dispatch. scratch holds attn_scratch_floats(sh) floats (no view when that is 0). The inverse RoPE of the
  /// output's rope tail: sh.inv_rope_dim with inv_rope_cs, or a separate rope(..., inverse = true) call.
  /// q8 (optional): where the shape splits, the combine also writes o as int8 activations for format f's
  /// integer-dot products (has_i8(f)) — o [rows, heads, head_dim] seen as rows·heads·head_dim / vec_cols vectors of
  /// vec_cols values (a multiple of 32 dividing that count), packed into q as quantize_act(c, f, o, vectors,
  /// vec_cols, q) would write them, bit for bit, without a step of its own (e.g. o by wo_a group). Returns whether
  /// it did: a shape that does not split, or a head_dim that is not a multiple of 32, leaves q alone, and the
  /// caller quantises.
  struct attn_q8_out {
    view q;
    format f = format::q4tp;
    uint32_t vec_cols = 0;
  };
  bool sparse_attention(commands& c, const attn_shape& sh, view q, view kv_a, view kv_b, view idx, view sinks,
                        view o, view scratch, view inv_rope_cs = {}, const attn_q8_out* q8 = nullptr);
  /// Scratch floats of sparse_attention for sh: depends on rows, heads and head_dim only (not on keys), so one
  /// buffer serves every key count of a row/head shape; 0 when the shape never splits (many rows, e.g. prefill).
  static uint64_t attn_scratch_floats(const attn_shape& sh);
  /// Whether sparse_attention runs sh on f16 tiles (shaders/attn_tc.comp) in the current f16 GEMM mode
  /// (set_gemm_precision): more than one row (prefill chunks), head_dim a multiple of 64 up to 512, its shared
  /// memory within the device's; on the tensor cores (subgroups of 32) or emulated. Otherwise the f32 kernel runs.
  bool attn_f16_tiles(const attn_shape& sh) const;

  /// Shape of one compressor pooling dispatch (§3.3 "Compressor"; V4.1 §4.2): `entries` closing windows of
  /// `ratio` positions; each position's rows of a (values) and s (scores, ape already added) hold `row_floats`
  /// floats. overlap (V4 ratio 4): channels [0, width) of the previous window's positions and [width, 2·width) of
  /// the closing window's are the slots; else channels [0, width) of the closing window. eps: the RMSNorm's.
  struct pool_shape {
    uint32_t entries = 0, ratio = 0, width = 0, row_floats = 0;
    bool overlap = false;
    float eps = 0;
    /// > 0: each entry's last rope_dim channels are then rotated as rope() rotates them (adjacent pairs), entry e by
    /// the cos/sin row at float e · cs_stride of compress_pool's `cs` — the same bits as compress_pool then rope(),
    /// one dispatch. Even, ≤ width.
    uint32_t rope_dim = 0, cs_stride = 0;
  };
  /// Largest width of compress_pool (an entry lives in shared memory).
  static constexpr uint32_t pool_max_width = 2048;
  /// out [entries, width] = rmsnorm(pooled, norm, eps), pooled[c] = Σ_slots softmax_c(s)·a (per-channel softmax over
  /// the slots). win uint32 [entries, 2]: the first row (of a and s) of the closing window's `ratio` consecutive
  /// rows, and of the previous window's (0xFFFFFFFF: none; it contributes nothing; ignored without overlap).
  /// a, s [rows, row_floats] (rows as far as win reaches); norm [width] (no view: no weight); cs: the cos/sin rows
  /// of sh.rope_dim (no view without). ape [ratio, row_floats]: s holds the scores before the absolute position
  /// embedding, and row p of every window (its p-th position) gets ape row p added as it is read (the f32 add of an
  /// add() before the call; no view: s has it already). One dispatch.
  void compress_pool(commands& c, const pool_shape& sh, view a, view s, view win, view norm, view out, view cs = {},
                     view ape = {});

  /// Shape of one indexer scoring dispatch (§3.3 "Lightning indexer"): rows query rows of heads × head_dim index
  /// heads against n index keys [n, head_dim].
  struct index_shape {
    uint32_t rows = 0, heads = 0, head_dim = 0, n = 0;
  };
  /// Largest index head_dim (a key lives in registers).
  static constexpr uint32_t index_max_head_dim = 256;
  /// score [rows, n]: score[t, j] = Σ_h relu(q[t, h]·keys[j]) · w[t, h] for j < counts[t], −inf for j ≥ counts[t]
  /// (then topk(score, rows, n, k) ranks the masked entries last). q [rows, heads, head_dim], w [rows, heads] (the
  /// head weights, already scaled), counts uint32 [rows] (each ≤ n; no view: n for every row).
  void index_score(commands& c, const index_shape& sh, view q, view keys, view w, view counts, view score);
  /// Builds now the pipelines index_score takes for any key count up to max_n with this head shape (its variant
  /// changes with the key count and with one row or many), so a long context does not compile one in the middle
  /// of a generation.
  void prepare_index_score(uint32_t heads, uint32_t head_dim, uint32_t max_n);

  /// Reads every byte of src (a streaming-read roofline kernel); writes nothing visible unless the data is
  /// pathological. sink holds >= 16 bytes.
  void stream_read(commands& c, view src, view sink);

  /// Caps the bytes of one weight binding below the device limit (0: no cap), so that tests can exercise the
  /// row slicing that tensors larger than maxStorageBufferRange need (P14).
  void set_binding_limit(uint64_t bytes);

  /// Overrides the automatic matvec work split (benchmarks and tuning; all zero = automatic).
  void set_tuning(const matvec_tuning& t);
  /// The tiled GEMMs' arithmetic from now on (default f32); f16_emulated needs shaderFloat16 (usage_error).
  void set_gemm_precision(gemm_precision p);
  /// What the tiled GEMMs run: f32, f16 (tensor cores) or f16_emulated — f16 requested on a device without
  /// cooperative matrices gives f32.
  gemm_precision gemm_precision_used() const;
  /// The precision last set (what set_gemm_precision was given).
  gemm_precision gemm_precision_requested() const;
  /// Compiles (GLSL → SPIR-V, no pipeline) every tiled-GEMM variant of mode p — the dense GEMM and the
  /// expert-grouped gate/up and down GEMMs, resident and with an expert cache, for every format — as they would
  /// be built on a device of the given subgroup size, so that a device without cooperative matrices (CI) still
  /// checks the tensor-core shaders. Returns the variants compiled; throws gpu_error with glslang's log.
  uint32_t compile_gemm_variants(gemm_precision p, uint32_t subgroup) const;
  /// Compiles (no pipeline) moe_i8_tc.comp's tensor-core variants (q4tp, q2tp; gate/up and down of V4-Flash's
  /// shapes; resident and with an expert cache) for subgroups of 32 — CI's check of the shaders that only a device
  /// with int8 cooperative matrices runs. Returns the variants compiled; throws gpu_error with glslang's log.
  uint32_t compile_moe_i8_tc_variants() const;

  /// Builds the pipelines of format f for matrices of rows x cols now (matvec, GEMM, dequant), so that the first
  /// call does not pay for them.
  void prepare(format f, uint64_t rows = 4096, uint64_t cols = 4096);
  pipeline_stats stats() const;
  /// The variant choices, one line (for logs).
  std::string describe() const;

  struct impl;

 private:
  std::unique_ptr<impl> p_;
};

/// Sets a kernels object's tiled-GEMM precision for a scope (e.g. one prefill chunk's recording: pipelines are
/// chosen when work is recorded) and restores the previous setting after.
class gemm_precision_scope {
 public:
  gemm_precision_scope(kernels& k, gemm_precision p) : k_(k), old_(k.gemm_precision_requested()) {
    k_.set_gemm_precision(p);
  }
  ~gemm_precision_scope() { k_.set_gemm_precision(old_); }
  gemm_precision_scope(const gemm_precision_scope&) = delete;
  gemm_precision_scope& operator=(const gemm_precision_scope&) = delete;

 private:
  kernels& k_;
  gemm_precision old_;
};

}  // namespace cmfx::gpu
