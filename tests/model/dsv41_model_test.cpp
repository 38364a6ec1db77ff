// Parity gates of the CPU DeepSeek-V4.1 graph (driver/model/dsv41_*) on the deterministic 12-layer toy (SWA, ratio-2
// sources and reuse layers, a ratio-1 source that builds the candidate pool, re-index and reuse layers, two Engram
// layers; window 16, index top-k 8, candidate pool 4 blocks × 4):
//   - against the independent float64 NumPy reference (tests/reference/dsv41_ref.py) with f32 weights: logits,
//     argmax, index top-k sets of every index source, routed expert sets — without and with the KV quantisation;
//   - prefill + decode (and uneven chunks) == one prefill with stale_index_k off; with it on (the official
//     behaviour), prefill + one-token decode steps against the reference's emulation of the official decode;
//   - CMF == release layout; 1 vs 3 threads; truncate / copy; the layer plan of the release's 40-layer config;
//   - the packed FP4 KV cache == f32 rows after the same quantisation, bit for bit; batched sequences == separate
//     runs, bit for bit; the q4tp toy near the f32 toy.
#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <functional>
#include <nlohmann/json.hpp>
#include <cstring>
#include <random>

#include "cmfx/core/error.hpp"
#include "commands.hpp"
#include "cmfx/formats/format_list.hpp"
#include "cmfx/kernels/cpu_kernels.hpp"
#include "cmfx/io/cmf_writer.hpp"
#include "cmfx/kv/packed_kv.hpp"
#include "cmfx/ops/fake_quant.hpp"
#include "model/dsv41_forward.hpp"
#include "model/dsv41_internal.hpp"
#include "model/dsv4_source.hpp"
#include "dsv4_names.hpp"
#include "toy_model_dir.hpp"
#include "toy_v41.hpp"

using namespace cmfx;
using namespace cmfx::driver;
namespace fs = std::filesystem;

namespace {

constexpr uint64_t kTokens = 160;      // 80 ratio-2 groups (top-k 8 is a strict subset), 160 ratio-1 entries (pool 16)
constexpr double kRefMaxRel = 1e-3;    // max |Δlogit| / max |logit| per position vs the float64 reference
constexpr double kDecodeMaxRel = 1e-5; // prefill vs decode (same f32 arithmetic, other chunking)
constexpr double kQ4tpMaxRel = 2.0, kQ4tpNmse = 1.5;  // q4tp toy vs f32 toy (see the test)
constexpr double kTwinMaxRel = 1e-4;   // quantised toy vs the f32 model of its decoded weights
constexpr double kI8Nmse = 0.8;        // i8 vs f32 activations, q4tp toy: routing near-ties (see the test)

test::toy_model_dir& dir() {
  static test::toy_model_dir d("v41", "v41");
  return d;
}

std::vector<uint32_t> token_ids(uint64_t n, uint64_t vocab) {
  std::mt19937_64 rng(20261129);
  std::vector<uint32_t> ids(n);
  for (auto& x : ids) x = uint32_t(rng() % vocab);
  return ids;
}

dsv41_options opts(bool kv_quant, bool stale, unsigned threads = 1) {
  dsv41_options o;
  o.threads = threads;
  o.qat_kv = kv_quant;
  o.stale_index_k = stale;
  return o;
}

struct rel_stats {
  double max_rel = 0;
  uint64_t worst_pos = 0, argmax_diff = 0;
};

rel_stats compare(const std::vector<float>& got, const std::vector<float>& want, uint64_t rows, uint64_t V) {
  rel_stats s;
  for (uint64_t r = 0; r < rows; ++r) {
    double mx = 0, md = 0;
    for (uint64_t v = 0; v < V; ++v) {
      mx = std::max(mx, std::fabs(double(want[r * V + v])));
      md = std::max(md, std::fabs(double(got[r * V + v]) - double(want[r * V + v])));
    }
    const double rel = mx > 0 ? md / mx : md;
    if (rel > s.max_rel) {
      s.max_rel = rel;
      s.worst_pos = r;
    }
    const auto a = std::max_element(got.begin() + long(r * V), got.begin() + long((r + 1) * V));
    const auto b = std::max_element(want.begin() + long(r * V), want.begin() + long((r + 1) * V));
    if (a - got.begin() != b - want.begin()) ++s.argmax_diff;
  }
  return s;
}

/// Runs the reference over ids; returns its logits and trace.
std::pair<std::vector<float>, nlohmann::json> reference(const std::string& model, const std::vector<uint32_t>& ids,
                                                        const std::string& extra, uint64_t vocab) {
  const fs::path idf = dir().root() / "ids.txt", lf = dir().root() / "ref_logits.bin", tf = dir().root() / "ref_trace.json";
  {
    std::ofstream o(idf);
    for (auto x : ids) o << x << "\n";
  }
  const std::string cmd = "/usr/bin/python3 " + std::string(CMFX_REFERENCE_DIR) + "/dsv41_ref.py " + model +
                          " --ids-file " + idf.string() + " --out-logits " + lf.string() + " --out-trace " + tf.string() +
                          " " + extra + " > /dev/null";
  if (std::system(cmd.c_str()) != 0) throw std::runtime_error("reference failed: " + cmd);
  std::vector<float> want(ids.size() * vocab);
  std::ifstream in(lf, std::ios::binary);
  in.read(reinterpret_cast<char*>(want.data()), std::streamsize(want.size() * 4));
  if (!in) throw std::runtime_error("short reference logits file");
  nlohmann::json tr;
  std::ifstream(tf) >> tr;
  return {want, tr};
}

/// Logits and decisions against the reference; returns the number of strict-subset index picks.
uint64_t check_against(const dsv41_model& m, const std::vector<float>& got, const dsv41_trace& tr,
                       const std::vector<float>& want, const nlohmann::json& ref, const char* what) {
  const dsv41_config& c = m.config();
  const uint64_t T = tr.experts[0].size();
  const rel_stats s = compare(got, want, T, c.vocab);
  std::printf("%s: max rel err %.3g (position %llu), argmax differences %llu / %llu\n", what, s.max_rel,
              static_cast<unsigned long long>(s.worst_pos), static_cast<unsigned long long>(s.argmax_diff),
              static_cast<unsigned long long>(T));
  EXPECT_LE(s.max_rel, kRefMaxRel) << what;
  EXPECT_EQ(s.argmax_diff, 0u) << what;
  uint64_t strict = 0, index_layers = 0;
  for (uint32_t l = 0; l < c.layers; ++l) {
    const auto& re = ref["experts"][std::to_string(l)];
    for (uint64_t t = 0; t < T; ++t)
      EXPECT_EQ(tr.experts[l][t], re[t].get<std::vector<uint32_t>>()) << what << ": experts, layer " << l << " token " << t;
    const dsv41_mode md = c.plan[l].mode;
    if (md != dsv41_mode::full && md != dsv41_mode::reindex) {
      EXPECT_TRUE(tr.topk[l].empty());
      continue;
    }
    ++index_layers;
    const auto& rt = ref["topk"][std::to_string(l)];
    for (uint64_t t = 0; t < T; ++t) {
      EXPECT_EQ(tr.topk[l][t], rt[t].get<std::vector<uint32_t>>()) << what << ": index picks, layer " << l << " token " << t;
      if ((t + 1) / c.plan[l].ratio > c.index_topk) ++strict;
    }
  }
  EXPECT_EQ(index_layers, 5u);
  return strict;
}

std::vector<float> run_all(const dsv41_model& cm, const std::string& path, const std::vector<uint32_t>& ids,
                           const dsv41_options& o, dsv41_trace* tr = nullptr) {
  (void)cm;
  auto m = dsv41_model::open(path, o);
  dsv41_state st = m->new_state();
  return m->forward(ids, st, dsv41_logits::all, tr);
}

}  // namespace

