// The synthetic DeepSeek-V4.1 model (driver/model/dsv41_synthetic.hpp):
//   - the "tiny" preset has exactly the V4.1 toy's config and plan (as dsv41_config_from_release reads the toy's
//     config.json) at vocab 1024, exactly its tensor inventory (toy_v41_inventory names and shapes, so the tensors
//     the loader binds per plan: compressor / index keys / indexer / Engram only where the plan puts them), the
//     binder's formats and qat flags, the release's FP8-row Engram table, and runs through dsv41_model with finite
//     logits that depend on the Engram table;
//   - generation is a pure function of the seed (thread count does not matter), another seed differs;
//   - seeds are shared with variants = 1 (the shorter Engram table is a byte-exact prefix of the longer);
//   - the v41-flash config matches dsv4-architecture.md §1 / §2 (plan modes, Engram rows = independently summed
//     primes), and its layers bind and run at the real dimensions;
//   - bad preset names / format values are usage errors naming the value.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <map>
#include <nlohmann/json.hpp>
#include <string>
#include <utility>
#include <vector>

#include "cmfx/core/error.hpp"
#include "model/expect_usage_error.hpp"
#include "cmfx/core/hash64.hpp"
#include "cmfx/formats/format_list.hpp"
#include "cmfx/model/engram.hpp"
#include "model/dsv41_forward.hpp"
#include "model/dsv41_synthetic.hpp"
#include "toy_v41.hpp"

using namespace cmfx;
using namespace cmfx::driver;

