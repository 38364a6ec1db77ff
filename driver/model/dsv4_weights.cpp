#include "dsv4_weights.hpp"

#include "cmfx/core/error.hpp"
#include "cmfx/io/cmf_reader.hpp"
#include "dsv4_source.hpp"
#include "tensor_binder.hpp"

namespace cmfx::driver {

namespace {

using dims_t = tensor_binder::dims_t;

void check_stated(uint32_t stated, uint64_t found, const char* what, const std::string& from) {
  if (stated != 0 && stated != found)
    throw usage_error(std::string("model config says ") + what + " = " + std::to_string(stated) + ", but " + from +
                      " implies " + std::to_string(found));
}

dsv4_compressor_w bind_compressor(const tensor_binder& b, const std::string& p, uint32_t width, uint32_t dim) {
  dsv4_compressor_w c;
  c.width = width;
  const dims_t wkv = b.dims(p + "wkv.weight");
  if (wkv.size() != 2 || wkv[0] % width != 0 || (wkv[0] / width != 1 && wkv[0] / width != 2))
    throw usage_error("tensor '" + p + "wkv.weight' has shape " + shape_string(wkv) + ", expected [1 or 2 × " +
                      std::to_string(width) + ", " + std::to_string(dim) + "]");
  const uint32_t coff = uint32_t(wkv[0] / width);
  const dims_t ape = b.dims(p + "ape");
  if (ape.size() != 2 || ape[1] != coff * width)
    throw usage_error("tensor '" + p + "ape' has shape " + shape_string(ape) + ", expected [ratio, " +
                      std::to_string(coff * width) + "]");
  c.ratio = uint32_t(ape[0]);
  c.overlap = c.ratio == 4;  // the official Compressor: overlap iff ratio == 4
  if (c.coff() != coff)
    throw usage_error(p + "wkv.weight: ratio " + std::to_string(c.ratio) + " needs " + std::to_string(c.coff()) +
                      " × width rows, found " + std::to_string(wkv[0]));
  c.wkv = b.matrix(p + "wkv.weight", coff * width, dim);
  c.wgate = b.matrix(p + "wgate.weight", coff * width, dim);
  c.ape = b.floats(p + "ape", {c.ratio, coff * width});
  c.norm = b.floats(p + "norm.weight", {width});
  return c;
}

}  // namespace

dsv4_weights dsv4_load(const std::string& path) {
  std::shared_ptr<dsv4_source> src = dsv4_open_source(path);
  const tensor_binder b(*src);
  dsv4_weights w;
  w.keep_alive = src;
  w.source = src->kind();
  dsv4_config c = src->config();
  if (c.dim == 0 || c.layers == 0 || c.heads == 0 || c.head_dim == 0 || c.vocab == 0)
    throw usage_error(path + ": model config lacks dim / layers / heads / head_dim / vocab");
  if (c.rope_dim == 0 || c.rope_dim > c.head_dim || c.rope_dim % 2)
    throw usage_error("rope dim " + std::to_string(c.rope_dim) + " does not fit head_dim " + std::to_string(c.head_dim));
  const uint64_t d = c.dim, H = c.heads, hd = c.head_dim;

  // Shapes the file decides (cmf-format.md §4.2 "read from the weights, not the header").
  const dims_t hcb = b.dims("hc_head_base");
  if (hcb.size() != 1 || hcb[0] == 0 || hcb[0] > 8) throw usage_error("tensor 'hc_head_base' has shape " + shape_string(hcb));
  c.hc = uint32_t(hcb[0]);
  const dims_t wqa = b.dims("layers.0.attn.wq_a.weight");
  if (wqa.size() != 2) throw usage_error("tensor 'layers.0.attn.wq_a.weight' is not 2-D");
  check_stated(c.q_lora, wqa[0], "q_lora_rank", "layers.0.attn.wq_a.weight");
  c.q_lora = uint32_t(wqa[0]);
  const dims_t woa = b.dims("layers.0.attn.wo_a.weight");
  if (woa.size() != 2 || woa[1] == 0 || (H * hd) % woa[1] != 0)
    throw usage_error("tensor 'layers.0.attn.wo_a.weight' has shape " + shape_string(woa) + ", expected [G·o_lora, H·hd/G]");
  const uint64_t groups = H * hd / woa[1];
  if (groups == 0 || woa[0] % groups != 0) throw usage_error("tensor 'layers.0.attn.wo_a.weight': bad group split");
  c.o_groups = uint32_t(groups);
  check_stated(c.o_lora, woa[0] / groups, "o_lora_rank", "layers.0.attn.wo_a.weight");
  c.o_lora = uint32_t(woa[0] / groups);
  const dims_t gw = b.dims("layers.0.ffn.gate.weight");
  if (gw.size() != 2) throw usage_error("tensor 'layers.0.ffn.gate.weight' is not 2-D");
  check_stated(c.experts, gw[0], "n_routed_experts", "layers.0.ffn.gate.weight");
  c.experts = uint32_t(gw[0]);
  const dims_t w1 = b.dims("layers.0.ffn.shared_experts.w1.weight");
  if (w1.size() != 2) throw usage_error("tensor 'layers.0.ffn.shared_experts.w1.weight' is not 2-D");
  check_stated(c.moe_inter, w1[0], "moe_intermediate_size", "layers.0.ffn.shared_experts.w1.weight");
  c.moe_inter = uint32_t(w1[0]);
  if (c.top_k == 0 || c.top_k > c.experts)
    throw usage_error("model config: experts per token (" + std::to_string(c.top_k) + ") must be in [1, " +
                      std::to_string(c.experts) + "]");
  const uint64_t q = c.q_lora, G = c.o_groups, ol = c.o_lora, E = c.experts, I = c.moe_inter;
  const uint64_t hcd = uint64_t(2 + c.hc) * c.hc;

  w.embed = b.matrix("embed.weight", c.vocab, d);
  w.head = b.matrix("head.weight", c.vocab, d);
  w.norm = b.floats("norm.weight", {d});
  w.hc_head_fn = b.floats("hc_head_fn", {c.hc, c.hc * d});
  w.hc_head_base = b.floats("hc_head_base", {c.hc});
  w.hc_head_scale = b.floats("hc_head_scale", {1})[0];

  c.kinds.assign(c.layers, {});
  w.layers.resize(c.layers);
  bool index_dims_set = false;
  for (uint32_t i = 0; i < c.layers; ++i) {
    const std::string p = "layers." + std::to_string(i) + ".";
    dsv4_layer_w& L = w.layers[i];
    bind_attention_and_hc(b, L, p, d, H, hd, q, G, ol, c.hc, hcd);

    dsv4_layer_kind& k = c.kinds[i];
    if (b.has(p + "attn.compressor.wkv.weight")) {
      L.comp = bind_compressor(b, p + "attn.compressor.", c.head_dim, c.dim);
      k.ratio = L.comp.ratio;
    }
    if (b.has(p + "attn.indexer.wq_b.weight")) {
      if (k.ratio != 4)
        throw usage_error("layer " + std::to_string(i) + " has an indexer but compress ratio " + std::to_string(k.ratio) +
                          " (the indexer exists on ratio-4 layers only)");
      const dims_t wp = b.dims(p + "attn.indexer.weights_proj.weight"), iq = b.dims(p + "attn.indexer.wq_b.weight");
      if (wp.size() != 2 || iq.size() != 2 || wp[0] == 0 || iq[0] % wp[0] != 0)
        throw usage_error("layer " + std::to_string(i) + ": indexer weights_proj " + shape_string(wp) + " and wq_b " +
                          shape_string(iq) + " do not agree on the head count");
      if (!index_dims_set) {
        c.index_heads = uint32_t(wp[0]);
        c.index_head_dim = uint32_t(iq[0] / wp[0]);
        index_dims_set = true;
      }
      if (c.index_head_dim < c.rope_dim)
        throw usage_error("index head dim " + std::to_string(c.index_head_dim) + " is smaller than the rope dim");
      L.ix_wq_b = b.matrix(p + "attn.indexer.wq_b.weight", uint64_t(c.index_heads) * c.index_head_dim, q, true);
      L.ix_weights_proj = b.matrix(p + "attn.indexer.weights_proj.weight", c.index_heads, d);
      L.ix_comp = bind_compressor(b, p + "attn.indexer.compressor.", c.index_head_dim, c.dim);
      if (L.ix_comp.ratio != 4)
        throw usage_error("layer " + std::to_string(i) + ": indexer compressor ratio " + std::to_string(L.ix_comp.ratio) +
                          " (expected 4)");
      k.indexer = true;
    } else if (k.ratio == 4) {
      throw usage_error(src->kind() + " model is missing tensor " + src->spelled(p + "attn.indexer.wq_b.weight") +
                        " (layer " + std::to_string(i) + " compresses with ratio 4)");
    }
    if (i < c.compress_ratios.size() && c.compress_ratios[i] != k.ratio)
      throw usage_error("model config says layer " + std::to_string(i) + " has compress ratio " +
                        std::to_string(c.compress_ratios[i]) + ", but its tensors give " + std::to_string(k.ratio));

    L.gate = b.matrix(p + "ffn.gate.weight", E, d);
    if (b.has(p + "ffn.gate.tid2eid")) {
      k.hash = true;
      L.tid2eid = b.ids(p + "ffn.gate.tid2eid", {c.vocab, c.top_k}, c.experts);
    } else {
      L.gate_bias = b.floats(p + "ffn.gate.bias", {E});
    }
    L.experts.resize(E);
    for (uint64_t e = 0; e < E; ++e) L.experts[e] = bind_expert(b, p + "ffn.experts." + std::to_string(e) + ".", I, d);
    L.shared = bind_expert(b, p + "ffn.shared_experts.", I, d);
    L.kind = k;
  }
  w.cfg = c;
  return w;
}

}  // namespace cmfx::driver