TEST(Dsv41Model, LayerPlanFollowsTheConfig) {
  // The release's lists (dsv4-architecture.md §1, §4.2) → the release's layer modes.
  nlohmann::json t = toy_v41_text_config(toy_v41_config{});
  std::vector<uint32_t> ratios = {0, 0};
  for (int i = 2; i < 20; ++i) ratios.push_back(2);
  for (int i = 20; i < 40; ++i) ratios.push_back(1);
  ratios.insert(ratios.end(), {0, 0, 0});
  t["num_hidden_layers"] = 40;
  t["compress_ratios"] = ratios;
  t["kv_source_layer_ids"] = {2, 8, 14, 20};
  t["index_source_layer_ids"] = {2, 8, 14, 20, 24, 28, 32, 36};
  t["candidate_source_layer_id"] = 20;
  t["candidate_topk_blocks"] = 2048;
  t["candidate_block_size"] = 8;
  t["index_topk"] = 512;
  t["engram_layer_ids"] = {1, 14};
  t["engram_multipliers"] = {{1, 3, 5, 7}, {1, 3, 5, 7}};
  t.erase("engram_num_embeddings");
  const dsv41_config c = dsv41_config_from_release({{"model_type", "deepseek_v41"}, {"text_config", t}});
  for (uint32_t l = 0; l < 40; ++l) {
    const dsv41_layer_plan& p = c.plan[l];
    const dsv41_mode want = l < 2 ? dsv41_mode::swa
                            : (l == 2 || l == 8 || l == 14 || l == 20) ? dsv41_mode::full
                            : (l >= 24 && l % 4 == 0) ? dsv41_mode::reindex
                                                      : dsv41_mode::reuse;
    EXPECT_EQ(p.mode, want) << "layer " << l;
    if (l >= 2) {
      EXPECT_EQ(p.kv_from, l < 8 ? 2 : l < 14 ? 8 : l < 20 ? 14 : 20) << l;
      EXPECT_EQ(p.topk_from, int(want == dsv41_mode::reuse ? l - (l >= 20 ? (l - 20) % 4 : (l - 2) % 6) : l)) << l;
      EXPECT_EQ(p.uses_candidates, l > 20 && want == dsv41_mode::reindex) << l;
    }
  }
  EXPECT_TRUE(c.plan[20].candidate_source);
  EXPECT_EQ(c.plan[14].engram, 1);
  // A source list that breaks the structure is refused, naming the layer.
  t["kv_source_layer_ids"] = {2, 8, 14, 21};
  EXPECT_THROW(dsv41_config_from_release({{"model_type", "deepseek_v41"}, {"text_config", t}}), usage_error);
}

TEST(Dsv41Model, MatchesFloat64Reference) {
  const std::string rel = dir().make("rel-f32", "release", "f32");
  auto m = dsv41_model::open(rel, opts(false, true));
  const auto ids = token_ids(kTokens, m->config().vocab);
  const auto [want, ref] = reference(rel, ids, "", m->config().vocab);
  dsv41_trace tr;
  dsv41_state st = m->new_state();
  const auto got = m->forward(ids, st, dsv41_logits::all, &tr);
  EXPECT_GT(check_against(*m, got, tr, want, ref, "reference"), 400u) << "most index picks must be strict subsets";
}

