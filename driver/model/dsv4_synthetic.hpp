#pragma once
// A random DeepSeek-V4 model built in host memory, shaped exactly like a loaded one (dsv4_weights.cpp binds the same
// shapes, formats, qat flags and layer kinds), so speed can be measured at the real dimensions without a file.
//
// Host memory stays small by sharing: the big matrices are *seeds*, one encoded random matrix per distinct
// (role, format, shape, variant), and every layer's / expert's matrix_view points at its role's seed (a GPU upload
// copies each view into its own buffer, so device traffic is still the real model's). Small tensors (norms, sinks,
// hc_* fn/base/scale, the f32 router gate, gate bias, tid2eid, compressor ape/norm) are drawn per layer, so routing
// differs between layers. Every value is a pure function of (seed, tensor name, row), whatever the thread count.
//
// Magnitudes follow the toy (toy_v4.cpp toy_v4_values): matrices N(0, 1/cols); RMSNorm gains 1 ± 0.1; attn_sink
// N(0, 0.5²); hc_* scales 0.5 ± 0.05; hc_* bases and gate bias small; hc_*_fn and ape N(0, 1/cols).
#include <cstdint>
#include <map>
#include <memory>
#include <functional>
#include <optional>
#include <string>
#include <string_view>

#include "cmfx/formats/format.hpp"
#include "dsv4_weights.hpp"

namespace cmfx::driver {

struct dsv4_synth_options {
  /// "v4-flash": the real V4-Flash-0731 dimensions (dsv4-architecture.md §1; 43 layers, vocab 129280, dim 4096,
  /// 256 experts top-6, ...). "tiny": the toy's dimensions (toy_v4_config defaults) with vocab 1024, for tests.
  std::string preset = "v4-flash";
  format experts = format::q2tp;      // routed experts w1/w3 (and w2 unless expert_down is set)
  /// Attention, compressor and indexer projections, shared expert, head. (The release stores these FP8 block-128
  /// except wo_a, the compressors and weights_proj in BF16 and the head in F32; one format for all is a bench
  /// simplification.)
  format dense = format::fp8_b128;
  format embed = format::bf16;
  uint64_t seed = 1;
  uint32_t layers = 0;                // 0: the preset's count (v4-flash 43, tiny 5); more continues the ratio pattern
  // --- additions ---
  std::optional<format> expert_down;  // routed experts' w2 (nullopt: `experts`; cortiq's q2tp files keep it q4tp)
  /// The shared expert's formats: false = `dense` for all three (the release's FP8), true = the routed experts'
  /// (gate/up `experts`, down `expert_down`) — the CMF conversion's rule (cmf-format.md: `*.shared_expert.{gate,up}`
  /// take the expert gate/up format, every down plane q4tp), so the shared expert stacks with the routed ones.
  bool shared_routed = false;
  uint32_t vocab = 0;                 // 0: the preset's vocabulary (a smaller one makes quick v4-flash-shaped runs)
  /// Distinct random matrices per (role, format, shape): matrix k of a role (k = layer, or layer·experts + expert)
  /// uses variant k mod `variants`. 0: the preset's default (v4-flash 1, i.e. one seed per role; tiny: every matrix
  /// its own). Host memory grows with it; values and speed of the forward do not depend on it.
  uint32_t variants = 0;
  unsigned threads = 0;               // encoding threads (0 = hardware concurrency); results do not depend on it
};

/// The config (kinds filled: ratio from the preset's compress_ratios pattern [0, 0, then 4 on even and 128 on odd
/// layers], indexer on ratio-4 layers, hash routing on the first num_hash_layers = min(3, layers)) and the weights.
/// Throws usage_error for an unknown preset or a format that cannot hold a tensor's shape (naming both).
dsv4_weights dsv4_synthetic(const dsv4_synth_options& o);

/// The config alone (kinds filled), without generating anything.
dsv4_config dsv4_synth_config(const dsv4_synth_options& o);

/// "v4-flash" / "tiny" (returned unchanged), else usage_error naming the value and the known presets.
std::string dsv4_synth_preset(std::string_view name);

/// A weight format by its name in include/cmfx/formats/format_list.hpp (f32, f16, bf16, q8_row, q8_2f, q4_block,
/// q4t, q4tp, q2tp, mxfp4, fp8_b128, fp8_b32), else usage_error naming the value and listing the names.
format dsv4_synth_format(std::string_view name);

/// One random matrix [rows, cols] with N(0, sd²) entries drawn row by row from (seed, key), encoded in `f` by the
/// format's reference encoder. Large matrices are encoded in row chunks on `threads` threads (0 = hardware
/// concurrency) and the chunks' planes spliced together; `chunk_rows` (0 = automatic, about 1M values) exists for
/// tests: the result is bit-identical to F::encode of the whole matrix for every chunking.
encoded_matrix dsv4_synth_matrix(format f, uint64_t rows, uint64_t cols, uint64_t seed, std::string_view key, float sd,
                                 unsigned threads = 0, uint64_t chunk_rows = 0);

/// Rows [row0, row0 + n) of the random tensor named `key` ([*, cols], row-major into out): mean + sd·N(0, 1), drawn
/// from the same per-row streams as dsv4_synth_matrix (mean 0) and the small per-layer tensors, so any row range of
/// a tensor is a pure function of (seed, key, row). For other synthetic models (dsv41_synthetic).
void dsv4_synth_rows(float* out, uint64_t row0, uint64_t n, uint64_t cols, uint64_t seed, std::string_view key,
                     float mean, float sd);

/// fn(i, worker) for every i in [0, n) on min(threads, n) threads (0 = hardware concurrency), items handed out
/// dynamically, worker in [0, dsv4_synth_workers(n, threads)); the first exception is rethrown after all stopped.
void dsv4_synth_parallel_for(uint64_t n, unsigned threads, const std::function<void(uint64_t, uint64_t)>& fn);
uint64_t dsv4_synth_workers(uint64_t n, unsigned threads);

/// The shared big matrices of a synthetic model (V4 and V4.1): one random matrix N(0, 1/cols) per (key prefix,
/// role, shape, variant, format), made by dsv4_synth_matrix on first use; every matrix of a role that maps to the
/// same variant views the same bytes. The store must outlive the views (the models keep it in keep_alive).
class synth_seeds {
 public:
  /// prefix: prepended to every value key ("" for V4, "v41." for V4.1); what: the model's name in errors.
  synth_seeds(uint64_t seed, unsigned threads, uint32_t variants, std::string prefix, std::string what);
  uint32_t variants() const noexcept { return variants_; }
  /// The matrix of `role` number k (variant k mod variants) [rows, cols] in format f; usage_error when f cannot
  /// hold the shape.
  dsv4_matrix seed(const std::string& role, format f, uint64_t rows, uint64_t cols, uint64_t k, bool qat = false);
  /// An expert's w1 / w3 [inter, dim] in gate_up and w2 [dim, inter] in down (roles role.w1, .w3, .w2).
  expert_view expert(const std::string& role, format gate_up, format down, uint64_t inter, uint64_t dim, uint64_t k);

 private:
  uint64_t seed_;
  unsigned threads_;
  uint32_t variants_;
  std::string prefix_, what_;
  std::map<std::string, std::unique_ptr<encoded_matrix>> seeds_;  // by value key + format
};

}  // namespace cmfx::driver
