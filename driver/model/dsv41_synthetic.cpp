#include "dsv41_synthetic.hpp"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <map>
#include <memory>
#include <stdexcept>
#include <vector>

#include "cmfx/core/error.hpp"
#include "cmfx/formats/format_list.hpp"
#include "dsv41_engram.hpp"
#include "dsv4_synthetic.hpp"
#include "toy_v41.hpp"

namespace cmfx::driver {

namespace {

// ---- presets -----------------------------------------------------------------------------------------------------

constexpr uint32_t tiny_vocab = 1024;
/// The synthetic v41-flash hash space (the release's 16,000,000 gives ≈384M rows per layer; see the header).
constexpr uint64_t flash_engram_vocab = 65536;
constexpr uint32_t dspark_stages = 3;  // trailing ratio-0 entries of the release's compress_ratios (DSpark stages)

/// V4.1-Flash text config (dsv4-architecture.md §1, §2 "V4.1 deltas"); fields not set are dsv41_config.hpp's
/// defaults, which are the release's (rope 64, o_groups 8, index top-k 512, window 128, hc 4 × 20 Sinkhorn
/// iterations, norm eps 1e-20, route scale 1.5, swiglu 10, rope / YaRN, candidate pool 2048 × 8).
dsv41_config flash_config() {
  dsv41_config c;
  c.vocab = 129280;
  c.dim = 5120;
  c.layers = 40;
  c.heads = 64;
  c.head_dim = 512;
  c.q_lora = 1280;
  c.o_lora = 1024;
  c.index_heads = 32;
  c.index_head_dim = 128;
  c.experts = 384;
  c.top_k = 6;
  c.moe_inter = 2304;
  c.compress_ratios = {0, 0};                            // [0,0] + [2]*18 (L2–19) + [1]*20 (L20–39) + [0,0,0]
  c.compress_ratios.insert(c.compress_ratios.end(), 18, 2u);
  c.compress_ratios.insert(c.compress_ratios.end(), 20, 1u);
  c.kv_sources = {2, 8, 14, 20};
  c.index_sources = {2, 8, 14, 20, 24, 28, 32, 36};
  c.candidate_source = 20;
  c.engram_layers = {1, 14};
  c.engram_vocab_size = flash_engram_vocab;
  c.engram_max_ngram = 4;
  c.engram_heads = 8;
  c.engram_head_dim = 256;
  c.engram_pad_id = 2;
  c.engram_compressed_vocab = 99092;
  c.engram_multipliers = {std::vector<int64_t>(dsv41_engram_mult_l1.begin(), dsv41_engram_mult_l1.end()),
                          std::vector<int64_t>(dsv41_engram_mult_l14.begin(), dsv41_engram_mult_l14.end())};
  return c;
}

/// The V4.1 toy's text config (toy_v41_config defaults, as toy_v41_text_config states them) at vocab 1024.
dsv41_config tiny_config() {
  const toy_v41_config t;
  dsv41_config c;
  c.vocab = tiny_vocab;
  c.layers = t.layers;
  copy_toy_dims(c, t);
  c.gate_temp = t.gate_temp;
  c.compress_ratios.assign(t.compress_ratios.begin(), t.compress_ratios.begin() + t.layers);  // trunk only
  c.kv_sources = t.kv_sources;
  c.index_sources = t.index_sources;
  c.candidate_source = t.candidate_source;
  c.candidate_topk_blocks = t.candidate_topk_blocks;
  c.candidate_block_size = t.candidate_block_size;
  c.engram_layers = t.engram_layers;
  c.engram_vocab_size = t.engram_vocab_size;
  c.engram_max_ngram = t.engram_max_ngram;
  c.engram_heads = t.engram_heads;
  c.engram_head_dim = t.engram_head_dim;
  c.engram_pad_id = t.engram_pad_id;
  c.engram_compressed_vocab = t.engram_compressed_vocab;
  c.engram_multipliers = t.engram_multipliers;
  return c;
}

std::vector<uint32_t> below(const std::vector<uint32_t>& v, uint32_t n) {
  std::vector<uint32_t> out;
  for (uint32_t x : v)
    if (x < n) out.push_back(x);
  return out;
}

// ---- the model ---------------------------------------------------------------------------------------------------

/// Everything the views point into.
struct synth_store {
  synth_seeds seeds;                                           // the big matrices (keys prefixed "v41.")
  std::vector<std::vector<float>> gates;                       // per-layer f32 router weights
  std::vector<std::unique_ptr<encoded_matrix>> engram_tables;  // one per Engram-table variant (FP8 rows)
  synth_store(const dsv41_synth_options& o, uint32_t variants)
      : seeds(o.seed, o.threads, variants, "v41.", "synthetic V4.1 model") {}
};

class synth_builder {
 public:
  synth_builder(const dsv41_synth_options& o, synth_store& st) : o_(o), st_(st) {}