// The KV quantisers (FP8 / 32, FP4 pow2 / 32, FP4 with E4M3 scales / 16) bit-exact against the reference's, on fresh
// random blocks of mixed magnitudes (incl. tiny blocks that hit the scale floors).
TEST(Dsv41Model, KvQuantisersMatchTheReference) {
  std::mt19937 rng(7);
  std::normal_distribution<float> nd(0.0f, 1.0f);
  std::vector<float> x(32 * 256);
  for (size_t b = 0; b < x.size(); b += 32) {
    const float mag = std::ldexp(1.0f, int(rng() % 40) - 30);
    for (size_t i = 0; i < 32; ++i) x[b + i] = mag * nd(rng);
  }
  std::vector<float> a = x, b = x, c = x;
  act_quant_e4m3(a, dsv41_act_block);
  act_quant_e2m1(b, dsv41_index_fp4_block);
  dsv41_fp4_e4m3_quant(c, dsv41_kv_fp4_block);
  const fs::path in = dir().root() / "q_in.bin", out = dir().root() / "q_out.bin";
  std::ofstream(in, std::ios::binary).write(reinterpret_cast<const char*>(x.data()), std::streamsize(x.size() * 4));
  {
    std::ofstream o(out, std::ios::binary);
    for (const auto* v : {&a, &b, &c}) o.write(reinterpret_cast<const char*>(v->data()), std::streamsize(v->size() * 4));
  }
  std::string cmd = "/usr/bin/python3 ";
  cmd += CMFX_REFERENCE_DIR;
  cmd += "/dsv41_ref.py --quant-check " + in.string() + " " + out.string();
  EXPECT_EQ(std::system(cmd.c_str()), 0) << cmd;
  EXPECT_NE(a, x);
  EXPECT_NE(c, b);
}

// With the KV quantisation on, f32 vs float64 inputs occasionally land on opposite sides of a rounding boundary
// (one FP4 step), which can flip an index pick and then propagates; the logits stay close, exact parity is not
// expected. Measured (160 tokens): max rel 6.5e-4, argmax differences 0 / 160 with the current toy; 0.088 and 2 / 160
// with an earlier toy whose Engram table differed by its FP8 rounding only. The bound catches a wrong quantiser
// placement (which moves every position), KvQuantisersMatchTheReference checks the quantisers exactly.
TEST(Dsv41Model, KvQuantisedModelStaysNearTheReference) {
  const std::string rel = dir().make("rel-f32", "release", "f32");
  auto m = dsv41_model::open(rel, opts(true, true));
  const uint64_t V = m->config().vocab;
  const auto ids = token_ids(kTokens, V);
  const auto [want, ref] = reference(rel, ids, "--kv-quant", V);
  dsv41_state st = m->new_state();
  const auto got = m->forward(ids, st, dsv41_logits::all);
  const rel_stats s = compare(got, want, kTokens, V);
  uint64_t close = 0;
  for (uint64_t r = 0; r < kTokens; ++r) close += compare({got.begin() + long(r * V), got.begin() + long((r + 1) * V)},
                                                          {want.begin() + long(r * V), want.begin() + long((r + 1) * V)}, 1, V)
                                                      .max_rel <= kRefMaxRel;
  std::printf("KV quantised vs reference: max rel %.3g, argmax differences %llu, positions within %.0e: %llu / %llu\n",
              s.max_rel, static_cast<unsigned long long>(s.argmax_diff), kRefMaxRel, static_cast<unsigned long long>(close),
              static_cast<unsigned long long>(kTokens));
  EXPECT_GE(close, kTokens * 3 / 4);
  EXPECT_LE(s.argmax_diff, kTokens / 20);
}

TEST(Dsv41Model, PrefillThenDecodeEqualsOnePrefill) {
  const std::string cmf = dir().make("toy-f32.cmf", "cmf", "f32");
  for (bool kvq : {false, true}) {
    auto m = dsv41_model::open(cmf, opts(kvq, false));
    const uint64_t V = m->config().vocab;
    const auto ids = token_ids(kTokens, V);
    dsv41_state st = m->new_state();
    const auto whole = m->forward(ids, st, dsv41_logits::all);
    for (uint64_t first : {uint64_t(37), uint64_t(1)}) {
      dsv41_state s2 = m->new_state();
      auto got = m->forward(std::span<const uint32_t>(ids.data(), first), s2, dsv41_logits::all);
      for (uint64_t t = first; t < kTokens; ++t) {
        const auto one = m->forward(std::span<const uint32_t>(ids.data() + t, 1), s2, dsv41_logits::last);
        got.insert(got.end(), one.begin(), one.end());
      }
      const rel_stats s = compare(got, whole, kTokens, V);
      std::printf("kv quant %d, prefill %llu + decode: max rel %.3g\n", int(kvq), static_cast<unsigned long long>(first),
                  s.max_rel);
      EXPECT_LE(s.max_rel, kDecodeMaxRel);
      EXPECT_EQ(s.argmax_diff, 0u);
    }
    dsv41_state s3 = m->new_state();
    std::vector<float> got;
    const uint64_t sizes[] = {5, 3, 20, 1, 2, 100, 13, 16};
    for (uint64_t b = 0, i = 0; b < kTokens; ++i) {
      const uint64_t e = std::min(kTokens, b + sizes[i % 8]);
      const auto part = m->forward(std::span<const uint32_t>(ids.data() + b, e - b), s3, dsv41_logits::all);
      got.insert(got.end(), part.begin(), part.end());
      b = e;
    }
    EXPECT_LE(compare(got, whole, kTokens, V).max_rel, kDecodeMaxRel);
  }
}

