#include "dsv41_weights.hpp"

#include "cmfx/core/error.hpp"
#include "cmfx/io/cmf_reader.hpp"
#include "dsv41_engram.hpp"
#include "dsv4_source.hpp"
#include "tensor_binder.hpp"

namespace cmfx::driver {

namespace {

using dims_t = tensor_binder::dims_t;

dsv41_config config_of(const dsv4_source& s) {
  if (s.kind() == "cmf") return dsv41_config_from_cmf(s.raw_config());
  return dsv41_config_from_release(s.raw_config());
}

}  // namespace

bool dsv41_is_model(const std::string& path) {
  const auto src = dsv4_open_source(path);
  return src->kind() == "cmf" ? dsv41_is_cmf_header(src->raw_config()) : dsv41_is_release_config(src->raw_config());
}

dsv41_weights dsv41_load(const std::string& path) {
  std::shared_ptr<dsv4_source> src = dsv4_open_source(path);
  const tensor_binder b(*src, "V4.1 ");
  dsv41_weights w;
  w.keep_alive = src;
  w.source = src->kind();
  dsv41_config c = config_of(*src);
  if (c.dim == 0 || c.heads == 0 || c.head_dim == 0 || c.vocab == 0 || c.q_lora == 0 || c.o_lora == 0 ||
      c.experts == 0 || c.moe_inter == 0)
    throw usage_error(path + ": V4.1 config lacks hidden / heads / head_dim / vocab / q_lora / o_lora / experts / "
                             "moe_intermediate_size");
  if (c.rope_dim == 0 || c.rope_dim > c.head_dim || c.rope_dim % 2)
    throw usage_error("rope dim " + std::to_string(c.rope_dim) + " does not fit head_dim " + std::to_string(c.head_dim));
  if (c.top_k == 0 || c.top_k > c.experts) throw usage_error("V4.1 config: num_experts_per_tok out of range");
  if ((uint64_t(c.heads) * c.head_dim) % c.o_groups) throw usage_error("V4.1 config: o_groups does not divide the heads");
  if (!c.index_sources.empty() && (c.index_heads == 0 || c.index_head_dim < c.rope_dim))
    throw usage_error("V4.1 config: index_n_heads / index_head_dim missing or smaller than the rope dim");
  const uint64_t d = c.dim, H = c.heads, hd = c.head_dim, q = c.q_lora, G = c.o_groups, ol = c.o_lora;
  const uint64_t E = c.experts, I = c.moe_inter, hcd = uint64_t(2 + c.hc) * c.hc;
  const uint64_t IH = c.index_heads, IHD = c.index_head_dim;

  w.embed = b.matrix("embed.weight", c.vocab, d);
  w.head = b.matrix("head.weight", c.vocab, d);
  w.norm = b.floats("norm.weight", {d});
  b.refuse("hc_head_fn", "V4.1 collapses the stream with the last FFN pre (no hc_head)");
  w.layers.resize(c.layers);
  for (uint32_t i = 0; i < c.layers; ++i) {
    const std::string p = "layers." + std::to_string(i) + ".";
    const dsv41_layer_plan& pl = c.plan[i];
    dsv41_layer_w& L = w.layers[i];
    bind_attention_and_hc(b, L, p, d, H, hd, q, G, ol, c.hc, hcd);
    const std::string mode = std::string(dsv41_mode_name(pl.mode)) + " layer " + std::to_string(i);
    if (pl.mode == dsv41_mode::full) {
      L.comp_wkv = b.matrix(p + "attn.compressor.wkv.weight", hd, d);
      if (pl.ratio > 1) L.comp_wgate = b.matrix(p + "attn.compressor.wgate.weight", hd, d);
      else b.refuse(p + "attn.compressor.wgate.weight", "a ratio-1 compressor has no gate");
      L.comp_norm = b.floats(p + "attn.compressor.norm.weight", {hd});
      b.refuse(p + "attn.compressor.ape", "the V4.1 compressor has no ape");
      L.ix_wk = b.matrix(p + "attn.indexer.wk.weight", IHD, hd);
      L.ix_k_norm = b.floats(p + "attn.indexer.k_norm.weight", {IHD});
    } else {
      b.refuse(p + "attn.compressor.wkv.weight", "the config does not list layer " + std::to_string(i) + " as a KV source");
      b.refuse(p + "attn.indexer.wk.weight", "the config does not list layer " + std::to_string(i) + " as a KV source");
    }
    if (pl.mode == dsv41_mode::full || pl.mode == dsv41_mode::reindex) {
      L.ix_wq_b = b.matrix(p + "attn.indexer.wq_b.weight", IH * IHD, q, true);
      L.ix_weights_proj = b.matrix(p + "attn.indexer.weights_proj.weight", IH, d);
    } else {
      b.refuse(p + "attn.indexer.wq_b.weight", "the config does not list " + mode + " as an index source");
    }
    if (pl.engram >= 0) {
      const uint64_t cols = uint64_t(c.engram_max_ngram - 1) * c.engram_heads * c.engram_head_dim;
      const auto t = src->find(p + "engram.embed.weight");
      if (!t || t->dims.size() != 2) throw usage_error("V4.1 model is missing tensor " + src->spelled(p + "engram.embed.weight"));
      if (!t->fmt && t->dtype == "F8_E4M3" && t->v.scale) {  // the release's row-scaled FP8 table, read in place
        if (t->dims != dims_t{t->dims[0], c.engram_head_dim})
          throw usage_error("tensor '" + t->name + "' has shape " + shape_string(t->dims) + ", expected [rows, " +
                            std::to_string(c.engram_head_dim) + "]");
        L.eg_table_fp8 = t->v;
      } else {
        L.eg_embed = b.matrix(p + "engram.embed.weight", t->dims[0], c.engram_head_dim);
      }
      L.eg_wkv = b.matrix(p + "engram.wkv.weight", uint64_t(c.hc + 1) * d, cols, true);
      L.eg_q_weight = b.floats(p + "engram.q_weight", {c.hc, d});
      L.eg_k_weight = b.floats(p + "engram.k_weight", {c.hc, d});
    } else {
      b.refuse(p + "engram.wkv.weight", "the config does not list layer " + std::to_string(i) + " as an Engram layer");
    }
    L.gate = b.matrix(p + "ffn.gate.weight", E, d);
    L.gate_bias = b.floats(p + "ffn.gate.bias", {E});
    b.refuse(p + "ffn.gate.tid2eid", "V4.1 has no hash-routed layers");
    L.experts.resize(E);
    for (uint64_t e = 0; e < E; ++e) L.experts[e] = bind_expert(b, p + "ffn.experts." + std::to_string(e) + ".", I, d);
    L.shared = bind_expert(b, p + "ffn.shared_experts.", I, d);
  }
  if (dsv41_engram_needs_tokenizer(c)) w.engram_map = dsv41_engram_tokenizer_map(path, c);  // once per load
  w.cfg = std::move(c);
  return w;
}

}  // namespace cmfx::driver