  uint32_t variants() const noexcept { return st_.seeds.variants(); }

  dsv4_matrix seed(const std::string& role, format f, uint64_t rows, uint64_t cols, uint64_t k, bool qat = false) {
    return st_.seeds.seed(role, f, rows, cols, k, qat);
  }
  expert_view expert(const std::string& role, format gate_up, format down, uint64_t inter, uint64_t dim, uint64_t k) {
    return st_.seeds.expert(role, gate_up, down, inter, dim, k);
  }

  /// An Engram table [rows, cols] N(0, 1/cols) in the release's FP8 row format, rows drawn and encoded in chunks on
  /// the encoding threads (the encoding is per row, so chunking does not change a byte).
  encoded_matrix engram_table(uint64_t rows, uint64_t cols, uint64_t variant) const {
    std::string key = "v41.engram.embed[*, ";
    key += std::to_string(cols);
    key += "]#";
    key += std::to_string(variant);
    const float sd = 1.0f / std::sqrt(float(cols));
    const uint32_t B = toy_v41_engram_scale_block;
    if (cols % B) throw usage_error("synthetic V4.1 model: Engram head dim " + std::to_string(cols) +
                                    " is not a multiple of the table's scale block 32");
    encoded_matrix out;
    out.data.resize(rows * cols);
    out.scale.resize(rows * (cols / B));
    const uint64_t chunk = std::max<uint64_t>(1, (uint64_t(1) << 18) / cols), n_chunks = (rows + chunk - 1) / chunk;
    std::vector<std::vector<float>> bufs(dsv4_synth_workers(n_chunks, o_.threads));
    dsv4_synth_parallel_for(n_chunks, o_.threads, [&](uint64_t k, uint64_t worker) {
      const uint64_t r0 = k * chunk, n = std::min(chunk, rows - r0);
      std::vector<float>& w = bufs[worker];
      w.resize(n * cols);
      dsv4_synth_rows(w.data(), r0, n, cols, o_.seed, key, 0.0f, sd);
      const encoded_matrix e = toy_v41_engram_table_fp8(w.data(), n, cols);
      std::memcpy(out.data.data() + r0 * cols, e.data.data(), e.data.size());
      std::memcpy(out.scale.data() + r0 * (cols / B), e.scale.data(), e.scale.size());
    });
    return out;
  }

  /// Per-tensor values mean + sd·N(0, 1) of the named tensor [rows, cols] (row-major).
  std::vector<float> floats(const std::string& name, uint64_t rows, uint64_t cols, float mean, float sd) const {
    std::vector<float> v(rows * cols);
    dsv4_synth_rows(v.data(), 0, rows, cols, o_.seed, "v41." + name, mean, sd);
    return v;
  }
  std::vector<float> vec(const std::string& name, uint64_t n, float mean, float sd) const {
    return floats(name, 1, n, mean, sd);
  }
  /// A matrix-shaped small tensor (hc_*_fn, router): N(0, 1/cols).
  std::vector<float> mat(const std::string& name, uint64_t rows, uint64_t cols) const {
    return floats(name, rows, cols, 0.0f, 1.0f / std::sqrt(float(cols)));
  }