// The official shared runtime (stale_index_k on, the default): prefill P tokens, then one-token decode steps, against
// the reference run with the same split (--decode-from P --stale-index-k).
TEST(Dsv41Model, StaleIndexKeysMatchTheReferenceDecode) {
  const std::string rel = dir().make("rel-f32", "release", "f32");
  auto m = dsv41_model::open(rel, opts(false, true));
  const uint64_t V = m->config().vocab, P = 40;
  const auto ids = token_ids(kTokens, V);
  dsv41_trace tr;
  dsv41_state st = m->new_state();
  auto got = m->forward(std::span<const uint32_t>(ids.data(), P), st, dsv41_logits::all, &tr);
  // The rest in chunks of several tokens: they run as official one-token steps.
  for (uint64_t b = P; b < kTokens; b += 7) {
    const uint64_t e = std::min(kTokens, b + 7);
    const auto part = m->forward(std::span<const uint32_t>(ids.data() + b, e - b), st, dsv41_logits::all, &tr);
    got.insert(got.end(), part.begin(), part.end());
  }
  std::string extra = "--decode-from ";
  extra += std::to_string(P);
  extra += " --stale-index-k";
  const auto [want, ref] = reference(rel, ids, extra, V);
  check_against(*m, got, tr, want, ref, "reference, official decode (stale index keys)");
  // The quirk happened: ratio-2 sources scored the candidate source's (ratio-1) keys on non-closing steps.
  uint64_t foreign = 0;
  for (uint64_t t = P; t < kTokens; ++t) foreign += tr.keys_from[2][t] != 2;
  EXPECT_EQ(foreign, (kTokens - P) / 2);
  // ... and it changes decisions once more than index_topk entries exist (so the option is not a no-op).
  auto m2 = dsv41_model::open(rel, opts(false, false));
  dsv41_trace tr2;
  dsv41_state s2 = m2->new_state();
  m2->forward(std::span<const uint32_t>(ids.data(), P), s2, dsv41_logits::none, &tr2);
  for (uint64_t t = P; t < kTokens; ++t) m2->forward(std::span<const uint32_t>(ids.data() + t, 1), s2, dsv41_logits::none, &tr2);
  uint64_t differ = 0;
  for (uint64_t t = P; t < kTokens; ++t) differ += tr.topk[2][t] != tr2.topk[2][t];
  EXPECT_GT(differ, 10u);
}

// A prompt run in pieces after mark_prefill (the driver's 512-token pieces, the serve scheduler) is the official ONE
// prefill call (spec §5.1) under the stale-key rule: the same logits and index picks as one forward of the whole
// prompt, and the same decode steps after it. Without the mark the later pieces are decode steps (they differ).
// Truncating back into the prefill and marking again extends it; a mark after a decode step is refused.
TEST(Dsv41Model, MarkedPrefillInPiecesIsOnePrefill) {
  const std::string rel = dir().make("rel-f32", "release", "f32");
  auto m = dsv41_model::open(rel, opts(false, true));
  const uint64_t V = m->config().vocab, D = 6, N = kTokens - D;  // N prompt tokens, then D decode steps
  const auto ids = token_ids(kTokens, V);
  auto run = [&](bool mark, dsv41_trace& tr, dsv41_state& st) {
    if (mark) {
      EXPECT_TRUE(st.mark_prefill(N));
    }
    std::vector<float> got;
    const uint64_t sizes[] = {5, 3, 20, 1, 2, 100, 13, 16};
    for (uint64_t b = 0, i = 0; b < N; ++i) {
      const uint64_t e = std::min(N, b + sizes[i % 8]);
      const auto part = m->forward(std::span<const uint32_t>(ids.data() + b, e - b), st, dsv41_logits::all, &tr);
      got.insert(got.end(), part.begin(), part.end());
      b = e;
    }
    EXPECT_EQ(st.prefill_end(), mark ? N : 5u);
    for (uint64_t t = N; t < kTokens; ++t) {
      const auto one = m->forward(std::span<const uint32_t>(ids.data() + t, 1), st, dsv41_logits::last, &tr);
      got.insert(got.end(), one.begin(), one.end());
    }
    EXPECT_FALSE(st.mark_prefill(kTokens + 1)) << "a mark after decode steps must be refused";
    return got;
  };
  dsv41_trace tw, tm, tu;
  dsv41_state sw = m->new_state(), sm = m->new_state(), su = m->new_state();
  auto whole = m->forward(std::span<const uint32_t>(ids.data(), N), sw, dsv41_logits::all, &tw);
  for (uint64_t t = N; t < kTokens; ++t) {
    const auto one = m->forward(std::span<const uint32_t>(ids.data() + t, 1), sw, dsv41_logits::last, &tw);
    whole.insert(whole.end(), one.begin(), one.end());
  }
  const auto marked = run(true, tm, sm), unmarked = run(false, tu, su);
  const rel_stats s = compare(marked, whole, kTokens, V);
  std::printf("marked prefill in pieces vs one prefill: max rel %.3g\n", s.max_rel);
  EXPECT_LE(s.max_rel, kDecodeMaxRel);
  EXPECT_EQ(s.argmax_diff, 0u);
  const uint32_t L = m->config().layers;
  uint64_t picks = 0, differ = 0;
  for (uint32_t l = 0; l < L; ++l)
    for (uint64_t t = 0; t < kTokens && l < tw.topk.size() && !tw.topk[l].empty(); ++t) {
      EXPECT_EQ(tm.topk[l][t], tw.topk[l][t]) << "layer " << l << " position " << t;
      EXPECT_EQ(tm.keys_from[l][t], tw.keys_from[l][t]) << "layer " << l << " position " << t;
      ++picks;
      differ += tu.topk[l][t] != tw.topk[l][t];
    }
  EXPECT_GT(picks, 0u);
  EXPECT_GT(differ, 10u) << "unmarked pieces should run as decode steps (the test would not see a missing mark)";
  // Back into the prefill: a prefill of N − 9 positions that a new mark extends to the same N (then the same steps).
  dsv41_state st = m->new_state();
  dsv41_trace tt;
  ASSERT_TRUE(st.mark_prefill(N));
  m->forward(std::span<const uint32_t>(ids.data(), N), st, dsv41_logits::none, &tt);
  st.truncate(N - 9);
  EXPECT_EQ(st.prefill_end(), N - 9);
  EXPECT_TRUE(st.mark_prefill(N));
  std::vector<float> tail = m->forward(std::span<const uint32_t>(ids.data() + N - 9, 9), st, dsv41_logits::all);
  for (uint64_t t = N; t < kTokens; ++t) {
    const auto one = m->forward(std::span<const uint32_t>(ids.data() + t, 1), st, dsv41_logits::last);
    tail.insert(tail.end(), one.begin(), one.end());
  }
  const std::vector<float> want(whole.end() - std::ptrdiff_t((9 + D) * V), whole.end());
  EXPECT_LE(compare(tail, want, 9 + D, V).max_rel, kDecodeMaxRel);
  // The serve scheduler's step: a marked prompt's later piece (several positions past 0) in one forward_batch with
  // another sequence's decode token — the piece as one prefill, the token as its own decode step.
  dsv41_state sa = m->new_state(), sb = m->new_state(), sb2 = m->new_state();
  ASSERT_TRUE(sa.mark_prefill(N));
  m->forward(std::span<const uint32_t>(ids.data(), 100), sa, dsv41_logits::none);
  const uint64_t B0 = 30;  // sequence b: a 30-token prompt, then one decode token
  m->forward(std::span<const uint32_t>(ids.data() + 1, B0), sb, dsv41_logits::none);
  m->forward(std::span<const uint32_t>(ids.data() + 1, B0), sb2, dsv41_logits::none);
  std::vector<uint32_t> step(ids.begin() + 100, ids.begin() + std::ptrdiff_t(N));
  step.push_back(ids[0]);
  const dsv41_segment segs[] = {{&sa, 0, N - 100}, {&sb, N - 100, 1}};
  const std::vector<float> both = m->forward_batch(step, segs, dsv41_logits::last);
  ASSERT_EQ(both.size(), 2 * V);
  const std::vector<float> a_last(both.begin(), both.begin() + std::ptrdiff_t(V));
  const std::vector<float> b_last(both.begin() + std::ptrdiff_t(V), both.end());
  const std::vector<float> a_want(whole.begin() + std::ptrdiff_t((N - 1) * V), whole.begin() + std::ptrdiff_t(N * V));
  EXPECT_LE(compare(a_last, a_want, 1, V).max_rel, kDecodeMaxRel);
  EXPECT_EQ(b_last, m->forward(std::span<const uint32_t>(ids.data(), 1), sb2, dsv41_logits::last));
}

