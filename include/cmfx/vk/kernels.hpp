#pragma once
/// @file kernels.hpp
/// @brief GPU kernels over a gpu::device: matvec / small-batch GEMM of every weight format of all_formats, exact
///        dequantisation, RMSNorm, RoPE, softmax with sink, exact top-k, clamped SwiGLU. The contracts are those
///        of the CPU ops (include/cmfx/ops/, include/cmfx/ref/); docs/VULKAN.md gives the tolerances.
///
/// Shaders are GLSL files (shaders/) compiled at run time by glslang; each format's constants reach GLSL as
/// #defines generated from its C++ trait. Pipelines are built on first use (or by prepare()) and cached.
/// Every call records into `commands`; nothing runs until device::submit.
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "cmfx/formats/format.hpp"
#include "cmfx/kernels/act_precision.hpp"
#include "cmfx/vk/device.hpp"

namespace cmfx::gpu {

/// A weight matrix resident on the device: the payload exactly as the file holds it (plus external scales).
struct gpu_matrix {
  format fmt = format::f32;
  scale_encoding scale_enc = scale_encoding::none;
  uint64_t rows = 0, cols = 0;
  buffer data, scale;
};

/// Copies a host matrix (format f) to the device. Throws usage_error for shapes the format cannot hold.
gpu_matrix upload_matrix(device& dev, format f, const matrix_view& w);

/// The GLSL #define lines of format f (the preamble of every format-specialised shader): generated from the
/// format trait, exposed for tests and docs.
std::string format_defines(format f, scale_encoding enc);

/// Counters of the pipeline machinery (for tests of the caches).
struct pipeline_stats {
  uint32_t pipelines = 0;        ///< distinct pipelines created
  uint32_t compiled = 0;         ///< GLSL → SPIR-V compilations run
  uint32_t spirv_disk_hits = 0;  ///< SPIR-V read from the cache directory instead
  double compile_seconds = 0;
};

/// Work split of one matmul dispatch (shaders/matvec.comp). 0 = chosen by the kernels from the shape.
struct matvec_tuning {
  uint32_t split = 0;   ///< teams (subgroups) that share a row's columns, a power of two: more teams for few rows
  uint32_t unroll = 0;  ///< chunks whose loads a lane issues before decoding them: 1, 2, 4 or 8
  /// Batch-1 row kernel (shaders/matvec_rows.comp): rows one subgroup computes together (1, 2 or 4), so that
  /// each activation value read serves that many rows. 0: chosen from the shape.
  uint32_t rows_per_team = 0;
  bool legacy = false;  ///< true: never use the row kernel (comparisons in benchmarks)
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
  void matmul(commands& c, const gpu_matrix& w, view x, uint32_t n, view y, act_precision act = act_precision::f32);
  /// Whether matmul(..., act_precision::i8) of a batch-1 product of format f takes the int8 path here.
  bool has_i8(format f) const;
  /// Bytes of the int8 activations of n tokens of `cols` values (shaders/common/act_q8.glsl: 40 per 32 values).
  static constexpr uint64_t act_q8_bytes(uint64_t cols, uint32_t n = 1) { return cols / 32 * 40 * n; }
  /// Quantises x [n, cols] (cols % 32 == 0) to int8 blocks packed for format f's integer-dot matvec (has_i8(f)).
  /// One quantisation serves every matvec of that format on the same x (e.g. the projections of one norm output).
  void quantize_act(commands& c, format f, view x, uint32_t n, uint64_t cols, view out);
  /// y = W · x̃, x̃ the activations quantize_act(w.fmt, ...) wrote into xq (batch 1; xq 16-byte aligned).
  void matvec_q8(commands& c, const gpu_matrix& w, view xq, view y);
  /// out[r*cols + c] = W[r, c] bit-exactly as F::decode_row. generic = true forces the element-wise path.
  void dequant(commands& c, const gpu_matrix& w, view out, bool generic = false);
  /// Same as matmul but forces the element-wise (unaligned) path; for the parity suite.
  void matmul_generic(commands& c, const gpu_matrix& w, view x, uint32_t n, view y);

  /// y[r] = x[r] · rsqrt(mean(x[r]²) + eps) [· weight] for rows r of `dim` floats (rmsnorm / rmsnorm_heads).
  void rmsnorm(commands& c, view x, view weight, view y, uint32_t rows, uint32_t dim, float eps);
  /// In place: rotates the last rope_dim channels of every head of x [rows, heads, head_dim] by adjacent pairs
  /// with cs [rows, rope_dim] (cos, sin interleaved: rope_table::rotation of each row's position).
  void rope(commands& c, view x, view cs, uint32_t rows, uint32_t heads, uint32_t head_dim, uint32_t rope_dim,
            bool inverse);
  /// p [rows, n] = attend_sink(logits [rows, n], sink[r % sink_count]); no sink view (or sink_count 0): −inf.
  /// p may be the same range as logits.
  void softmax_sink(commands& c, view logits, view sinks, uint32_t sink_count, view p, uint32_t rows, uint32_t n);
  /// idx [rows, k] (uint32) = topk(scores [rows, n], k) with the tie rule of ops/topk.hpp; slots past min(k, n)
  /// get 0xFFFFFFFF. k <= topk_max_k.
  void topk(commands& c, view scores, uint32_t rows, uint32_t n, uint32_t k, view idx);
  /// out[i] = silu(min(g, limit)) · clamp(v, −limit, limit) · weight (limit <= 0: no clamp). out may alias.
  void swiglu_clamp(commands& c, view g, view v, view out, uint64_t n, float limit, float weight = 1.0f);
  /// Reads every byte of src (a streaming-read roofline kernel); writes nothing visible unless the data is
  /// pathological. sink holds >= 16 bytes.
  void stream_read(commands& c, view src, view sink);

  /// Caps the bytes of one weight binding below the device limit (0: no cap), so that tests can exercise the
  /// row slicing that tensors larger than maxStorageBufferRange need (P14).
  void set_binding_limit(uint64_t bytes);

  /// Overrides the automatic matvec work split (benchmarks and tuning; all zero = automatic).
  void set_tuning(const matvec_tuning& t);

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

}  // namespace cmfx::gpu
