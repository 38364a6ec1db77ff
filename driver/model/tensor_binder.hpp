#pragma once
// Binding a model's tensors by release name, shared by the V4 and V4.1 loaders (dsv4_weights.cpp,
// dsv41_weights.cpp): every lookup checks the shape it expects, and errors spell the name as the file stores it.
#include <cstdint>
#include <string>
#include <vector>

#include "cmfx/kernels/moe.hpp"
#include "dsv4_source.hpp"
#include "dsv4_weights.hpp"

namespace cmfx::driver {

class tensor_binder {
 public:
  using dims_t = std::vector<uint64_t>;
  /// model: the words errors put before "model is missing tensor" after the source's kind (e.g. "V4.1 ").
  tensor_binder(const dsv4_source& s, std::string model = {}) : src_(s), model_(std::move(model)) {}

  bool has(const std::string& n) const;
  dsv4_tensor need(const std::string& n) const;
  dsv4_tensor need(const std::string& n, const dims_t& want) const;
  dims_t dims(const std::string& n) const { return need(n).dims; }
  /// A weight matrix [rows, cols] in any weight format, viewed in place.
  dsv4_matrix matrix(const std::string& n, uint64_t rows, uint64_t cols, bool qat_input = false) const;
  /// Decoded to f32 (small tensors only).
  std::vector<float> floats(const std::string& n, const dims_t& want) const;
  /// Integer table (I32 / I64 in the release, integer-valued f32 in CMF), every entry checked to be in [0, bound).
  std::vector<int32_t> ids(const std::string& n, const dims_t& want, uint32_t bound) const;
  /// Throws if tensor n is present: the model's config says it cannot be (why).
  void refuse(const std::string& n, const std::string& why) const;

 private:
  const dsv4_source& src_;
  std::string model_;
};

/// One expert's w1 / w3 / w2 under prefix p ([inter, dim], [inter, dim], [dim, inter]).
expert_view bind_expert(const tensor_binder& b, const std::string& p, uint64_t inter, uint64_t dim);

/// The attention projections, norms, sink and both mHC sites of layer prefix p: the same names and shapes in V4
/// and V4.1. L: dsv4_layer_w or dsv41_layer_w; q / G / ol: q_lora, o_groups, o_lora; hcd = (2 + hc) · hc.
template <class Layer>
void bind_attention_and_hc(const tensor_binder& b, Layer& L, const std::string& p, uint64_t d, uint64_t H,
                           uint64_t hd, uint64_t q, uint64_t G, uint64_t ol, uint64_t hc, uint64_t hcd) {
  L.attn_norm = b.floats(p + "attn_norm.weight", {d});
  L.ffn_norm = b.floats(p + "ffn_norm.weight", {d});
  L.wq_a = b.matrix(p + "attn.wq_a.weight", q, d, true);
  L.q_norm = b.floats(p + "attn.q_norm.weight", {q});
  L.wq_b = b.matrix(p + "attn.wq_b.weight", H * hd, q, true);
  L.wkv = b.matrix(p + "attn.wkv.weight", hd, d, true);
  L.kv_norm = b.floats(p + "attn.kv_norm.weight", {hd});
  L.wo_a = b.matrix(p + "attn.wo_a.weight", G * ol, H * hd / G);
  L.wo_b = b.matrix(p + "attn.wo_b.weight", d, G * ol, true);
  L.attn_sink = b.floats(p + "attn.attn_sink", {H});
  L.hc_attn_fn = b.floats(p + "hc_attn_fn", {hcd, hc * d});
  L.hc_attn_base = b.floats(p + "hc_attn_base", {hcd});
  L.hc_attn_scale = b.floats(p + "hc_attn_scale", {3});
  L.hc_ffn_fn = b.floats(p + "hc_ffn_fn", {hcd, hc * d});
  L.hc_ffn_base = b.floats(p + "hc_ffn_base", {hcd});
  L.hc_ffn_scale = b.floats(p + "hc_ffn_scale", {3});
}

}  // namespace cmfx::driver