// CMF (f32 table, format row decoder + bf16 cast) == release (the Engram table in FP8 E4M3 with UE8M0 per 32 of a
// row, gathered in place by engram.hpp): the toy's table lies on that grid, so the two must agree exactly.
TEST(Dsv41Model, CmfAndReleaseLayoutsAgree) {
  const std::string cmf = dir().make("toy-f32.cmf", "cmf", "f32"), rel = dir().make("rel-f32", "release", "f32");
  auto m = dsv41_model::open(cmf, opts(true, true));
  auto mr = dsv41_model::open(rel, opts(true, true));
  for (const uint32_t l : m->config().engram_layers) {
    EXPECT_EQ(m->weights().layers[l].eg_table_fp8.data, nullptr) << l;
    EXPECT_NE(mr->weights().layers[l].eg_table_fp8.data, nullptr) << "release table of layer " << l << " not FP8 rows";
    EXPECT_EQ(mr->weights().layers[l].eg_table_fp8.cols / 32, 1u);
  }
  const auto ids = token_ids(64, m->config().vocab);
  EXPECT_EQ(run_all(*m, cmf, ids, opts(true, true)), run_all(*m, rel, ids, opts(true, true)));
}

TEST(Dsv41Model, ThreadCountDoesNotChangeResults) {
  const std::string nat = dir().make("rel-native", "release", "native");
  auto m = dsv41_model::open(nat, opts(true, true));
  const auto ids = token_ids(48, m->config().vocab);
  const auto a = run_all(*m, nat, ids, opts(true, true, 1)), b = run_all(*m, nat, ids, opts(true, true, 3));
  EXPECT_EQ(a, b);
  // The native toy (FP8 32×32 + FP4 experts) stays near the f32 one (random weights: loose bound, catches a broken path).
  const std::string f32 = dir().make("rel-f32", "release", "f32");
  const rel_stats s = compare(a, run_all(*m, f32, ids, opts(true, true)), ids.size(), m->config().vocab);
  std::printf("native vs f32: max rel %.3g\n", s.max_rel);
  EXPECT_LE(s.max_rel, 1.5);
  EXPECT_GT(s.max_rel, 0.0);
}

TEST(Dsv41Model, TruncateAndCopyRollBackExactly) {
  const std::string cmf = dir().make("toy-f32.cmf", "cmf", "f32");
  auto m = dsv41_model::open(cmf, opts(true, true));
  const auto ids = token_ids(80, m->config().vocab);
  const uint64_t N = 61;  // odd: a ratio-2 group is open
  dsv41_state st = m->new_state();
  m->forward(std::span<const uint32_t>(ids.data(), N), st, dsv41_logits::none);
  dsv41_state fork = st;
  const auto want = m->forward(std::span<const uint32_t>(ids.data() + N, 8), st, dsv41_logits::all);
  std::vector<uint32_t> wrong(8, 7);
  m->forward(wrong, fork, dsv41_logits::none);
  fork.truncate(N);
  EXPECT_EQ(m->forward(std::span<const uint32_t>(ids.data() + N, 8), fork, dsv41_logits::all), want);
  EXPECT_THROW(fork.truncate(N - 20), usage_error);
}

