// Host side of the routing kernels (shaders/route.comp): score routing (sqrt-softplus, biased top-k, normalised
// weights) and hash routing, one dispatch for all tokens; the hash table's checked upload.
#include <cmath>

#include "kernels_ops.hpp"

namespace cmfx::gpu {

namespace {

template <class T>
buffer upload_table(device& dev, std::span<const T> t, uint32_t top_k, uint32_t experts) {
  if (top_k == 0 || t.empty() || t.size() % top_k)
    throw usage_error("upload_tid2eid: table size " + std::to_string(t.size()) + " is not V * top_k (top_k " +
                      std::to_string(top_k) + ")");
  std::vector<uint32_t> ids(t.size());
  for (size_t i = 0; i < t.size(); ++i) {
    const T v = t[i];
    bool ok;
    if constexpr (std::is_same_v<T, float>)
      ok = v >= 0.0f && v < float(experts) && v == std::floor(v);
    else
      ok = v >= 0 && uint64_t(v) < experts;
    if (!ok)
      throw usage_error("upload_tid2eid: entry " + std::to_string(i) + " (token " + std::to_string(i / top_k) +
                        ", slot " + std::to_string(i % top_k) + ") = " + std::to_string(v) + " is not an expert id < " +
                        std::to_string(experts));
    ids[i] = uint32_t(v);
  }
  buffer b = dev.alloc(ids.size() * 4);
  dev.upload(b, ids);
  return b;
}

}  // namespace

buffer upload_tid2eid(device& dev, std::span<const int32_t> t, uint32_t top_k, uint32_t experts) {
  return upload_table(dev, t, top_k, experts);
}
buffer upload_tid2eid(device& dev, std::span<const float> t, uint32_t top_k, uint32_t experts) {
  return upload_table(dev, t, top_k, experts);
}

namespace {

struct route_pc {
  uint32_t rows, n, k, loff, boff, has_bias, soff, has_s, ioff, woff, toff, vocab;
  float temp, route_scale, norm_eps;
  uint32_t taboff;
};
static_assert(sizeof(route_pc) == 64);

/// The router's rows per workgroup in the fused mode (route.comp ROUTE_FUSED): 2, a row's invocations half of the
/// workgroup, each loading up to 16 vec4 of its row (d ≤ 16 · 4 · 128 on 256 invocations).
constexpr uint32_t fused_rows_per_wg = 2, fused_max_loads = 16;

/// gate (with x): kernels::router_route — the logits computed in the same dispatch (rows = 1); false, recording
/// nothing, where that mode does not apply.
bool route(detail::op_env e, commands& c, bool hash, view logits, view bias, view table, uint64_t vocab, view tokens,
           uint32_t rows, uint32_t n, const route_config& cfg, view s, view idx, view w,
           const gpu_matrix* gate = nullptr, view x = {}) {
  const char* op = gate ? "router_route" : hash ? "route_hash" : "route_score";
  if (n == 0 || n > kernels::route_max_experts)
    throw usage_error(std::string(op) + ": expert count must be in [1, " + std::to_string(kernels::route_max_experts) +
                      "]");
  if (cfg.top_k == 0 || cfg.top_k > n || cfg.top_k > kernels::route_max_k)
    throw usage_error(std::string(op) + ": top_k must be in [1, min(experts, " + std::to_string(kernels::route_max_k) +
                      ")]");
  if (!(cfg.temp > 0.0f) || !std::isfinite(cfg.temp)) throw usage_error(std::string(op) + ": temp must be > 0");
  if (rows == 0) return true;
  const uint32_t rpw = fused_rows_per_wg, T = detail::op_env::wg / rpw;  // fused: a row's invocations
  if (gate) {
    if (rows != 1) throw usage_error("router_route: one token");
    if (gate->rows != n) throw usage_error("router_route: the router has " + std::to_string(gate->rows) + " rows, not " +
                                          std::to_string(n));
    detail::need_view(x, gate->cols * 4, op, "x");
    const uint32_t sgs = e.info.subgroup_arithmetic ? std::max<uint32_t>(e.lanes, 1) : 1;
    const bool fmt_ok = gate->fmt == format::f32 || gate->fmt == format::bf16;
    if (!fmt_ok || gate->cols % 4 || T % sgs || (gate->cols / 4 + T - 1) / T > fused_max_loads) return false;
  }
  const uint64_t nb = uint64_t(rows) * n * 4, kb = uint64_t(rows) * cfg.top_k * 4;
  detail::need_view(logits, nb, op, "logits");
  if (bias) detail::need_view(bias, uint64_t(n) * 4, op, "bias");
  if (s) detail::need_view(s, nb, op, "s");
  detail::need_view(idx, kb, op, "idx");
  detail::need_view(w, kb, op, "w");
  if (hash) {
    if (vocab == 0 || vocab > 0xFFFFFFFFull) throw usage_error("route_hash: vocabulary size out of range");
    detail::need_view(table, vocab * cfg.top_k * 4, op, "tid2eid");
    detail::need_view(tokens, uint64_t(rows) * 4, op, "tokens");
  }
  const detail::bound lb = e.bind(logits, nb), bb = e.bind(bias, uint64_t(n) * 4), sb = e.bind(s, nb),
                      ib = e.bind(idx, kb), wb = e.bind(w, kb),
                      tb = e.bind(hash ? table : view(), vocab * cfg.top_k * 4),
                      kb2 = e.bind(hash ? tokens : view(), uint64_t(rows) * 4);
  route_pc pc{rows,
              n,
              cfg.top_k,
              lb.residual / 4,
              bb.residual / 4,
              bias ? 1u : 0u,
              sb.residual / 4,
              s ? 1u : 0u,
              ib.residual / 4,
              wb.residual / 4,
              kb2.residual / 4,
              uint32_t(vocab),
              cfg.temp,
              cfg.route_scale,
              cfg.norm_eps,
              tb.residual / 4};
  struct fused_pc {
    route_pc r;
    uint32_t xoff, wtoff, cntoff, d;
  } fpc{pc, 0, 0, 0, 0};
  detail::binding b[10] = {lb.b, bb.b, sb.b, ib.b, wb.b, tb.b, kb2.b};
  // Score mode: the top-k inside one subgroup where n ≤ 32 keys per lane of the smallest subgroup the device may
  // use (256 experts: 8 per lane on the H200)
  const uint32_t min_sg = e.info.min_subgroup_size ? e.info.min_subgroup_size : e.info.subgroup_size;
  const uint32_t per_lane = min_sg ? (n + min_sg - 1) / min_sg : 0;
  const uint32_t sg = !hash && e.info.subgroup_arithmetic && per_lane && per_lane <= 32 ? per_lane : 0;
  std::string defs = detail::def_u("ROUTE_MAX", kernels::route_max_experts) +
                     detail::def_u("ROUTE_MAX_K", kernels::route_max_k) + "#define ROUTE_HASH " +
                     std::string(hash ? "1" : "0") + "\n#define ROUTE_SG " + std::to_string(sg) + "\n";
  uint32_t gx, gy, nbind = 7, pcs = sizeof pc;
  const void* pcp = &pc;
  if (gate) {
    const uint64_t d = gate->cols;
    const uint32_t eb = gate->fmt == format::bf16 ? 2 : 4;  // bytes per weight
    const detail::bound gb = e.bind(view(gate->data, 0, uint64_t(n) * d * eb), uint64_t(n) * d * eb),
                        xb = e.bind(x, d * 4),
                        cb = detail::bind_range(e.info, *e.counters, 0, detail::op_env::counter_slots * 4ull);
    if (gb.residual % (4 * eb) || xb.residual % 16) return false;
    b[7] = gb.b, b[8] = xb.b, b[9] = cb.b;
    nbind = 10, pcs = sizeof fpc, pcp = &fpc;
    fpc.xoff = xb.residual / 4, fpc.wtoff = gb.residual / (4 * eb), fpc.cntoff = e.take_counters(1);
    fpc.d = uint32_t(d);
    defs += "#define ROUTE_FUSED 1\n#define RT_BF16 " + std::string(eb == 2 ? "1" : "0") + "\n" +
            detail::def_u("RT_RPW", rpw) + detail::def_u("RT_LOADS", uint32_t((d / 4 + T - 1) / T));
    e.grid((n + rpw - 1) / rpw, gx, gy);
  } else {
    e.grid(rows, gx, gy);
  }
  detail::dispatch(c.impl(), e.pipe("route.comp", defs, detail::op_env::wg, nbind, pcs),
                   std::span<const detail::binding>(b, nbind), pcp, pcs, gx, gy);
  return true;
}

}  // namespace

void kernels::route_score(commands& c, view logits, view bias, uint32_t rows, uint32_t n, const route_config& cfg,
                          view s, view idx, view w) {
  route(detail::op_env_of(*p_), c, false, logits, bias, view(), 0, view(), rows, n, cfg, s, idx, w);
}

void kernels::route_hash(commands& c, view logits, view tid2eid, uint64_t vocab, view tokens, uint32_t rows, uint32_t n,
                         const route_config& cfg, view s, view idx, view w) {
  route(detail::op_env_of(*p_), c, true, logits, view(), tid2eid, vocab, tokens, rows, n, cfg, s, idx, w);
}

bool kernels::router_route(commands& c, const gpu_matrix& gate, view x, view logits, view bias, view tid2eid,
                           uint64_t vocab, view token, const route_config& cfg, view idx, view w, view s) {
  const bool hash = bool(tid2eid);
  return route(detail::op_env_of(*p_), c, hash, logits, hash ? view() : bias, tid2eid, vocab, token, 1,
               uint32_t(gate.rows), cfg, s, idx, w, &gate, x);
}

}  // namespace cmfx::gpu
