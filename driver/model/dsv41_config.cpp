#include "dsv41_config.hpp"
#include "model_common.hpp"

#include <algorithm>
#include <cmath>

#include "cmfx/core/error.hpp"

namespace cmfx::driver {

namespace {

using json = nlohmann::json;

constexpr std::string_view kWhat = "V4.1 model config";
template <class T>
T get_or(const json& j, const char* key, T fallback) {
  return config_get_or<T>(j, key, fallback, kWhat);
}
template <class T>
T need(const json& j, const char* key) {
  return config_need<T>(j, key, kWhat);
}

bool contains(const std::vector<uint32_t>& v, uint32_t x) { return std::find(v.begin(), v.end(), x) != v.end(); }

/// The text config keys (HF spelling, as in the release's text_config).
dsv41_config from_text(const json& t) {
  dsv41_config c;
  c.vocab = need<uint32_t>(t, "vocab_size");
  c.dim = need<uint32_t>(t, "hidden_size");
  c.layers = need<uint32_t>(t, "num_hidden_layers");
  c.heads = need<uint32_t>(t, "num_attention_heads");
  c.head_dim = need<uint32_t>(t, "head_dim");
  c.rope_dim = get_or<uint32_t>(t, "qk_rope_head_dim", c.rope_dim);
  c.q_lora = get_or<uint32_t>(t, "q_lora_rank", 0);
  c.o_lora = get_or<uint32_t>(t, "o_lora_rank", 0);
  c.o_groups = get_or<uint32_t>(t, "o_groups", c.o_groups);
  c.index_heads = get_or<uint32_t>(t, "index_n_heads", 0);
  c.index_head_dim = get_or<uint32_t>(t, "index_head_dim", 0);
  c.index_topk = get_or<uint32_t>(t, "index_topk", c.index_topk);
  c.window = get_or<uint32_t>(t, "sliding_window", c.window);
  c.compress_ratios = need<std::vector<uint32_t>>(t, "compress_ratios");
  c.kv_sources = need<std::vector<uint32_t>>(t, "kv_source_layer_ids");
  c.index_sources = need<std::vector<uint32_t>>(t, "index_source_layer_ids");
  c.candidate_source = get_or<int>(t, "candidate_source_layer_id", -1);
  c.candidate_topk_blocks = get_or<uint32_t>(t, "candidate_topk_blocks", c.candidate_topk_blocks);
  c.candidate_block_size = get_or<uint32_t>(t, "candidate_block_size", c.candidate_block_size);
  c.experts = get_or<uint32_t>(t, "n_routed_experts", 0);
  c.top_k = get_or<uint32_t>(t, "num_experts_per_tok", 0);
  c.moe_inter = get_or<uint32_t>(t, "moe_intermediate_size", 0);
  c.route_scale = get_or<double>(t, "routed_scaling_factor", c.route_scale);
  c.gate_temp = get_or<double>(t, "gate_temp", c.gate_temp);
  c.swiglu_limit = get_or<double>(t, "swiglu_limit", c.swiglu_limit);
  c.hc = get_or<uint32_t>(t, "hc_mult", c.hc);
  c.hc_iters = get_or<uint32_t>(t, "hc_sinkhorn_iters", c.hc_iters);
  c.hc_eps = get_or<double>(t, "hc_eps", c.hc_eps);
  c.norm_eps = get_or<double>(t, "rms_norm_eps", c.norm_eps);
  c.rope_theta = get_or<double>(t, "rope_theta", c.rope_theta);
  c.compress_rope_theta = get_or<double>(t, "compress_rope_theta", c.compress_rope_theta);
  if (auto it = t.find("rope_scaling"); it != t.end() && it->is_object()) {
    c.yarn_factor = get_or<double>(*it, "factor", c.yarn_factor);
    c.yarn_original = get_or<double>(*it, "original_max_position_embeddings", c.yarn_original);
    c.yarn_beta_fast = get_or<double>(*it, "beta_fast", c.yarn_beta_fast);
    c.yarn_beta_slow = get_or<double>(*it, "beta_slow", c.yarn_beta_slow);
  }
  const std::string scoring = get_or<std::string>(t, "scoring_func", "sqrtsoftplus");
  if (scoring != "sqrtsoftplus") throw usage_error("V4.1 model config: scoring_func '" + scoring + "' is not sqrtsoftplus");
  if (get_or<uint32_t>(t, "num_hash_layers", 0) != 0)
    throw usage_error("V4.1 model config: num_hash_layers must be 0 (V4.1 routes every layer by score)");
  // Engram.
  c.engram_layers = get_or<std::vector<uint32_t>>(t, "engram_layer_ids", {});
  if (!c.engram_layers.empty()) {
    c.engram_vocab_size = need<uint64_t>(t, "engram_vocab_size");
    c.engram_max_ngram = get_or<uint32_t>(t, "engram_max_ngram_size", c.engram_max_ngram);
    c.engram_heads = get_or<uint32_t>(t, "engram_n_heads", c.engram_heads);
    c.engram_head_dim = get_or<uint32_t>(t, "engram_head_dim", c.engram_head_dim);
    c.engram_pad_id = get_or<uint32_t>(t, "engram_pad_token_id", c.engram_pad_id);
    c.engram_compressed_vocab = need<uint64_t>(t, "engram_compressed_vocab_size");
    c.engram_num_embeddings = get_or<std::vector<uint64_t>>(t, "engram_num_embeddings", {});
    c.engram_multipliers = get_or<std::vector<std::vector<int64_t>>>(t, "engram_multipliers", {});
    c.engram_token_map = get_or<std::string>(t, "engram_token_map", "");
    if (c.engram_multipliers.empty() && c.engram_layers == std::vector<uint32_t>{1, 14} &&
        c.engram_compressed_vocab == 99092 && c.engram_max_ngram == 4)
      c.engram_multipliers = {std::vector<int64_t>(dsv41_engram_mult_l1.begin(), dsv41_engram_mult_l1.end()),
                              std::vector<int64_t>(dsv41_engram_mult_l14.begin(), dsv41_engram_mult_l14.end())};
  }
  c.bos = get_or<uint32_t>(t, "bos_token_id", c.bos);
  if (auto it = t.find("eos_token_id"); it != t.end() && !it->is_null()) {  // one id or a list (the first is used)
    const auto eos = it->is_array() ? get_or<std::vector<uint32_t>>(t, "eos_token_id", {})
                                    : std::vector<uint32_t>{get_or<uint32_t>(t, "eos_token_id", c.eos)};
    if (!eos.empty()) c.eos = eos[0];
  }
  dsv41_make_plan(c);
  return c;
}

}  // namespace

const char* dsv41_mode_name(dsv41_mode m) noexcept {
  switch (m) {
    case dsv41_mode::swa: return "swa";
    case dsv41_mode::full: return "full";
    case dsv41_mode::reindex: return "reindex";
    case dsv41_mode::reuse: return "reuse";
  }
  return "?";
}

void dsv41_make_plan(dsv41_config& c) {
  auto fail = [](const std::string& m) { throw usage_error("V4.1 model config: " + m); };
  if (c.layers == 0) fail("num_hidden_layers is 0");
  if (c.compress_ratios.size() < c.layers)
    fail("compress_ratios has " + std::to_string(c.compress_ratios.size()) + " entries for " +
         std::to_string(c.layers) + " layers");
  for (uint32_t l : c.kv_sources)
    if (l >= c.layers || !contains(c.index_sources, l))
      fail("KV source layer " + std::to_string(l) + " is out of range or not an index source");
  for (uint32_t l : c.index_sources)
    if (l >= c.layers || c.compress_ratios[l] == 0)
      fail("index source layer " + std::to_string(l) + " is out of range or has compress ratio 0");
  if (c.candidate_source >= 0 && !contains(c.kv_sources, uint32_t(c.candidate_source)))
    fail("candidate source layer " + std::to_string(c.candidate_source) + " is not a KV source");
  if (c.candidate_source >= 0) {
    if (c.candidate_block_size == 0 || c.candidate_topk_blocks == 0) fail("candidate pool of zero blocks");
    // The pool must hold at least index_topk positions, so a consumer's top-k never reaches a −inf (masked) entry
    // (the official code would then pick among them in an unspecified order). The release: 2047·8+1 ≥ 512.
    if (uint64_t(c.candidate_topk_blocks - 1) * c.candidate_block_size + 1 < c.index_topk)
      fail("candidate pool (" + std::to_string(c.candidate_topk_blocks) + " blocks × " +
           std::to_string(c.candidate_block_size) + ") smaller than index_topk " + std::to_string(c.index_topk));
  }
  c.plan.assign(c.layers, {});
  int last_kv = -1, last_ix = -1;
  for (uint32_t l = 0; l < c.layers; ++l) {
    dsv41_layer_plan& p = c.plan[l];
    p.ratio = c.compress_ratios[l];
    const bool kv = contains(c.kv_sources, l), ix = contains(c.index_sources, l);
    if (p.ratio == 0) {
      if (kv || ix) fail("layer " + std::to_string(l) + " is a source but has compress ratio 0");
      p.mode = dsv41_mode::swa;
    } else if (kv) {
      if (p.ratio > 2) fail("KV source layer " + std::to_string(l) + " has ratio " + std::to_string(p.ratio) + " (1 or 2)");
      p.mode = dsv41_mode::full;
      last_kv = int(l);
    } else if (ix) {
      p.mode = dsv41_mode::reindex;
    } else {
      p.mode = dsv41_mode::reuse;
    }
    if (ix) last_ix = int(l);
    if (p.ratio) {
      if (last_kv < 0 || last_ix < 0)
        fail("layer " + std::to_string(l) + " compresses but no KV / index source precedes it");
      if (c.compress_ratios[size_t(last_kv)] != p.ratio)
        fail("layer " + std::to_string(l) + " has ratio " + std::to_string(p.ratio) + " but its KV source " +
             std::to_string(last_kv) + " has ratio " + std::to_string(c.compress_ratios[size_t(last_kv)]));
      p.kv_from = last_kv;
      p.topk_from = last_ix;
      if (ix) p.keys_from = last_kv;
      p.candidate_source = int(l) == c.candidate_source;
      p.uses_candidates = ix && c.candidate_source >= 0 && int(l) > c.candidate_source;
    }
  }
  for (size_t e = 0; e < c.engram_layers.size(); ++e) {
    if (c.engram_layers[e] >= c.layers) fail("Engram layer " + std::to_string(c.engram_layers[e]) + " is out of range");
    c.plan[c.engram_layers[e]].engram = int(e);
  }
  if (!c.engram_layers.empty()) {
    if (c.engram_max_ngram < 2) fail("engram_max_ngram_size must be >= 2");
    if (c.engram_multipliers.size() != c.engram_layers.size())
      fail("no Engram hash multipliers for these Engram layers (the release's are built in; others must be stated "
           "as engram_multipliers)");
    for (const auto& m : c.engram_multipliers)
      if (m.size() != c.engram_max_ngram) fail("engram_multipliers rows must have engram_max_ngram_size entries");
  }
}

bool dsv41_is_release_config(const json& j) {
  const std::string t = get_or<std::string>(j, "model_type", "");
  return t == "deepseek_v41" || t == "deepseek_v41_text";
}

bool dsv41_is_cmf_header(const json& h) {
  auto a = h.find("arch");
  return a != h.end() && a->is_object() && get_or<std::string>(*a, "arch_name", "") == "deepseek_v41";
}

dsv41_config dsv41_config_from_release(const json& j) {
  if (!dsv41_is_release_config(j))
    throw usage_error("config.json: model_type is '" + get_or<std::string>(j, "model_type", "") +
                      "'; expected deepseek_v41");
  if (auto it = j.find("text_config"); it != j.end()) {
    if (!it->is_object()) throw usage_error("config.json: text_config is not an object");
    json t = *it;
    for (const char* k : {"bos_token_id", "eos_token_id"})  // sometimes only at the top level
      if (!t.contains(k) && j.contains(k)) t[k] = j[k];
    return from_text(t);
  }
  return from_text(j);
}

dsv41_config dsv41_config_from_cmf(const json& header) {
  if (!dsv41_is_cmf_header(header)) throw usage_error("CMF header: arch_name is not deepseek_v41");
  auto it = header.find("dsv41");
  if (it == header.end() || !it->is_object())
    throw usage_error("CMF header: a deepseek_v41 file needs the text config under \"dsv41\"");
  dsv41_config c = from_text(*it);
  if (auto tc = header.find("tokenizer_config"); tc != header.end() && tc->is_object()) {
    c.bos = get_or<uint32_t>(*tc, "bos_token_id", c.bos);
    const auto eos = get_or<std::vector<uint32_t>>(*tc, "eos_token_ids", {});
    if (!eos.empty()) c.eos = eos[0];
  }
  return c;
}

}  // namespace cmfx::driver