// The packed KV cache (FP4 rows in packed_fp4_bank, selected rows decoded into the bounded scratch, index keys
// streamed through tiles) against f32 rows after the same fake-quant (packed_kv off): the same toy sequence both
// ways — prefill, one-token decode steps, a truncate and re-decode — must give bit-identical logits and decisions.
// The state then holds exactly v41_state_bytes' global KV for the position, a fraction of the f32 rows.
TEST(Dsv41Model, PackedKvCacheIsBitIdenticalToF32Rows) {
  const std::string cmf = dir().make("toy-f32.cmf", "cmf", "f32");
  dsv41_options op = opts(true, true), of = op;
  of.packed_kv = false;
  auto mp = dsv41_model::open(cmf, op), mf = dsv41_model::open(cmf, of);
  ASSERT_TRUE(mp->packed_state());
  ASSERT_FALSE(mf->packed_state());
  const auto ids = token_ids(kTokens, mp->config().vocab);
  const uint64_t P = 100, N = kTokens;
  auto run = [&](dsv41_model& m, dsv41_trace& tr) {
    dsv41_state st = m.new_state();
    auto out = m.forward(std::span<const uint32_t>(ids.data(), P), st, dsv41_logits::all, &tr);
    for (uint64_t t = P; t < N; ++t) {
      const auto one = m.forward(std::span<const uint32_t>(ids.data() + t, 1), st, dsv41_logits::last, &tr);
      out.insert(out.end(), one.begin(), one.end());
    }
    st.truncate(N - 5);  // roll back into the middle of a ratio-2 group and decode other tokens
    for (uint64_t t = 0; t < 5; ++t) {
      const uint32_t id = ids[t];
      const auto one = m.forward(std::span<const uint32_t>(&id, 1), st, dsv41_logits::last, &tr);
      out.insert(out.end(), one.begin(), one.end());
    }
    return std::make_pair(out, st);
  };
  dsv41_trace tp, tf;
  const auto [lp, sp] = run(*mp, tp);
  const auto [lf, sf] = run(*mf, tf);
  ASSERT_EQ(lp.size(), (N + 5) * mp->config().vocab);
  EXPECT_TRUE(lp == lf) << "packed KV rows must decode to exactly the f32 fake-quantised rows";
  EXPECT_EQ(tp.topk, tf.topk);
  EXPECT_EQ(tp.experts, tf.experts);
  // Storage: the packed state holds v41_state_bytes' global KV at its position; f32 rows take 8× / ~7.5× more.
  ASSERT_TRUE(sp.packed());
  const v41_state_size z = v41_state_bytes(dsv41_state_shape(mp->config()), sp.pos());
  EXPECT_EQ(sp.kv_bytes(), z.main_kv_bytes);
  EXPECT_EQ(sp.index_key_bytes(), z.index_k_bytes);
  EXPECT_GT(z.main_kv_bytes, 0u);
  EXPECT_EQ(sf.kv_bytes(), z.main_kv_bytes / kv_main_codec::row_bytes(mp->config().head_dim) * mp->config().head_dim * 4);
  std::printf("KV bytes at %llu tokens: packed %llu + %llu, f32 %llu + %llu\n", static_cast<unsigned long long>(sp.pos()),
              static_cast<unsigned long long>(sp.kv_bytes()), static_cast<unsigned long long>(sp.index_key_bytes()),
              static_cast<unsigned long long>(sf.kv_bytes()), static_cast<unsigned long long>(sf.index_key_bytes()));
  // A state of the other storage is refused, not misread.
  dsv41_state wrong = mf->new_state();
  EXPECT_THROW(mp->forward(std::span<const uint32_t>(ids.data(), 4), wrong, dsv41_logits::none), usage_error);
}

// Continuous batching: three sequences of different prompt lengths (one joins a step later), prefilled and decoded
// in shared forward_batch passes, equal the same sequences run alone, bit for bit (packed KV, stale index keys on).
TEST(Dsv41Model, BatchedSequencesEqualSeparateRuns) {
  const std::string cmf = dir().make("toy-f32.cmf", "cmf", "f32");
  auto m = dsv41_model::open(cmf, opts(true, true, 2));
  const uint64_t V = m->config().vocab;
  const auto ids = token_ids(kTokens, V);
  const uint64_t off[3] = {0, 50, 80}, plen[3] = {37, 6, 50};  // off + plen + steps ≤ kTokens
  const uint64_t steps = 24;  // past the window (16) and several ratio-2 groups
  std::vector<std::vector<float>> alone(3);
  for (int k = 0; k < 3; ++k) {
    dsv41_state st = m->new_state();
    alone[k] = m->forward(std::span<const uint32_t>(ids.data() + off[k], plen[k]), st, dsv41_logits::all);
    for (uint64_t t = 0; t < steps; ++t) {
      const auto one = m->forward(std::span<const uint32_t>(ids.data() + off[k] + plen[k] + t, 1), st, dsv41_logits::last);
      alone[k].insert(alone[k].end(), one.begin(), one.end());
    }
  }
  dsv41_state st[3] = {m->new_state(), m->new_state(), m->new_state()};
  std::vector<std::vector<float>> got(3);
  uint64_t done[3] = {0, 0, 0};
  const uint64_t total[3] = {plen[0] + steps, plen[1] + steps, plen[2] + steps};
  uint64_t mixed_passes = 0;
  for (int step = 0; done[0] < total[0] || done[1] < total[1] || done[2] < total[2]; ++step) {
    std::vector<uint32_t> chunk;
    std::vector<dsv41_segment> segs;
    std::vector<int> who;
    bool prefill = false, decode = false;
    for (int k = 0; k < 3; ++k) {
      if (done[k] >= total[k] || (k == 1 && step == 0)) continue;
      const uint64_t cnt = done[k] == 0 ? plen[k] : 1;
      (done[k] == 0 ? prefill : decode) = true;
      segs.push_back({&st[k], chunk.size(), cnt});
      who.push_back(k);
      for (uint64_t t = 0; t < cnt; ++t) chunk.push_back(ids[off[k] + done[k] + t]);
    }
    mixed_passes += prefill && decode;
    const auto logits = m->forward_batch(chunk, segs, dsv41_logits::all);
    ASSERT_EQ(logits.size(), chunk.size() * V);
    for (size_t j = 0; j < segs.size(); ++j) {
      const int k = who[j];
      got[k].insert(got[k].end(), logits.begin() + long(segs[j].first * V),
                    logits.begin() + long((segs[j].first + segs[j].count) * V));
      done[k] += segs[j].count;
    }
  }
  EXPECT_EQ(mixed_passes, 1u);  // sequence 1's prefill shares a pass with the others' decode steps
  for (int k = 0; k < 3; ++k) {
    ASSERT_EQ(got[k].size(), alone[k].size());
    EXPECT_TRUE(got[k] == alone[k]) << "sequence " << k << ": max rel " << compare(got[k], alone[k], total[k], V).max_rel;
  }
  // A refused batch (an id outside the vocabulary in its second segment) leaves every state as it was.
  dsv41_state a = m->new_state(), b = m->new_state();
  const std::vector<uint32_t> bad = {1, 2, 3, uint32_t(V)};
  const dsv41_segment bs[2] = {{&a, 0, 2}, {&b, 2, 2}};
  EXPECT_THROW(m->forward_batch(bad, bs, dsv41_logits::none), usage_error);
  EXPECT_EQ(a.pos(), 0u);
  EXPECT_TRUE(a.cids().empty());
  EXPECT_TRUE(a.ik_owner().empty());
}