 private:
  const dsv41_synth_options& o_;
  synth_store& st_;
};

void check_format(format f, const char* what) {
  if (!visit_format(f, []<class>() {})) {
    std::string m = "synthetic V4.1 model: invalid weight format value ";
    m += std::to_string(unsigned(f));
    m += " for ";
    m += what;
    throw usage_error(m);
  }
}

}  // namespace

std::string dsv41_synth_preset(std::string_view name) {
  if (name == "v41-flash" || name == "tiny") return std::string(name);
  std::string m = "unknown synthetic V4.1 model preset '";
  m += name;
  m += "' (known: v41-flash, tiny)";
  throw usage_error(m);
}

dsv41_config dsv41_synth_config(const dsv41_synth_options& o) {
  const std::string preset = dsv41_synth_preset(o.preset);
  dsv41_config c = preset == "tiny" ? tiny_config() : flash_config();
  const uint32_t trunk = c.layers;
  if (o.layers) c.layers = o.layers;
  if (o.vocab) c.vocab = o.vocab;
  if (o.engram_vocab_size) c.engram_vocab_size = o.engram_vocab_size;
  // Ratios: the preset's trunk pattern, continued with its last ratio (reuse layers), then the DSpark tail as the
  // release lists it.
  std::vector<uint32_t> ratios(c.layers);
  for (uint32_t i = 0; i < c.layers; ++i) ratios[i] = c.compress_ratios[std::min(i, trunk - 1)];
  ratios.insert(ratios.end(), dspark_stages, 0u);
  c.compress_ratios = ratios;
  c.kv_sources = below(c.kv_sources, c.layers);
  c.index_sources = below(c.index_sources, c.layers);
  if (c.candidate_source >= int(c.layers)) c.candidate_source = -1;
  std::vector<std::vector<int64_t>> mult;
  for (size_t e = 0; e < c.engram_layers.size(); ++e)
    if (c.engram_layers[e] < c.layers) mult.push_back(c.engram_multipliers[e]);
  c.engram_layers = below(c.engram_layers, c.layers);
  c.engram_multipliers = mult;
  if (c.engram_layers.empty()) {
    c.engram_vocab_size = 0;
    c.engram_compressed_vocab = 0;
  } else {
    c.engram_compressed_vocab = std::min<uint64_t>(c.engram_compressed_vocab, c.vocab);
    c.engram_token_map = "mod";  // no tokenizer: the toy's rule (dsv41_engram.hpp)
    if (c.engram_pad_id >= c.vocab)
      throw usage_error("synthetic V4.1 model: vocab " + std::to_string(c.vocab) + " has no Engram pad token " +
                        std::to_string(c.engram_pad_id));
  }
  dsv41_make_plan(c);
  if (!c.engram_layers.empty()) {
    try {
      const engram_layout lay(dsv41_engram_config(c));
      c.engram_num_embeddings.clear();
      for (size_t e = 0; e < lay.layer_count(); ++e) c.engram_num_embeddings.push_back(lay.layer(e).rows);
    } catch (const std::invalid_argument& e) {
      throw usage_error(std::string("synthetic V4.1 model: ") + e.what());
    }
  }
  return c;
}

dsv41_weights dsv41_synthetic(const dsv41_synth_options& o) {
  const dsv41_config c = dsv41_synth_config(o);
  check_format(o.experts, "experts");
  check_format(o.dense, "dense");
  check_format(o.embed, "embed");
  if (o.expert_down) check_format(*o.expert_down, "expert_down");
  const uint32_t variants = o.variants ? o.variants
                            : o.preset == "tiny" ? std::numeric_limits<uint32_t>::max()
                                                 : 1u;
  auto store = std::make_shared<synth_store>(o, variants);
  synth_builder b(o, *store);
  const uint64_t d = c.dim, H = c.heads, hd = c.head_dim, q = c.q_lora, G = c.o_groups, ol = c.o_lora;
  const uint64_t E = c.experts, I = c.moe_inter, hcd = uint64_t(2 + c.hc) * c.hc;
  const uint64_t IH = c.index_heads, IHD = c.index_head_dim;
  const uint64_t eg_cols = uint64_t(c.engram_max_ngram - 1) * c.engram_heads * c.engram_head_dim;
  const format dn = o.dense, down = o.expert_down.value_or(o.experts);

  dsv41_weights w;
  w.cfg = c;
  w.source = "synthetic";
  w.embed = b.seed("embed", o.embed, c.vocab, d, 0);
  w.head = b.seed("head", dn, c.vocab, d, 0);
  w.norm = b.vec("norm.weight", d, 1.0f, 0.1f);

  // Engram tables: one per variant, as long as the longest layer using it; each layer views its prefix.
  const size_t n_eg = c.engram_layers.size();
  std::vector<uint64_t> eg_rows_of_variant;
  for (size_t e = 0; e < n_eg; ++e) {
    const uint64_t v = e % variants;
    if (v >= eg_rows_of_variant.size()) eg_rows_of_variant.resize(v + 1, 0);
    eg_rows_of_variant[v] = std::max(eg_rows_of_variant[v], c.engram_num_embeddings[e]);
  }
  for (size_t v = 0; v < eg_rows_of_variant.size(); ++v)
    store->engram_tables.push_back(
        std::make_unique<encoded_matrix>(b.engram_table(eg_rows_of_variant[v], c.engram_head_dim, v)));

  // Shared seeds first (serially: each is encoded on all threads), then the per-layer small tensors in parallel.
  w.layers.resize(c.layers);
  for (uint32_t i = 0; i < c.layers; ++i) {
    dsv41_layer_w& L = w.layers[i];
    const dsv41_layer_plan& pl = c.plan[i];
    L.wq_a = b.seed("attn.wq_a", dn, q, d, i, true);
    L.wq_b = b.seed("attn.wq_b", dn, H * hd, q, i, true);
    L.wkv = b.seed("attn.wkv", dn, hd, d, i, true);
    L.wo_a = b.seed("attn.wo_a", dn, G * ol, H * hd / G, i);
    L.wo_b = b.seed("attn.wo_b", dn, d, G * ol, i, true);
    if (pl.mode == dsv41_mode::full) {
      L.comp_wkv = b.seed("attn.compressor.wkv", dn, hd, d, i);
      if (pl.ratio > 1) L.comp_wgate = b.seed("attn.compressor.wgate", dn, hd, d, i);
      L.ix_wk = b.seed("attn.indexer.wk", dn, IHD, hd, i);
    }
    if (pl.mode == dsv41_mode::full || pl.mode == dsv41_mode::reindex) {
      L.ix_wq_b = b.seed("attn.indexer.wq_b", dn, IH * IHD, q, i, true);
      L.ix_weights_proj = b.seed("attn.indexer.weights_proj", dn, IH, d, i);
    }
    if (pl.engram >= 0) {
      const size_t e = size_t(pl.engram);
      const encoded_matrix& t = *store->engram_tables[e % variants];
      const uint64_t rows = c.engram_num_embeddings[e], spr = c.engram_head_dim / toy_v41_engram_scale_block;
      L.eg_table_fp8 = matrix_view{t.data.data(), rows * c.engram_head_dim, t.scale.data(), rows * spr,
                                   scale_encoding::e8m0, rows, c.engram_head_dim};
      L.eg_wkv = b.seed("engram.wkv", dn, uint64_t(c.hc + 1) * d, eg_cols, e, true);
    }
    L.experts.resize(E);
    for (uint64_t x = 0; x < E; ++x) L.experts[x] = b.expert("ffn.experts", o.experts, down, I, d, i * E + x);
    L.shared = b.expert("ffn.shared_experts", o.shared_routed ? o.experts : dn, o.shared_routed ? down : dn, I, d, i);
  }
  store->gates.resize(c.layers);
  dsv4_synth_parallel_for(c.layers, o.threads, [&](uint64_t i, uint64_t) {
    dsv41_layer_w& L = w.layers[i];
    const dsv41_layer_plan& pl = c.plan[i];
    const std::string p = "layers." + std::to_string(i) + ".";
    L.attn_norm = b.vec(p + "attn_norm.weight", d, 1.0f, 0.1f);
    L.ffn_norm = b.vec(p + "ffn_norm.weight", d, 1.0f, 0.1f);
    L.q_norm = b.vec(p + "attn.q_norm.weight", q, 1.0f, 0.1f);
    L.kv_norm = b.vec(p + "attn.kv_norm.weight", hd, 1.0f, 0.1f);
    L.attn_sink = b.vec(p + "attn.attn_sink", H, 0.0f, 0.5f);
    L.hc_attn_fn = b.mat(p + "hc_attn_fn", hcd, c.hc * d);
    L.hc_attn_base = b.vec(p + "hc_attn_base", hcd, 0.0f, 0.1f);
    L.hc_attn_scale = b.vec(p + "hc_attn_scale", 3, 0.5f, 0.05f);
    L.hc_ffn_fn = b.mat(p + "hc_ffn_fn", hcd, c.hc * d);
    L.hc_ffn_base = b.vec(p + "hc_ffn_base", hcd, 0.0f, 0.1f);
    L.hc_ffn_scale = b.vec(p + "hc_ffn_scale", 3, 0.5f, 0.05f);
    if (pl.mode == dsv41_mode::full) {
      L.comp_norm = b.vec(p + "attn.compressor.norm.weight", hd, 1.0f, 0.1f);
      L.ix_k_norm = b.vec(p + "attn.indexer.k_norm.weight", IHD, 1.0f, 0.1f);
    }
    if (pl.engram >= 0) {
      L.eg_q_weight = b.floats(p + "engram.q_weight", c.hc, d, 1.0f, 0.1f);
      L.eg_k_weight = b.floats(p + "engram.k_weight", c.hc, d, 1.0f, 0.1f);
    }
    std::vector<float>& g = store->gates[i];
    g = b.mat(p + "ffn.gate.weight", E, d);
    L.gate.fmt = format::f32;
    L.gate.v = matrix_view{reinterpret_cast<const uint8_t*>(g.data()), g.size() * sizeof(float), nullptr, 0,
                           scale_encoding::none, E, d};
    L.gate_bias = b.vec(p + "ffn.gate.bias", E, 0.0f, 0.02f);
  });
  w.keep_alive = store;
  return w;
}

}  // namespace cmfx::driver