namespace {

using shape_t = std::vector<uint64_t>;

/// Release name → shape of everything a synthetic V4.1 model holds (the names dsv41_weights.cpp binds).
std::map<std::string, shape_t> inventory(const dsv41_weights& w) {
  std::map<std::string, shape_t> m;
  auto mat = [&](const std::string& n, const matrix_view& v) {
    if (v.data) m[n] = {v.rows, v.cols};
  };
  auto vec = [&](const std::string& n, size_t size) {
    if (size) m[n] = {size};
  };
  const dsv41_config& c = w.cfg;
  mat("embed.weight", w.embed.v);
  mat("head.weight", w.head.v);
  vec("norm.weight", w.norm.size());
  const uint64_t hcd = uint64_t(2 + c.hc) * c.hc;
  for (uint32_t i = 0; i < c.layers; ++i) {
    const dsv41_layer_w& L = w.layers[i];
    const std::string p = "layers." + std::to_string(i) + ".";
    vec(p + "attn_norm.weight", L.attn_norm.size());
    vec(p + "ffn_norm.weight", L.ffn_norm.size());
    mat(p + "attn.wq_a.weight", L.wq_a.v);
    vec(p + "attn.q_norm.weight", L.q_norm.size());
    mat(p + "attn.wq_b.weight", L.wq_b.v);
    mat(p + "attn.wkv.weight", L.wkv.v);
    vec(p + "attn.kv_norm.weight", L.kv_norm.size());
    mat(p + "attn.wo_a.weight", L.wo_a.v);
    mat(p + "attn.wo_b.weight", L.wo_b.v);
    vec(p + "attn.attn_sink", L.attn_sink.size());
    mat(p + "attn.compressor.wkv.weight", L.comp_wkv.v);
    mat(p + "attn.compressor.wgate.weight", L.comp_wgate.v);
    vec(p + "attn.compressor.norm.weight", L.comp_norm.size());
    mat(p + "attn.indexer.wk.weight", L.ix_wk.v);
    vec(p + "attn.indexer.k_norm.weight", L.ix_k_norm.size());
    mat(p + "attn.indexer.wq_b.weight", L.ix_wq_b.v);
    mat(p + "attn.indexer.weights_proj.weight", L.ix_weights_proj.v);
    mat(p + "engram.embed.weight", L.eg_table_fp8);
    mat(p + "engram.embed.weight", L.eg_embed.v);
    mat(p + "engram.wkv.weight", L.eg_wkv.v);
    if (!L.eg_q_weight.empty()) m[p + "engram.q_weight"] = {c.hc, L.eg_q_weight.size() / c.hc};
    if (!L.eg_k_weight.empty()) m[p + "engram.k_weight"] = {c.hc, L.eg_k_weight.size() / c.hc};
    for (const char* sub : {"attn", "ffn"}) {
      const bool a = sub[0] == 'a';
      m[p + "hc_" + sub + "_fn"] = {hcd, (a ? L.hc_attn_fn : L.hc_ffn_fn).size() / hcd};
      vec(p + "hc_" + sub + "_base", (a ? L.hc_attn_base : L.hc_ffn_base).size());
      vec(p + "hc_" + sub + "_scale", (a ? L.hc_attn_scale : L.hc_ffn_scale).size());
    }
    mat(p + "ffn.gate.weight", L.gate.v);
    vec(p + "ffn.gate.bias", L.gate_bias.size());
    for (size_t e = 0; e < L.experts.size(); ++e) {
      const std::string q = p + "ffn.experts." + std::to_string(e) + ".";
      mat(q + "w1.weight", L.experts[e].gate);
      mat(q + "w3.weight", L.experts[e].up);
      mat(q + "w2.weight", L.experts[e].down);
    }
    mat(p + "ffn.shared_experts.w1.weight", L.shared.gate);
    mat(p + "ffn.shared_experts.w3.weight", L.shared.up);
    mat(p + "ffn.shared_experts.w2.weight", L.shared.down);
  }
  return m;
}

/// Every byte the model holds (matrix payloads and scales, small tensors) folded into one hash.
uint64_t digest(const dsv41_weights& w) {
  uint64_t h = 0;
  auto mix = [&](const void* p, size_t n) { h = fmix64(h ^ hash64(static_cast<const uint8_t*>(p), n)); };
  auto view = [&](const matrix_view& v) {
    if (v.data) mix(v.data, v.data_bytes);
    if (v.scale) mix(v.scale, v.scale_bytes);
  };
  auto floats = [&](const std::vector<float>& f) { mix(f.data(), f.size() * sizeof(float)); };
  view(w.embed.v);
  view(w.head.v);
  floats(w.norm);
  for (const dsv41_layer_w& L : w.layers) {
    for (const dsv4_matrix* m : {&L.wq_a, &L.wq_b, &L.wkv, &L.wo_a, &L.wo_b, &L.comp_wkv, &L.comp_wgate, &L.ix_wk,
                                 &L.ix_wq_b, &L.ix_weights_proj, &L.eg_embed, &L.eg_wkv, &L.gate})
      view(m->v);
    view(L.eg_table_fp8);
    for (const auto* f : {&L.attn_norm, &L.ffn_norm, &L.q_norm, &L.kv_norm, &L.attn_sink, &L.hc_attn_fn,
                          &L.hc_attn_base, &L.hc_attn_scale, &L.hc_ffn_fn, &L.hc_ffn_base, &L.hc_ffn_scale,
                          &L.comp_norm, &L.ix_k_norm, &L.eg_q_weight, &L.eg_k_weight, &L.gate_bias})
      floats(*f);
    for (const expert_view& e : L.experts) {
      view(e.gate);
      view(e.up);
      view(e.down);
    }
    view(L.shared.gate);
    view(L.shared.up);
    view(L.shared.down);
  }
  return h;
}

dsv41_synth_options tiny(uint64_t seed = 1) {
  dsv41_synth_options o;
  o.preset = "tiny";
  o.seed = seed;
  o.threads = 2;
  return o;
}

std::vector<uint32_t> some_ids(uint32_t n, uint32_t vocab) {
  std::vector<uint32_t> ids(n);
  for (uint32_t i = 0; i < n; ++i) ids[i] = (17 + 389 * i) % vocab;
  return ids;
}

std::vector<float> run_forward(dsv41_weights w, uint32_t tokens, dsv41_logits want = dsv41_logits::all,
                               unsigned threads = 2) {
  dsv41_options mo;
  mo.threads = threads;
  const uint32_t vocab = w.cfg.vocab;
  dsv41_model m(std::move(w), mo);
  dsv41_state st = m.new_state();
  return m.forward(some_ids(tokens, vocab), st, want);
}

/// Σ of `count` primes above `from` − 1, after skipping the first `skip` of them (trial division; independent of the
/// library's engram_layout).
uint64_t prime_sum(uint64_t from, uint32_t skip, uint32_t count) {
  auto is_prime = [](uint64_t n) {
    if (n < 2) return false;
    for (uint64_t d = 2; d * d <= n; ++d)
      if (n % d == 0) return false;
    return true;
  };
  uint64_t s = 0, n = from;
  for (uint32_t k = 0; k < skip + count; ++n)
    if (is_prime(n)) {
      if (k >= skip) s += n;
      ++k;
    }
  return s;
}

// ---- tiny preset -------------------------------------------------------------------------------------------------

TEST(Dsv41Synth, TinyIsTheToyAndRuns) {
  const dsv41_synth_options o = tiny();
  const dsv41_weights w = dsv41_synthetic(o);
  const dsv41_config& c = w.cfg;

  // The toy's config as the release reader takes it (plan derived by dsv41_make_plan there too), at vocab 1024.
  toy_v41_config tv;
  tv.vocab = 1024;
  const dsv41_config want = dsv41_config_from_release(nlohmann::json::parse(toy_v41_release_config(tv).dump()));
  EXPECT_EQ(c.vocab, 1024u);
  EXPECT_EQ(c.dim, want.dim);
  EXPECT_EQ(c.layers, want.layers);
  EXPECT_EQ(c.heads, want.heads);
  EXPECT_EQ(c.head_dim, want.head_dim);
  EXPECT_EQ(c.rope_dim, want.rope_dim);
  EXPECT_EQ(c.q_lora, want.q_lora);
  EXPECT_EQ(c.o_groups, want.o_groups);
  EXPECT_EQ(c.o_lora, want.o_lora);
  EXPECT_EQ(c.index_heads, want.index_heads);
  EXPECT_EQ(c.index_head_dim, want.index_head_dim);
  EXPECT_EQ(c.index_topk, want.index_topk);
  EXPECT_EQ(c.window, want.window);
  EXPECT_EQ(c.experts, want.experts);
  EXPECT_EQ(c.top_k, want.top_k);
  EXPECT_EQ(c.moe_inter, want.moe_inter);
  EXPECT_EQ(c.hc, want.hc);
  EXPECT_EQ(c.hc_iters, want.hc_iters);
  EXPECT_DOUBLE_EQ(c.norm_eps, want.norm_eps);
  EXPECT_DOUBLE_EQ(c.route_scale, want.route_scale);
  EXPECT_EQ(c.compress_ratios, want.compress_ratios);
  EXPECT_EQ(c.kv_sources, want.kv_sources);
  EXPECT_EQ(c.index_sources, want.index_sources);
  EXPECT_EQ(c.candidate_source, want.candidate_source);
  EXPECT_EQ(c.candidate_topk_blocks, want.candidate_topk_blocks);
  EXPECT_EQ(c.candidate_block_size, want.candidate_block_size);
  EXPECT_EQ(c.engram_layers, want.engram_layers);
  EXPECT_EQ(c.engram_vocab_size, want.engram_vocab_size);
  EXPECT_EQ(c.engram_num_embeddings, want.engram_num_embeddings);
  EXPECT_EQ(c.engram_multipliers, want.engram_multipliers);
  EXPECT_EQ(c.engram_compressed_vocab, want.engram_compressed_vocab);
  EXPECT_EQ(c.engram_heads, want.engram_heads);
  EXPECT_EQ(c.engram_head_dim, want.engram_head_dim);
  EXPECT_EQ(c.engram_token_map, "mod");
  ASSERT_EQ(c.plan.size(), want.plan.size());
  for (size_t l = 0; l < c.plan.size(); ++l) {
    const dsv41_layer_plan &a = c.plan[l], &b = want.plan[l];
    EXPECT_EQ(a.mode, b.mode) << l;
    EXPECT_EQ(a.ratio, b.ratio) << l;
    EXPECT_EQ(a.kv_from, b.kv_from) << l;
    EXPECT_EQ(a.topk_from, b.topk_from) << l;
    EXPECT_EQ(a.keys_from, b.keys_from) << l;
    EXPECT_EQ(a.candidate_source, b.candidate_source) << l;
    EXPECT_EQ(a.uses_candidates, b.uses_candidates) << l;
    EXPECT_EQ(a.engram, b.engram) << l;
  }

  // Exactly the toy's tensor inventory (names and shapes the loader binds, on the layers the plan names).
  std::map<std::string, shape_t> expect;
  for (const toy_tensor& t : toy_v41_inventory(tv)) expect[t.name] = shape_t(t.shape.begin(), t.shape.end());
  const std::map<std::string, shape_t> got = inventory(w);
  EXPECT_EQ(got.size(), expect.size());
  for (const auto& [name, shape] : expect) {
    auto it = got.find(name);
    if (it == got.end()) {
      ADD_FAILURE() << "missing " << name;
      continue;
    }
    EXPECT_EQ(it->second, shape) << name;
  }
  for (const auto& [name, shape] : got) EXPECT_TRUE(expect.count(name)) << "unexpected " << name;

  // Formats, view sizes, scale encodings and qat flags as the loader binds them.
  auto check = [&](const dsv4_matrix& m, format f, bool qat, const std::string& what) {
    EXPECT_EQ(m.fmt, f) << what;
    EXPECT_EQ(m.qat_input, qat) << what;
    visit_format(f, [&]<class F>() {
      EXPECT_EQ(m.v.data_bytes, F::data_bytes(m.v.rows, m.v.cols)) << what;
      EXPECT_EQ(m.v.scale_bytes, F::scale_bytes(m.v.rows, m.v.cols)) << what;
      EXPECT_EQ(m.v.scale_enc, F::scale_bytes(m.v.rows, m.v.cols) > 0 ? scale_encoding::e8m0 : scale_encoding::none)
          << what;
    });
  };
  check(w.embed, o.embed, false, "embed");
  check(w.head, o.dense, false, "head");
  for (uint32_t i = 0; i < c.layers; ++i) {
    const dsv41_layer_w& L = w.layers[i];
    const dsv41_layer_plan& pl = c.plan[i];
    const std::string at = "layer " + std::to_string(i) + " ";
    check(L.wq_a, o.dense, true, at + "wq_a");
    check(L.wq_b, o.dense, true, at + "wq_b");
    check(L.wkv, o.dense, true, at + "wkv");
    check(L.wo_a, o.dense, false, at + "wo_a");
    check(L.wo_b, o.dense, true, at + "wo_b");
    check(L.gate, format::f32, false, at + "gate");
    if (pl.mode == dsv41_mode::full) {
      check(L.comp_wkv, o.dense, false, at + "compressor wkv");
      if (pl.ratio > 1) check(L.comp_wgate, o.dense, false, at + "compressor wgate");
      else EXPECT_EQ(L.comp_wgate.v.data, nullptr) << at;
      check(L.ix_wk, o.dense, false, at + "indexer wk");
    }
    if (pl.mode == dsv41_mode::full || pl.mode == dsv41_mode::reindex) {
      check(L.ix_wq_b, o.dense, true, at + "indexer wq_b");
      check(L.ix_weights_proj, o.dense, false, at + "weights_proj");
    }
    EXPECT_EQ(L.eg_embed.v.data, nullptr) << at;  // the table is the release's FP8 rows, never a weight format
    if (pl.engram >= 0) {
      check(L.eg_wkv, o.dense, true, at + "engram wkv");
      const matrix_view& t = L.eg_table_fp8;
      EXPECT_EQ(t.rows, c.engram_num_embeddings[size_t(pl.engram)]) << at;
      EXPECT_EQ(t.data_bytes, t.rows * t.cols) << at;
      EXPECT_EQ(t.scale_bytes, t.rows * t.cols / toy_v41_engram_scale_block) << at;
      EXPECT_EQ(t.scale_enc, scale_encoding::e8m0) << at;
      // Values: N(0, 1/head_dim) on the FP8 grid (mean ~0, sd within 5%, E4M3 · 2^k exact after the bf16 cast).
      std::vector<float> row(t.cols);
      double s = 0, s2 = 0;
      for (uint64_t r = 0; r < t.rows; ++r) {
        engram_decode_row(t, toy_v41_engram_scale_block, int64_t(r), row.data());
        for (float x : row) {
          ASSERT_TRUE(std::isfinite(x));
          s += x;
          s2 += double(x) * x;
        }
      }
      const double n = double(t.rows * t.cols), sd = 1.0 / std::sqrt(double(t.cols));
      EXPECT_NEAR(s / n, 0.0, 5.0 * sd / std::sqrt(n)) << at;
      EXPECT_NEAR(std::sqrt(s2 / n), sd, 0.05 * sd) << at;
      ASSERT_EQ(L.eg_q_weight.size(), uint64_t(c.hc) * c.dim);
      for (float x : L.eg_q_weight) ASSERT_NEAR(x, 1.0f, 0.7f);  // gains 1 ± 0.1 (7 sd)
    } else {
      EXPECT_EQ(L.eg_table_fp8.data, nullptr) << at;
    }
    for (const expert_view& e : L.experts) {
      EXPECT_EQ(e.gate_fmt, o.experts);
      EXPECT_EQ(e.up_fmt, o.experts);
      EXPECT_EQ(e.down_fmt, o.experts);
    }
    EXPECT_EQ(L.shared.gate_fmt, o.dense);
    for (float x : L.attn_norm) ASSERT_NEAR(x, 1.0f, 0.7f);
  }

  // The forward accepts it: 8 tokens, finite logits that are not constant and stay tame.
  const std::vector<float> logits = run_forward(w, 8);
  ASSERT_EQ(logits.size(), uint64_t(8) * c.vocab);
  double s = 0, s2 = 0;
  for (float x : logits) {
    ASSERT_TRUE(std::isfinite(x));
    s += x;
    s2 += double(x) * x;
  }
  const double n = double(logits.size()), var = s2 / n - (s / n) * (s / n);
  EXPECT_GT(var, 1e-6);
  EXPECT_LT(std::sqrt(s2 / n), 1e3);

  // The Engram table is read: the same model with an all-zero table (E4M3 0x00 = +0) gives other logits.
  dsv41_weights z = w;
  const matrix_view& t1 = w.layers[c.engram_layers[0]].eg_table_fp8;
  auto zeros = std::make_shared<std::vector<uint8_t>>(t1.data_bytes, uint8_t(0));
  z.layers[c.engram_layers[0]].eg_table_fp8.data = zeros->data();
  z.keep_alive = std::shared_ptr<const void>(std::make_shared<std::pair<std::shared_ptr<const void>,
                                                                        std::shared_ptr<std::vector<uint8_t>>>>(
      w.keep_alive, zeros));
  EXPECT_NE(run_forward(std::move(z), 8), logits);
}

TEST(Dsv41Synth, SameSeedIsBitIdenticalOtherSeedDiffers) {
  dsv41_synth_options a = tiny(5);
  a.experts = format::q4tp;
  dsv41_synth_options b = a;
  b.threads = 1;  // thread count must not matter
  const uint64_t ha = digest(dsv41_synthetic(a)), hb = digest(dsv41_synthetic(b));
  EXPECT_EQ(ha, hb);
  dsv41_synth_options other = a;
  other.seed = 6;
  EXPECT_NE(digest(dsv41_synthetic(other)), ha);

  // And the forward sees it: same seed, same logits bit for bit; another seed, other logits.
  const std::vector<float> la = run_forward(dsv41_synthetic(a), 6, dsv41_logits::last, 1),
                           lb = run_forward(dsv41_synthetic(b), 6, dsv41_logits::last, 1),
                           lo = run_forward(dsv41_synthetic(other), 6, dsv41_logits::last, 1);
  ASSERT_EQ(la.size(), 1024u);
  EXPECT_EQ(la, lb);
  EXPECT_NE(la, lo);
}

TEST(Dsv41Synth, SeedsAreSharedWithOneVariant) {
  dsv41_synth_options o = tiny(9);
  o.variants = 1;
  const dsv41_weights w = dsv41_synthetic(o);
  const dsv41_config& c = w.cfg;
  const uint8_t* w1 = w.layers[0].experts[0].gate.data;
  for (const dsv41_layer_w& L : w.layers) {
    EXPECT_EQ(L.wq_b.v.data, w.layers[0].wq_b.v.data);
    for (const expert_view& e : L.experts) EXPECT_EQ(e.gate.data, w1);
  }
  EXPECT_NE(w.layers[0].experts[0].up.data, w1);  // roles get their own seeds
  EXPECT_NE(w.layers[3].gate_bias, w.layers[4].gate_bias);
  EXPECT_NE(w.layers[3].hc_attn_fn, w.layers[4].hc_attn_fn);
  // Both Engram layers view one table; the second layer's (more rows) is the longer view.
  ASSERT_EQ(c.engram_layers.size(), 2u);
  const matrix_view &t0 = w.layers[c.engram_layers[0]].eg_table_fp8, &t1 = w.layers[c.engram_layers[1]].eg_table_fp8;
  EXPECT_EQ(t0.data, t1.data);
  EXPECT_EQ(t0.scale, t1.scale);
  ASSERT_LT(t0.rows, t1.rows);
  // A prefix of the shared table is byte for byte the shorter table generated on its own (default variants).
  const dsv41_weights d = dsv41_synthetic(tiny(9));
  const matrix_view &d0 = d.layers[c.engram_layers[0]].eg_table_fp8, &d1 = d.layers[c.engram_layers[1]].eg_table_fp8;
  EXPECT_NE(d0.data, d1.data);
  ASSERT_EQ(d0.rows, t0.rows);
  EXPECT_EQ(std::memcmp(d0.data, t0.data, t0.data_bytes), 0);
  EXPECT_EQ(std::memcmp(d0.scale, t0.scale, t0.scale_bytes), 0);
  EXPECT_NE(std::memcmp(d1.data, t1.data, d1.data_bytes), 0);  // variant 1 is other values
  EXPECT_NE(d.layers[0].experts[0].gate.data, d.layers[0].experts[1].gate.data);
  // The shared model runs too.
  for (float x : run_forward(dsv41_synthetic(o), 4, dsv41_logits::last)) ASSERT_TRUE(std::isfinite(x));
}

// ---- v41-flash ---------------------------------------------------------------------------------------------------

TEST(Dsv41Synth, FlashConfigIsTheRelease) {
  const dsv41_config c = dsv41_synth_config(dsv41_synth_options{});
  EXPECT_EQ(c.vocab, 129280u);
  EXPECT_EQ(c.dim, 5120u);
  EXPECT_EQ(c.layers, 40u);
  EXPECT_EQ(c.heads, 64u);
  EXPECT_EQ(c.head_dim, 512u);
  EXPECT_EQ(c.rope_dim, 64u);
  EXPECT_EQ(c.q_lora, 1280u);
  EXPECT_EQ(c.o_groups, 8u);
  EXPECT_EQ(c.o_lora, 1024u);
  EXPECT_EQ(c.index_heads, 32u);
  EXPECT_EQ(c.index_head_dim, 128u);
  EXPECT_EQ(c.index_topk, 512u);
  EXPECT_EQ(c.window, 128u);
  EXPECT_EQ(c.experts, 384u);
  EXPECT_EQ(c.top_k, 6u);
  EXPECT_EQ(c.moe_inter, 2304u);
  EXPECT_EQ(c.hc, 4u);
  EXPECT_EQ(c.hc_iters, 20u);
  EXPECT_DOUBLE_EQ(c.norm_eps, 1e-20);
  EXPECT_DOUBLE_EQ(c.route_scale, 1.5);
  // [0,0] + [2]*18 + [1]*20 + [0,0,0] (DSpark tail).
  ASSERT_EQ(c.compress_ratios.size(), 43u);
  for (uint32_t i = 0; i < 43; ++i)
    EXPECT_EQ(c.compress_ratios[i], i < 2 ? 0u : i < 20 ? 2u : i < 40 ? 1u : 0u) << i;
  EXPECT_EQ(c.kv_sources, (std::vector<uint32_t>{2, 8, 14, 20}));
  EXPECT_EQ(c.index_sources, (std::vector<uint32_t>{2, 8, 14, 20, 24, 28, 32, 36}));
  EXPECT_EQ(c.candidate_source, 20);
  EXPECT_EQ(c.candidate_topk_blocks, 2048u);
  EXPECT_EQ(c.candidate_block_size, 8u);
  // Plan: L0, 1 SWA; 2/8/14/20 full; 24/28/32/36 re-index; the rest reuse; Engram on 1 and 14.
  ASSERT_EQ(c.plan.size(), 40u);
  for (uint32_t l = 0; l < 40; ++l) {
    const dsv41_mode m = l < 2 ? dsv41_mode::swa
                         : (l == 2 || l == 8 || l == 14 || l == 20) ? dsv41_mode::full
                         : (l == 24 || l == 28 || l == 32 || l == 36) ? dsv41_mode::reindex
                                                                      : dsv41_mode::reuse;
    EXPECT_EQ(c.plan[l].mode, m) << l;
    EXPECT_EQ(c.plan[l].engram, l == 1 ? 0 : l == 14 ? 1 : -1) << l;
    EXPECT_EQ(c.plan[l].candidate_source, l == 20) << l;
    EXPECT_EQ(c.plan[l].uses_candidates, l == 24 || l == 28 || l == 32 || l == 36) << l;
  }
  // Engram: 8 heads × 256, n-grams up to 4, compressed vocab 99092, pad 2, the release's multipliers, "mod" map,
  // the reduced hash space 65536 with its table rows (the primes summed independently here).
  EXPECT_EQ(c.engram_layers, (std::vector<uint32_t>{1, 14}));
  EXPECT_EQ(c.engram_heads, 8u);
  EXPECT_EQ(c.engram_head_dim, 256u);
  EXPECT_EQ(c.engram_max_ngram, 4u);
  EXPECT_EQ(c.engram_compressed_vocab, 99092u);
  EXPECT_EQ(c.engram_pad_id, 2u);
  EXPECT_EQ(c.engram_token_map, "mod");
  EXPECT_EQ(c.engram_vocab_size, 65536u);
  ASSERT_EQ(c.engram_multipliers.size(), 2u);
  EXPECT_EQ(c.engram_multipliers[0], std::vector<int64_t>(dsv41_engram_mult_l1.begin(), dsv41_engram_mult_l1.end()));
  EXPECT_EQ(c.engram_multipliers[1], std::vector<int64_t>(dsv41_engram_mult_l14.begin(), dsv41_engram_mult_l14.end()));
  EXPECT_EQ(c.engram_num_embeddings, (std::vector<uint64_t>{prime_sum(65536, 0, 24), prime_sum(65536, 24, 24)}));
  // The release's hash space, as an option (config only: its tables are ~100 GB), gives the release's rows (§1).
  dsv41_synth_options rel;
  rel.engram_vocab_size = 16000000;
  EXPECT_EQ(dsv41_synth_config(rel).engram_num_embeddings, (std::vector<uint64_t>{384006168, 384016682}));

  // Fewer layers keep the head of the pattern; more continue with reuse layers; a small vocab shrinks the
  // compressed vocabulary with it; engram_vocab_size is an option.
  dsv41_synth_options o;
  o.layers = 3;
  o.vocab = 1024;
  o.engram_vocab_size = 1000;
  const dsv41_config few = dsv41_synth_config(o);
  EXPECT_EQ(few.kv_sources, std::vector<uint32_t>{2});
  EXPECT_EQ(few.index_sources, std::vector<uint32_t>{2});
  EXPECT_EQ(few.candidate_source, -1);
  EXPECT_EQ(few.engram_layers, std::vector<uint32_t>{1});
  EXPECT_EQ(few.engram_compressed_vocab, 1024u);
  EXPECT_EQ(few.engram_num_embeddings, std::vector<uint64_t>{prime_sum(1000, 0, 24)});
  o = dsv41_synth_options{};
  o.layers = 44;
  const dsv41_config more = dsv41_synth_config(o);
  for (uint32_t l = 40; l < 44; ++l) {
    EXPECT_EQ(more.plan[l].mode, dsv41_mode::reuse) << l;
    EXPECT_EQ(more.plan[l].ratio, 1u) << l;
  }
}

// The real layer dimensions, three layers (SWA, SWA + Engram, KV source ratio 2) at vocab 512 and a 1024-entry
// Engram hash space: the full-vocabulary embed / head and the 65536 hash space take too long for a unit test on a
// small machine; their shapes are the config's (checked above) and the same code builds them. Dense matrices in
// bf16 and experts in MXFP4 (the FP8 / q2tp paths are covered by the tiny tests) keep the encoding quick: drawing
// the ~380M random values (157M of them the Engram wkv) dominates.
TEST(Dsv41Synth, FlashLayersBindAtRealDimensions) {
  dsv41_synth_options o;
  o.layers = 3;
  o.vocab = 512;
  o.engram_vocab_size = 1024;
  o.dense = format::bf16;
  o.experts = format::mxfp4;
  o.threads = 2;
  dsv41_weights w = dsv41_synthetic(o);
  const std::map<std::string, shape_t> got = inventory(w);
  const std::map<std::string, shape_t> expect = {
      {"embed.weight", {512, 5120}},
      {"layers.0.attn.wq_a.weight", {1280, 5120}},
      {"layers.0.attn.wq_b.weight", {32768, 1280}},
      {"layers.0.attn.wkv.weight", {512, 5120}},
      {"layers.0.attn.wo_a.weight", {8192, 4096}},
      {"layers.0.attn.wo_b.weight", {5120, 8192}},
      {"layers.0.attn.attn_sink", {64}},
      {"layers.0.hc_attn_fn", {24, 20480}},
      {"layers.0.ffn.gate.weight", {384, 5120}},
      {"layers.0.ffn.gate.bias", {384}},
      {"layers.0.ffn.experts.383.w1.weight", {2304, 5120}},
      {"layers.0.ffn.experts.383.w2.weight", {5120, 2304}},
      {"layers.0.ffn.shared_experts.w3.weight", {2304, 5120}},
      {"layers.1.engram.embed.weight", {prime_sum(1024, 0, 24), 256}},
      {"layers.1.engram.wkv.weight", {25600, 6144}},
      {"layers.1.engram.q_weight", {4, 5120}},
      {"layers.1.engram.k_weight", {4, 5120}},
      {"layers.2.attn.compressor.wkv.weight", {512, 5120}},
      {"layers.2.attn.compressor.wgate.weight", {512, 5120}},
      {"layers.2.attn.compressor.norm.weight", {512}},
      {"layers.2.attn.indexer.wk.weight", {128, 512}},
      {"layers.2.attn.indexer.k_norm.weight", {128}},
      {"layers.2.attn.indexer.wq_b.weight", {4096, 1280}},
      {"layers.2.attn.indexer.weights_proj.weight", {32, 5120}},
  };
  for (const auto& [name, shape] : expect) {
    auto it = got.find(name);
    ASSERT_NE(it, got.end()) << name;
    EXPECT_EQ(it->second, shape) << name;
  }
  EXPECT_FALSE(got.count("layers.0.engram.wkv.weight"));
  EXPECT_FALSE(got.count("layers.1.attn.compressor.wkv.weight"));
  EXPECT_EQ(w.layers[2].experts.size(), 384u);
  EXPECT_EQ(w.layers[2].experts[7].gate_fmt, format::mxfp4);
  EXPECT_EQ(w.layers[1].eg_wkv.fmt, format::bf16);
  EXPECT_TRUE(w.layers[1].eg_wkv.qat_input);

  // The CPU graph accepts the real dimensions: 2 tokens through SWA, SWA + Engram, a ratio-2 KV source.
  const std::vector<float> logits = run_forward(std::move(w), 2, dsv41_logits::last);
  ASSERT_EQ(logits.size(), 512u);
  for (float x : logits) ASSERT_TRUE(std::isfinite(x));
}

// ---- names -------------------------------------------------------------------------------------------------------

TEST(Dsv41Synth, BadPresetsAndFormatsAreUsageErrors) {
  EXPECT_EQ(dsv41_synth_preset("v41-flash"), "v41-flash");
  EXPECT_EQ(dsv41_synth_preset("tiny"), "tiny");
  expect_usage_error_naming([] { dsv41_synth_preset("v4-flash"); }, "v4-flash");
  dsv41_synth_options o;
  o.preset = "huge";
  expect_usage_error_naming([&] { dsv41_synthetic(o); }, "huge");
  expect_usage_error_naming([&] { dsv41_synth_config(o); }, "huge");
  o = tiny();
  o.experts = format(200);
  expect_usage_error_naming([&] { dsv41_synthetic(o); }, "200");
  o = tiny();
  o.dense = format(201);
  expect_usage_error_naming([&] { dsv41_synthetic(o); }, "201");
  o = tiny();
  o.expert_down = format(202);
  expect_usage_error_naming([&] { dsv41_synthetic(o); }, "202");
  // A vocabulary without the Engram pad token (id 2) is refused, naming it.
  o = tiny();
  o.vocab = 2;
  expect_usage_error_naming([&] { dsv41_synth_config(o); }, "pad token");
}

}  // namespace