namespace {

/// The f32 CMF twin of a quantised V4.1 toy: every tensor decoded from the file and stored as f32.
std::string dequantized_twin41(const std::string& src, const std::string& name) {
  const toy_v41_config c;
  auto source = dsv4_open_source(src);
  cmf_writer w(toy_v41_cmf_header(c, "f32").dump());
  for (const auto& t : toy_v41_inventory(c)) {
    const auto hit = source->find(t.name);
    if (!hit || !hit->fmt) throw std::runtime_error("twin: no float tensor " + t.name);
    std::vector<float> v(hit->v.rows * hit->v.cols);
    visit_format(*hit->fmt, [&]<class F>() {
      for (uint64_t r = 0; r < hit->v.rows; ++r) F::decode_row(hit->v, r, v.data() + r * hit->v.cols);
    });
    std::vector<uint8_t> bytes(v.size() * 4);
    std::memcpy(bytes.data(), v.data(), bytes.size());
    w.add(dsv4_cmf_name(t.name), cmf_dtype::f32, t.shape, std::move(bytes));
  }
  const std::string p = (dir().root() / name).string();
  w.write(p);
  return p;
}

double nmse(const std::vector<float>& got, const std::vector<float>& want) {
  double num = 0, den = 0;
  for (size_t i = 0; i < want.size(); ++i) {
    num += (double(got[i]) - want[i]) * (double(got[i]) - want[i]);
    den += double(want[i]) * want[i];
  }
  return den > 0 ? num / den : num;
}

}  // namespace

// The q4tp-quantised CMF toy (make-toy --arch v41 --quant q4tp: 4-bit tiles with a per-row scale ladder on the
// matrices incl. embed / head, f32 vectors), 48 tokens, with the KV quantisation off and on:
//   - against the f32 model of its own decoded weights, KV quantisation off: only the GEMM kernels' accumulation
//     order differs, max rel ≤ 1e-4 (measured 2.1e-6). With it on, such last-bit differences can flip an FP4 / FP8
//     cache rounding and then an index pick (measured 1.9e-6 with this toy, 0.32 with an earlier one whose Engram
//     table differed by its FP8 rounding only), so that comparison is printed, not gated;
//   - against the f32 toy: the toy's N(0, 1/in) weights carry no structure and its 12 layers amplify every
//     perturbation (the native FP8 toy is as far, ThreadCountDoesNotChangeResults), so the q4tp logits are only
//     weakly correlated with the f32 ones. Measured (fixed seeds): max rel 1.47 / 1.53, NMSE 1.13 (off / on);
//     uncorrelated logits of the same spread give NMSE ≈ 2. The bounds (max rel ≤ 2, NMSE ≤ 1.5) catch a path that
//     blows up or decorrelates completely; the twin check is the exact one.
TEST(Dsv41Model, Q4tpToyMatchesItsTwinAndStaysNearTheF32Toy) {
  const std::string q4 = dir().make("toy-q4tp.cmf", "cmf", "q4tp"), f32 = dir().make("toy-f32.cmf", "cmf", "f32");
  const std::string twin = dequantized_twin41(q4, "toy-q4tp.twin.cmf");
  const uint64_t T = 48;
  auto prefill = [&](const std::string& path, const std::vector<uint32_t>& ids, bool kvq = true) {
    auto m = dsv41_model::open(path, opts(kvq, true, 2));
    dsv41_state st = m->new_state();
    return m->forward(ids, st, dsv41_logits::all);
  };
  auto mq = dsv41_model::open(q4, opts(true, true, 2));
  const uint64_t V = mq->config().vocab;
  const auto ids = token_ids(T, V);
  for (const bool kvq : {false, true}) {
    const auto a = prefill(q4, ids, kvq), want = prefill(f32, ids, kvq);
    const rel_stats tw = compare(a, prefill(twin, ids, kvq), T, V), s = compare(a, want, T, V);
    const double e = nmse(a, want);
    std::printf("q4tp V4.1 toy, kv quant %d: vs its f32 twin max rel %.3g; vs the f32 toy max rel %.3g, NMSE %.3g\n",
                int(kvq), tw.max_rel, s.max_rel, e);
    if (!kvq) {
      EXPECT_LE(tw.max_rel, kTwinMaxRel);
    }
    EXPECT_GT(s.max_rel, 0.0);
    EXPECT_LE(s.max_rel, kQ4tpMaxRel) << "kv quant " << kvq;
    EXPECT_LE(e, kQ4tpNmse) << "kv quant " << kvq;
  }
}

