#include "dsv4_forward.hpp"
#include "model_common.hpp"

#include <algorithm>
#include <cmath>
#include <limits>
#include <optional>
#include <span>
#include <stdexcept>
#include <string>
#include <utility>

#include "cmfx/core/error.hpp"
#include "cmfx/ops/fake_quant.hpp"
#include "cmfx/ops/mhc.hpp"
#include "cmfx/ops/mhc_pool.hpp"
#include "cmfx/ops/rmsnorm.hpp"
#include "cmfx/ops/routing.hpp"
#include "dsv4_internal.hpp"

namespace cmfx::driver {

dsv4_model::impl::impl(dsv4_weights weights, const dsv4_options& o)
    : w(std::move(weights)),
      opt(o),
      pool(o.threads),
      kern(best_cpu_kernels()),
      rope_swa(dsv4_rope_config(w.cfg, false)),
      rope_comp(dsv4_rope_config(w.cfg, true)),
      act(pool.size()),
      scr(pool.size()) {
  if (opt.qat_indexer_fp4 && (w.cfg.index_head_dim & (w.cfg.index_head_dim - 1)))
    throw usage_error("QAT indexer FP4 needs a power-of-two index head dim (Hadamard), got " +
                      std::to_string(w.cfg.index_head_dim));
}

void dsv4_model::impl::linear(const dsv4_matrix& m, const float* X, uint64_t n, float* Y) {
  if (opt.qat_act_fp8 && m.qat_input) {
    qat_buf.assign(X, X + n * m.cols());
    for (uint64_t i = 0; i < n; ++i)
      act_quant_e4m3(std::span<float>(qat_buf.data() + i * m.cols(), m.cols()), dsv4_act_fp8_block);
    X = qat_buf.data();
  }
  cpu_phase_scope ph(prof, cpu_phase::dense);
  gemm(pool, kern, m.fmt, m.v, X, n, Y, opt.matmul_act, act.whole);
}

void dsv4_model::impl::moe_ffn(uint32_t layer, const float* u, const uint32_t* ids, uint64_t n, float* out,
                               dsv4_trace* trace) {
  const dsv4_config& cf = c();
  const dsv4_layer_w& L = w.layers[layer];
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
  for (uint64_t i = 0; i < n; ++i) {
    std::span<const float> z(logits.data() + i * E, E);
    std::span<uint32_t> id(idx.data() + i * K, K);
    std::span<float> wt(wts.data() + i * K, K);
    if (L.kind.hash)
      route_hash(z, std::span<const int32_t>(L.tid2eid), ids[i], rc, s, id, wt);
    else
      route_score(z, L.gate_bias.data(), rc, s, scratch, id, wt);
    if (trace) {
      std::vector<uint32_t> sorted(id.begin(), id.end());
      std::sort(sorted.begin(), sorted.end());
      trace->experts[layer].push_back(std::move(sorted));
      trace->experts_margin[layer].push_back(
          L.kind.hash ? std::numeric_limits<float>::infinity() : route_score_margin(s, L.gate_bias.data(), K, biased, scratch));
    }
  }
  router.reset();
  cpu_phase_scope experts(prof, cpu_phase::experts);
  const float* x = u;
  std::vector<float>& xq = scr.xq;  // assign keeps its capacity
  if (opt.qat_act_fp8) {  // the experts' gate/up (and the shared expert's) are FP4/FP8 Linears
    xq.assign(u, u + n * cf.dim);
    for (uint64_t i = 0; i < n; ++i) act_quant_e4m3(std::span<float>(xq.data() + i * cf.dim, cf.dim), dsv4_act_fp8_block);
    x = xq.data();
  }
  moe_forward(pool, kern, L.experts, &L.shared, x, n, cf.dim, idx.data(), wts.data(), K, float(cf.swiglu_limit), out, moe,
              opt.matmul_act);
}

dsv4_model::dsv4_model(dsv4_weights w, const dsv4_options& o) : p_(std::make_unique<impl>(std::move(w), o)) {}
dsv4_model::~dsv4_model() = default;

std::unique_ptr<dsv4_model> dsv4_model::open(const std::string& path, const dsv4_options& o) {
  return std::make_unique<dsv4_model>(dsv4_load(path), o);
}

const dsv4_config& dsv4_model::config() const noexcept { return p_->w.cfg; }
const dsv4_weights& dsv4_model::weights() const noexcept { return p_->w; }

std::vector<float> dsv4_model::forward(std::span<const uint32_t> ids, dsv4_state& st, dsv4_logits want,
                                       dsv4_trace* trace) {
  const dsv4_segment seg{&st, 0, ids.size()};
  return forward_batch(ids, std::span<const dsv4_segment>(&seg, 1), want, trace);
}

thread_pool& dsv4_model::pool() noexcept { return p_->pool; }

void dsv4_model::set_profile(cpu_profile* p) noexcept { p_->prof = p; }

std::vector<float> dsv4_model::forward_batch(std::span<const uint32_t> ids, std::span<const dsv4_segment> segs,
                                             dsv4_logits want, dsv4_trace* trace) {
  impl& m = *p_;
  const dsv4_config& cf = m.c();
  const uint64_t n = ids.size(), d = cf.dim, hc = cf.hc, hd_ = hc * d;
  if (n == 0) return {};
  // Per-token sequence context; segments must tile the chunk in order, one per state. The buffers of this call are
  // the model's scratch (m.scr, only growing); every value read is written first in this call.
  dsv4_scratch& sc = m.scr;
  dsv4_token_ctx& tc = sc.tc;
  tc.st.resize(n);
  tc.pos.resize(n);
  tc.first.resize(n);
  tc.p0.resize(n);
  check_segments(ids, segs, cf.layers, cf.head_dim, cf.vocab, "dsv4 forward");
  for (const dsv4_segment& sg : segs)
    for (uint64_t i = sg.first; i < sg.first + sg.count; ++i) {
      tc.st[i] = sg.st;
      tc.pos[i] = sg.st->pos() + (i - sg.first);
      tc.first[i] = sg.first;
      tc.p0[i] = sg.st->pos();
    }
  if (trace) {
    trace->topk.resize(cf.layers);
    trace->experts.resize(cf.layers);
    trace->experts_margin.resize(cf.layers);
    trace->topk_margin.resize(cf.layers);
  }
  // Embedding → hc identical copies.
  std::span<float> X = grown(sc.x, n * hd_), Xn = grown(sc.xn, n * hd_);
  std::optional<cpu_phase_scope> embed(std::in_place, m.prof, cpu_phase::embed);
  visit_format(m.w.embed.fmt, [&]<class F>() {
    for (uint64_t i = 0; i < n; ++i) {
      float* x0 = X.data() + i * hd_;
      F::decode_row(m.w.embed.v, ids[i], x0);
      for (uint64_t j = 1; j < hc; ++j) std::copy_n(x0, d, x0 + j * d);
    }
  });

  embed.reset();
  const std::span<float> u = grown(sc.u, n * d), o = grown(sc.o, n * d);
  const std::span<float> post_c = grown(sc.post, n * hc), C = grown(sc.C, n * hc * hc);  // mHC coefficients per token
  const float eps = float(cf.norm_eps), hc_eps = float(cf.hc_eps);
  const std::span<float> prew = grown(sc.prew, n * hc);
  std::vector<double>& mix_scratch = sc.mix;
  // hc_pre + RMSNorm for every token of the chunk → u (ops/mhc_pool.hpp: bit-identical to hc_pre per token).
  auto pre = [&](const std::vector<float>& fn, const std::vector<float>& base, const std::vector<float>& scale,
                 const std::vector<float>& norm_w) {
    cpu_phase_scope ph(m.prof, cpu_phase::mhc);
    hc_pre_pool(m.pool, X.data(), n, uint32_t(hc), d, fn, base, scale, eps, hc_eps, cf.hc_iters, prew.data(),
                post_c.data(), C.data(), mix_scratch, [&](uint64_t i) {
                  std::span<float> y(u.data() + i * d, d);
                  ops_detail::hc_fold(std::span<const float>(X.data() + i * hd_, hd_), prew.data() + i * hc,
                                      uint32_t(hc), d, y);
                  rmsnorm(y, norm_w.data(), eps, y);
                });
  };
  auto post = [&]() {
    cpu_phase_scope ph(m.prof, cpu_phase::mhc);
    hc_post_pool(m.pool, o.data(), X.data(), post_c.data(), C.data(), n, uint32_t(hc), d, Xn.data());
    std::swap(X, Xn);
  };

  for (uint32_t l = 0; l < cf.layers; ++l) {
    const dsv4_layer_w& L = m.w.layers[l];
    pre(L.hc_attn_fn, L.hc_attn_base, L.hc_attn_scale, L.attn_norm);
    {
      cpu_phase_scope ph(m.prof, cpu_phase::attention);
      m.attention(l, u.data(), n, tc, o.data(), trace);
    }
    post();
    pre(L.hc_ffn_fn, L.hc_ffn_base, L.hc_ffn_scale, L.ffn_norm);
    m.moe_ffn(l, u.data(), ids.data(), n, o.data(), trace);
    post();
  }
  for (const dsv4_segment& sg : segs) sg.st->advance(sg.count);

  if (want == dsv4_logits::none) return {};
  // Rows whose logits are wanted: every token, or the last token of each segment.
  std::vector<uint64_t>& rows_at = sc.rows_at;
  rows_at.clear();
  if (want == dsv4_logits::all)
    for (uint64_t i = 0; i < n; ++i) rows_at.push_back(i);
  else
    for (const dsv4_segment& sg : segs) rows_at.push_back(sg.first + sg.count - 1);
  const uint64_t rows = rows_at.size();
  cpu_phase_scope head(m.prof, cpu_phase::head);
  const std::span<float> h = grown(sc.h, rows * d);
  m.pool.run(rows, [&](uint64_t b, uint64_t e, unsigned wk) {
    const std::span<float> head_pre = grown(sc.wk[wk].head_pre, hc);  // hc_head writes it whole
    for (uint64_t i = b; i < e; ++i) {
      std::span<float> y(h.data() + i * d, d);
      hc_head(std::span<const float>(X.data() + rows_at[i] * hd_, hd_), m.w.hc_head_fn, m.w.hc_head_base,
              m.w.hc_head_scale, uint32_t(hc), eps, hc_eps, head_pre, y);
      rmsnorm(y, m.w.norm.data(), eps, y);
    }
  });
  std::vector<float> logits(rows * cf.vocab);  // returned: the caller's
  gemm(m.pool, m.kern, m.w.head.fmt, m.w.head.v, h.data(), rows, logits.data(), m.opt.matmul_act, m.act.whole);
  return logits;
}

}  // namespace cmfx::driver
