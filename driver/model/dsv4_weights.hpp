#pragma once
// Every DeepSeek-V4 tensor bound by name, zero-copy, as a matrix_view plus its weight format (the big matrices), or
// decoded to f32 (the small vectors/tables: norms, sinks, ape, hc_*, router bias, tid2eid). Sources: a CMF file
// (cortiq names, cmf-format.md §4.1) or the official release directory (convert.py names `layers.N.attn.*` or
// HF names `model.layers.N.self_attn.*`; FP8 E4M3 + UE8M0 128x128 `.scale` → fp8_b128, FP4 experts I8 + UE8M0
// per-32 `.scale` → mxfp4, BF16/F16/F32 → dense). Layer kinds are decided by which tensors exist; a missing or
// mis-shaped tensor is an error naming it.
#include <memory>
#include <string>
#include <vector>

#include "cmfx/formats/format.hpp"
#include "cmfx/kernels/moe.hpp"
#include "dsv4_config.hpp"

namespace cmfx::driver {

/// A weight matrix [rows, cols] in its storage format (zero-copy view into the mapped file).
struct dsv4_matrix {
  matrix_view v;
  format fmt = format::f32;
  bool qat_input = false;  // an FP8/FP4 Linear in the release (its input gets QAT act-quant when enabled)
  uint64_t rows() const noexcept { return v.rows; }
  uint64_t cols() const noexcept { return v.cols; }
};

/// One compressor (main: width head_dim; indexer: width index_head_dim).
struct dsv4_compressor_w {
  uint32_t ratio = 0, width = 0;
  bool overlap = false;         // ratio 4: two halves (previous window ++ current window)
  dsv4_matrix wkv, wgate;       // [coff·width, dim]
  std::vector<float> ape;       // [ratio, coff·width]
  std::vector<float> norm;      // [width]
  uint32_t coff() const noexcept { return overlap ? 2u : 1u; }
};

struct dsv4_layer_w {
  dsv4_layer_kind kind;
  std::vector<float> attn_norm, ffn_norm, q_norm, kv_norm, attn_sink;
  dsv4_matrix wq_a, wq_b, wkv, wo_a, wo_b;
  std::vector<float> hc_attn_fn, hc_attn_base, hc_attn_scale, hc_ffn_fn, hc_ffn_base, hc_ffn_scale;
  dsv4_compressor_w comp;                         // ratio > 0
  dsv4_matrix ix_wq_b, ix_weights_proj;           // indexer (ratio 4)
  dsv4_compressor_w ix_comp;
  dsv4_matrix gate;                               // router [experts, dim]
  std::vector<float> gate_bias;                   // score layers
  std::vector<int32_t> tid2eid;                   // hash layers [vocab, top_k]
  std::vector<expert_view> experts;
  expert_view shared;
};

struct dsv4_weights {
  dsv4_config cfg;
  std::string source;  // "cmf" or "release", for messages
  dsv4_matrix embed, head;
  std::vector<float> norm, hc_head_fn, hc_head_base;
  float hc_head_scale = 1.0f;
  std::vector<dsv4_layer_w> layers;
  std::shared_ptr<const void> keep_alive;  // the open file(s) the views point into
};

/// Open a model: a CMF file, or a release-layout directory / index / .safetensors file.
dsv4_weights dsv4_load(const std::string& path);

}  // namespace cmfx::driver