// Engram's configuration goes through include/cmfx/model/engram.hpp's validation: a compressed vocabulary the
// "mod" map cannot fill, a table-row count that disagrees with the hash primes, and a missing token map (the
// release's, derived from the tokenizer) are refused with a message that names the problem.
TEST(Dsv41Model, EngramConfigIsValidated) {
  const std::string rel = dir().make("rel-f32", "release", "f32");
  auto variant = [&](const std::string& name, const std::function<void(nlohmann::json&)>& edit) {
    const fs::path d = dir().root() / name;
    fs::create_directories(d);
    for (const auto& e : fs::directory_iterator(rel))
      if (e.path().filename() != "config.json" && !fs::exists(d / e.path().filename()))
        fs::create_symlink(fs::absolute(e.path()), d / e.path().filename());
    nlohmann::json j;
    std::ifstream(fs::path(rel) / "config.json") >> j;
    edit(j["text_config"]);
    std::ofstream(d / "config.json") << j.dump(1);
    return d.string();
  };
  auto error_of = [&](const std::string& path) -> std::string {
    try {
      dsv41_model::open(path, opts(true, true));
    } catch (const usage_error& e) {
      return e.what();
    }
    return "";
  };
  const std::string big = error_of(variant("eg-big", [](nlohmann::json& t) { t["engram_compressed_vocab_size"] = 200000; }));
  EXPECT_NE(big.find("compressed_vocab"), std::string::npos) << big;
  const std::string rows = error_of(variant("eg-rows", [](nlohmann::json& t) { t["engram_num_embeddings"][1] = 7; }));
  EXPECT_NE(rows.find("num_embeddings"), std::string::npos) << rows;
  const std::string map = error_of(variant("eg-map", [](nlohmann::json& t) { t.erase("engram_token_map"); }));
  EXPECT_NE(map.find("compressed token map"), std::string::npos) << map;
}

// int8 activations (dsv41_options::matmul_act = i8, `--act i8`) on the q4tp toy against the same toy with f32
// activations. Unlike the V4 toy, this 12-layer toy's random router has near-tied expert scores everywhere: the
// int8 error (per matmul NMSE ≤ 2e-4, docs/FORMATS.md) changes some routed expert set from token 0 on (measured: a
// flip in every layer within the first 26 tokens, index top-k flips from token 8), after which the logits decorrelate
// the way any perturbation does (the q4tp-vs-f32 toy bound is NMSE 1.5). Measured NMSE 0.41 (0.26 without the KV
// quantisation; 0.21 with only the projections int8, 3e-5 with only the head int8), so kI8Nmse = 0.8 only catches a
// broken path (NMSE ≳ 1); argmax
// agreement is not gated here. The close-agreement gate is Dsv4Model.Int8ActivationsStayNearF32Activations; the exact
// gates are these: with i8, prefill + decode and uneven chunks == one prefill (stale_index_k off, as
// PrefillThenDecodeEqualsOnePrefill; measured bit-exact), and 1 == 3 threads bit for bit.
TEST(Dsv41Model, Int8ActivationsStayNearF32AndKeepParity) {
  if (!best_cpu_kernels().gemm_i8[size_t(format::q4tp)]) GTEST_SKIP() << "no int8-activation kernel on this CPU";
  const std::string q4 = dir().make("toy-q4tp.cmf", "cmf", "q4tp");
  const uint64_t T = 96;
  auto run = [&](const dsv41_options& o, const std::vector<uint32_t>& ids) {
    auto m = dsv41_model::open(q4, o);
    dsv41_state st = m->new_state();
    return m->forward(ids, st, dsv41_logits::all);
  };
  dsv41_options f = opts(true, true), i8 = f;
  i8.matmul_act = act_precision::i8;
  auto m = dsv41_model::open(q4, i8);
  const uint64_t V = m->config().vocab;
  const auto ids = token_ids(T, V);
  const auto a = run(i8, ids), want = run(f, ids);
  const rel_stats s = compare(a, want, T, V);
  const double e = nmse(a, want);
  std::printf("q4tp V4.1 toy, i8 vs f32 activations: max rel %.3g, NMSE %.3g, argmax diff %llu / %llu\n", s.max_rel, e,
              static_cast<unsigned long long>(s.argmax_diff), static_cast<unsigned long long>(T));
  EXPECT_GT(e, 0.0) << "the int8 path did not run";
  EXPECT_LE(e, kI8Nmse);

  dsv41_options d = opts(true, false);
  d.matmul_act = act_precision::i8;
  auto md = dsv41_model::open(q4, d);
  dsv41_state st = md->new_state();
  const auto whole = md->forward(ids, st, dsv41_logits::all);
  for (uint64_t first : {uint64_t(37), uint64_t(1)}) {
    dsv41_state s2 = md->new_state();
    auto got = md->forward(std::span<const uint32_t>(ids.data(), first), s2, dsv41_logits::all);
    for (uint64_t t = first; t < T; ++t) {
      const auto one = md->forward(std::span<const uint32_t>(ids.data() + t, 1), s2, dsv41_logits::last);
      got.insert(got.end(), one.begin(), one.end());
    }
    const rel_stats sd = compare(got, whole, T, V);
    std::printf("i8, prefill %llu + decode: max rel %.3g\n", static_cast<unsigned long long>(first), sd.max_rel);
    EXPECT_LE(sd.max_rel, kDecodeMaxRel);
    EXPECT_EQ(sd.argmax_diff, 0u);
  }
  dsv41_state s3 = md->new_state();
  std::vector<float> got;
  const uint64_t sizes[] = {5, 3, 20, 1, 2, 100, 13, 16};
  for (uint64_t b = 0, i = 0; b < T; ++i) {
    const uint64_t e2 = std::min(T, b + sizes[i % 8]);
    const auto part = md->forward(std::span<const uint32_t>(ids.data() + b, e2 - b), s3, dsv41_logits::all);
    got.insert(got.end(), part.begin(), part.end());
    b = e2;
  }
  EXPECT_LE(compare(got, whole, T, V).max_rel, kDecodeMaxRel);
  dsv41_options d3 = d;
  d3.threads = 3;
  EXPECT_EQ(run(d3, ids), whole);
}
