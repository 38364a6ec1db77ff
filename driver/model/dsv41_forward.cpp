#include "dsv41_forward.hpp"
#include "model_common.hpp"

#include <algorithm>
#include <cmath>
#include <optional>
#include <span>
#include <stdexcept>
#include <string>
#include <utility>

#include "cmfx/core/error.hpp"
#include "cmfx/formats/format_list.hpp"
#include "cmfx/ops/fake_quant.hpp"
#include "cmfx/ops/mhc.hpp"
#include "cmfx/ops/mhc_pool.hpp"
#include "cmfx/ops/rmsnorm.hpp"
#include "cmfx/ops/routing.hpp"
#include "dsv41_internal.hpp"

namespace cmfx::driver {

rope_config dsv41_rope_config(const dsv41_config& c, bool compressed) {
  rope_config r;
  r.dim = c.rope_dim;
  r.base = compressed ? c.compress_rope_theta : c.rope_theta;
  r.yarn = compressed;  // YaRN on every ratio > 0 layer, off on sliding-window layers (spec §3.3)
  r.factor = c.yarn_factor;
  r.original = c.yarn_original;
  r.beta_fast = c.yarn_beta_fast;
  r.beta_slow = c.yarn_beta_slow;
  return r;
}

int dsv41_decode_publisher(const dsv41_config& c, uint64_t t) {
  for (int l = int(c.layers) - 1; l >= 0; --l) {
    const dsv41_layer_plan& p = c.plan[size_t(l)];
    if (p.mode == dsv41_mode::full && (t + 1) % p.ratio == 0) return l;
  }
  return -1;
}

int dsv41_prefill_publisher(const dsv41_config& c, uint64_t len) {
  for (int l = int(c.layers) - 1; l >= 0; --l) {
    const dsv41_layer_plan& p = c.plan[size_t(l)];
    if (p.mode == dsv41_mode::full && len >= p.ratio) return l;
  }
  return -1;
}

int dsv41_keys_layer(const dsv41_config& cf, bool stale, uint32_t l, uint64_t t, bool prefill, int prev_owner) {
  const dsv41_layer_plan& p = cf.plan[l];
  if (!stale || prefill) return p.keys_from;  // prefill: every source publishes
  if (p.mode == dsv41_mode::full && (t + 1) % p.ratio == 0) return int(l);  // publishes its own keys first
  for (int k = int(l) - 1; k >= 0; --k) {  // the last publisher earlier in this step
    const dsv41_layer_plan& q = cf.plan[size_t(k)];
    if (q.mode == dsv41_mode::full && (t + 1) % q.ratio == 0) return k;
  }
  return prev_owner >= 0 ? prev_owner : p.keys_from;  // the previous call's last publisher
}

dsv41_engram dsv41_make_engram(const dsv41_weights& w) {
  const dsv41_config& cf = w.cfg;
  dsv41_engram eg;
  if (cf.engram_layers.empty()) return eg;
  eg.cfg = dsv41_engram_config(cf);
  try {
    eg.layout = engram_layout(eg.cfg);
  } catch (const std::invalid_argument& e) {
    throw usage_error(std::string("V4.1 config: ") + e.what());
  }
  eg.map = dsv41_engram_token_map(cf, eg.cfg, w.engram_map);
  for (size_t e = 0; e < cf.engram_layers.size(); ++e) {
    const uint32_t l = cf.engram_layers[e];
    const dsv41_layer_w& L = w.layers[l];
    const engram_layer_hash& H = eg.layout.layer(e);
    if (L.eg_table_fp8.data) {
      try {
        engram_check_table(L.eg_table_fp8, H, eg.cfg);
      } catch (const std::invalid_argument& x) {
        throw usage_error(x.what());
      }
    } else if (L.eg_embed.rows() != H.rows) {
      throw usage_error("Engram table of layer " + std::to_string(l) + " has " + std::to_string(L.eg_embed.rows()) +
                        " rows; the hash layout needs " + std::to_string(H.rows));
    }
    eg.qk.push_back(engram_qk(L.eg_q_weight, L.eg_k_weight));
  }
  return eg;
}

dsv41_model::impl::impl(dsv41_weights weights, const dsv41_options& o)
    : w(std::move(weights)),
      opt(o),
      pool(o.threads),
      kern(best_cpu_kernels()),
      rope_swa(dsv41_rope_config(w.cfg, false)),
      rope_comp(dsv41_rope_config(w.cfg, true)),
      engram(dsv41_make_engram(w)),
      act(pool.size()),
      ix_scratch(pool.size(), w.cfg.index_head_dim),
      scr(pool.size()) {
  const dsv41_config& cf = w.cfg;
  if (opt.qat_kv && (cf.head_dim % dsv41_kv_fp4_block || cf.head_dim % dsv41_act_block ||
                     (cf.index_head_dim && cf.index_head_dim % dsv41_index_fp4_block)))
    throw usage_error("V4.1 KV quantisation needs head dims divisible by 32");
}

void dsv41_model::impl::linear(const dsv4_matrix& m, const float* X, uint64_t n, float* Y) {
  if (opt.qat_act && m.qat_input) {
    qat_buf.assign(X, X + n * m.cols());
    for (uint64_t i = 0; i < n; ++i)
      act_quant_e4m3(std::span<float>(qat_buf.data() + i * m.cols(), m.cols()), dsv41_act_block);
    X = qat_buf.data();
  }
  cpu_phase_scope ph(prof, cpu_phase::dense);
  gemm(pool, kern, m.fmt, m.v, X, n, Y, opt.matmul_act, act.whole);
}

void dsv41_model::impl::moe_ffn(uint32_t l, const float* u, uint64_t n, float* out, dsv41_trace* trace) {
  const dsv41_config& cf = c();
  const dsv41_layer_w& L = w.layers[l];
  const uint32_t E = cf.experts, K = cf.top_k;
  std::optional<cpu_phase_scope> router(std::in_place, prof, cpu_phase::router);
  // scratch (scr): the router writes every logit, the routing every id, weight, score and entry it reads
  const std::span<float> logits = grown(scr.logits, n * E);
  gemm(pool, kern, L.gate.fmt, L.gate.v, u, n, logits.data());  // router in f32, no act-quant
  const std::span<uint32_t> idx = grown(scr.idx, n * K);
  const std::span<float> wts = grown(scr.wts, n * K), s = grown(scr.s, E);
  const std::span<topk_entry> scratch = grown(scr.route, E);
  std::vector<float> biased(trace ? E : 0);  // traced only
  route_config rc;
  rc.top_k = K;
  rc.route_scale = float(cf.route_scale);
  rc.norm_eps = float(dsv41_route_norm_eps);
  rc.temp = float(cf.gate_temp);
  for (uint64_t i = 0; i < n; ++i) {
    std::span<uint32_t> id(idx.data() + i * K, K);
    route_score(std::span<const float>(logits.data() + i * E, E), L.gate_bias.data(), rc, s, scratch, id,
                std::span<float>(wts.data() + i * K, K));
    if (trace) {
      std::vector<uint32_t> sorted(id.begin(), id.end());
      std::sort(sorted.begin(), sorted.end());
      trace->experts[l].push_back(std::move(sorted));
      trace->experts_margin[l].push_back(float(route_score_margin(s, L.gate_bias.data(), K, biased, scratch)));
    }
  }
  router.reset();
  cpu_phase_scope experts(prof, cpu_phase::experts);
  const float* x = u;
  std::vector<float>& xq = scr.xq;  // assign keeps its capacity
  if (opt.qat_act) {
    xq.assign(u, u + n * cf.dim);
    for (uint64_t i = 0; i < n; ++i) act_quant_e4m3(std::span<float>(xq.data() + i * cf.dim, cf.dim), dsv41_act_block);
    x = xq.data();
  }
  moe_forward(pool, kern, L.experts, &L.shared, x, n, cf.dim, idx.data(), wts.data(), K, float(cf.swiglu_limit), out, moe,
              opt.matmul_act);
}

void dsv41_model::impl::engram_add(uint32_t l, float* X, uint64_t n, const dsv41_token_ctx& tc) {
  // include/cmfx/model/engram.hpp step by step: row ids from the n-gram history, the table rows (the release's FP8
  // rows decoded in place by engram_gather; a CMF table through its format's row decoder, then the same bf16 cast
  // the official code applies), kv = wkv·E on the graph's GEMM (with qat_act like every FP8 Linear), gated add.
  const dsv41_config& cf = c();
  const dsv41_layer_w& L = w.layers[l];
  const size_t e = size_t(cf.plan[l].engram);
  const engram_config& ec = engram.cfg;
  const uint64_t cols = ec.cols(), edim = ec.embed_dim(), d = cf.dim, hc = cf.hc;
  cpu_phase_scope ph(prof, cpu_phase::engram);
  // E, kv and the workers' rows: scratch (scr), every value written before it is read
  const std::span<float> E = grown(scr.eg_e, n * edim);
  pool.run(n, [&](uint64_t b, uint64_t en, unsigned wk) {
    const std::span<int64_t> rows = grown(scr.wk[wk].rows, cols);
    for (uint64_t i = b; i < en; ++i) dsv41_engram_token_rows(engram, e, L, tc.st[i]->cids(), tc.pos[i], rows, E.data() + i * edim);
  });
  const std::span<float> kv = grown(scr.eg_kv, n * ec.kv_dim());
  linear(L.eg_wkv, E.data(), n, kv.data());
  pool.run(n, [&](uint64_t b, uint64_t en, unsigned) {
    for (uint64_t i = b; i < en; ++i) {
      const float* kvi = kv.data() + i * ec.kv_dim();
      engram_gate_add(X + i * hc * d, kvi, kvi + hc * d, engram.qk[e].data(), uint32_t(hc), uint32_t(d), ec.eps,
                      ec.gate_clamp, false);
    }
  });
}

int dsv41_model::impl::keys_layer(uint32_t l, uint64_t i, const dsv41_token_ctx& tc) const {
  return dsv41_keys_layer(c(), opt.stale_index_k, l, tc.pos[i], tc.prefill[i] != 0, tc.prev_owner[i]);
}

dsv41_model::dsv41_model(dsv41_weights w, const dsv41_options& o) : p_(std::make_unique<impl>(std::move(w), o)) {}
dsv41_model::~dsv41_model() = default;

std::unique_ptr<dsv41_model> dsv41_model::open(const std::string& path, const dsv41_options& o) {
  return std::make_unique<dsv41_model>(dsv41_load(path), o);
}

const dsv41_config& dsv41_model::config() const noexcept { return p_->w.cfg; }
const dsv41_weights& dsv41_model::weights() const noexcept { return p_->w; }
const dsv41_options& dsv41_model::options() const noexcept { return p_->opt; }
void dsv41_model::set_profile(cpu_profile* p) noexcept { p_->prof = p; }

std::vector<float> dsv41_model::forward(std::span<const uint32_t> ids, dsv41_state& st, dsv41_logits want,
                                        dsv41_trace* trace) {
  const dsv41_segment seg{&st, 0, ids.size()};
  return forward_batch(ids, std::span<const dsv41_segment>(&seg, 1), want, trace);
}

std::vector<float> dsv41_model::forward_batch(std::span<const uint32_t> ids, std::span<const dsv41_segment> segs,
                                              dsv41_logits want, dsv41_trace* trace) {
  impl& m = *p_;
  // With the official stale-index-key behaviour a decode token may score against index keys a LATER layer published
  // on the previous step; inside a multi-token chunk those rows would not exist yet when the earlier layer runs, so
  // a chunk that is not all prefill positions (dsv41_state::prefill_end) runs its prefill part as one pass, then one
  // token per pass (exactly the official one-token decode steps).
  auto prefill_part = [](const dsv41_segment& s) { return s.st->prefill().call_rows(s.st->pos(), s.count); };
  bool split = false;
  if (m.opt.stale_index_k)
    for (const dsv41_segment& s : segs)
      if (s.st && s.count > 1 && prefill_part(s) < s.count) split = true;
  if (!split) return m.run(ids, segs, want, trace);
  std::vector<float> out;
  for (const dsv41_segment& s : segs) {
    if (!s.st || s.first + s.count > ids.size()) throw usage_error("dsv4.1 forward: bad segment");
    const uint64_t pre = prefill_part(s);
    for (uint64_t b = 0; b < s.count;) {
      const uint64_t cnt = b == 0 && pre > 0 ? pre : 1;
      const dsv41_segment one{s.st, 0, cnt};
      const bool last_part = b + cnt == s.count;
      const dsv41_logits w = want == dsv41_logits::all ? dsv41_logits::all
                             : (want == dsv41_logits::last && last_part) ? dsv41_logits::last
                                                                          : dsv41_logits::none;
      const auto part = m.run(ids.subspan(s.first + b, cnt), std::span<const dsv41_segment>(&one, 1), w, trace);
      out.insert(out.end(), part.begin(), part.end());
      b += cnt;
    }
  }
  return out;
}

std::vector<float> dsv41_model::impl::run(std::span<const uint32_t> ids, std::span<const dsv41_segment> segs,
                                          dsv41_logits want, dsv41_trace* trace) {
  const dsv41_config& cf = c();
  const uint64_t n = ids.size(), d = cf.dim, hc = cf.hc, hd_ = hc * d;
  if (n == 0) return {};
  // The buffers of this call are the model's scratch (scr, only growing); every value read is written first in this
  // call unless it is filled here.
  dsv41_token_ctx& tc = scr.tc;
  tc.st.resize(n);
  tc.pos.resize(n);
  tc.first.resize(n);
  tc.p0.resize(n);
  tc.prefill.resize(n);
  tc.prev_owner.resize(n);
  // Every segment and token is checked before any state changes (a refused chunk leaves all states as they were).
  check_segments(ids, segs, cf.layers, cf.head_dim, cf.vocab, "dsv4.1 forward");
  for (const dsv41_segment& sg : segs)
    if (sg.st->packed() != (opt.qat_kv && opt.packed_kv))
      throw usage_error(std::string("dsv4.1 forward: the state stores ") + (sg.st->packed() ? "packed" : "f32") +
                        " KV rows, the model's options want " + (opt.qat_kv && opt.packed_kv ? "packed" : "f32") +
                        " (make states with new_state())");
  for (size_t k = 0; k < segs.size(); ++k) {
    const dsv41_segment& sg = segs[k];
    dsv41_state& st = *sg.st;
    const uint64_t p0 = st.pos();
    st.mark_call(sg.count);  // a chunk at position 0 is (at least) a prefill
    // Prefill positions: every source publishes, the shared runtime's owner is the whole prefill's last publisher.
    // Decode positions (forward_batch runs them one per pass): the official one-token step's publisher.
    const int prefill_pub = dsv41_prefill_publisher(cf, st.prefill_end());
    int prev = st.last_ik_owner();
    for (uint64_t i = sg.first; i < sg.first + sg.count; ++i) {
      tc.st[i] = &st;
      tc.pos[i] = p0 + (i - sg.first);
      tc.first[i] = sg.first;
      tc.p0[i] = p0;
      tc.prefill[i] = st.prefill().covers(tc.pos[i]);
      tc.prev_owner[i] = prev;
      const int pub = tc.prefill[i] ? prefill_pub : dsv41_decode_publisher(cf, tc.pos[i]);
      if (pub >= 0) prev = pub;
      st.ik_owner().push_back(int16_t(prev));
    }
    if (!cf.engram_layers.empty())
      for (uint64_t i = sg.first; i < sg.first + sg.count; ++i) st.cids().push_back(uint32_t(engram.map(ids[i])));
  }
  if (trace) {
    trace->topk.resize(cf.layers);
    trace->experts.resize(cf.layers);
    trace->experts_margin.resize(cf.layers);
    trace->keys_from.resize(cf.layers);
    trace->topk_margin.resize(cf.layers);
  }
  // Embedding → hc identical copies; the first pre-mix takes copy 0.
  std::span<float> X = grown(scr.x, n * hd_), Xn = grown(scr.xn, n * hd_);
  std::optional<cpu_phase_scope> embed(std::in_place, prof, cpu_phase::embed);
  visit_format(w.embed.fmt, [&]<class F>() {
    for (uint64_t i = 0; i < n; ++i) {
      float* x0 = X.data() + i * hd_;
      F::decode_row(w.embed.v, ids[i], x0);
      for (uint64_t j = 1; j < hc; ++j) std::copy_n(x0, d, x0 + j * d);
    }
  });
  embed.reset();
  std::span<float> pre_mix = grown_filled(scr.pre, n * hc, 0.0f), next_pre = grown(scr.next_pre, n * hc);
  for (uint64_t i = 0; i < n; ++i) pre_mix[i * hc] = 1.0f;
  const std::span<float> attn_pre = grown(scr.attn_pre, n * hc);
  const std::span<float> u = grown(scr.u, n * d), o = grown(scr.o, n * d), post = grown(scr.post, n * hc),
                         C = grown(scr.C, n * hc * hc);
  const float eps = float(cf.norm_eps), hc_eps = float(cf.hc_eps);
  std::vector<double>& mix_scratch = scr.mix;
  // This sublayer's mixes (pre → next_pre) from X, its input folded with `fold` and normed into u.
  auto mixes = [&](const std::vector<float>& fn, const std::vector<float>& base, const std::vector<float>& scale,
                   std::span<const float> fold, const std::vector<float>& norm_w) {
    cpu_phase_scope ph(prof, cpu_phase::mhc);
    hc_pre_pool(pool, X.data(), n, uint32_t(hc), d, fn, base, scale, eps, hc_eps, cf.hc_iters, next_pre.data(),
                post.data(), C.data(), mix_scratch, [&](uint64_t i) {
                  std::span<float> ui(u.data() + i * d, d);
                  ops_detail::hc_fold(std::span<const float>(X.data() + i * hd_, hd_), fold.data() + i * hc,
                                      uint32_t(hc), d, ui);
                  rmsnorm(ui, norm_w.data(), eps, ui);
                });
  };
  auto apply_post = [&]() {
    cpu_phase_scope ph(prof, cpu_phase::mhc);
    hc_post_pool(pool, o.data(), X.data(), post.data(), C.data(), n, uint32_t(hc), d, Xn.data());
    std::swap(X, Xn);
  };

  dsv41_shared& sh = shared_rt;
  if (sh.picks.size() < cf.layers) sh.picks.resize(cf.layers);
  for (uint32_t l = 0; l < cf.layers; ++l) {
    const dsv41_layer_w& L = w.layers[l];
    if (cf.plan[l].engram >= 0) engram_add(l, X.data(), n, tc);
    mixes(L.hc_attn_fn, L.hc_attn_base, L.hc_attn_scale, pre_mix, L.attn_norm);
    std::copy(next_pre.begin(), next_pre.end(), attn_pre.begin());
    {
      cpu_phase_scope ph(prof, cpu_phase::attention);
      attention(l, u.data(), n, tc, sh, o.data(), trace);
    }
    apply_post();
    mixes(L.hc_ffn_fn, L.hc_ffn_base, L.hc_ffn_scale, attn_pre, L.ffn_norm);
    moe_ffn(l, u.data(), n, o.data(), trace);
    apply_post();
    std::swap(pre_mix, next_pre);  // the FFN's pre feeds the next layer's attention (one-sublayer lag)
  }
  for (const dsv41_segment& sg : segs) sg.st->advance(sg.count);

  if (want == dsv41_logits::none) return {};
  std::vector<uint64_t>& rows_at = scr.rows_at;
  rows_at.clear();
  if (want == dsv41_logits::all)
    for (uint64_t i = 0; i < n; ++i) rows_at.push_back(i);
  else
    for (const dsv41_segment& sg : segs) rows_at.push_back(sg.first + sg.count - 1);
  const uint64_t rows = rows_at.size();
  cpu_phase_scope head(prof, cpu_phase::head);
  const std::span<float> h = grown(scr.h, rows * d);
  pool.run(rows, [&](uint64_t b, uint64_t e, unsigned) {
    for (uint64_t i = b; i < e; ++i) {
      std::span<float> y(h.data() + i * d, d);
      ops_detail::hc_fold(std::span<const float>(X.data() + rows_at[i] * hd_, hd_), pre_mix.data() + rows_at[i] * hc,
                          uint32_t(hc), d, y);
      rmsnorm(y, w.norm.data(), eps, y);
    }
  });
  std::vector<float> logits(rows * cf.vocab);  // returned: the caller's
  gemm(pool, kern, w.head.fmt, w.head.v, h.data(), rows, logits.data(), opt.matmul_act, act.whole);
  return logits;
}

}  // namespace cmfx::driver
