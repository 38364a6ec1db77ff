// Weight bytes per decode step of the CPU graphs (token_bytes.hpp). Which matrices a layer reads follows the
// uploads of dsv4_gpu_weights.cpp and dsv41_gpu_weights.cpp, whose totals the GPU graphs report.
#include "token_bytes.hpp"

namespace cmfx::driver {

namespace {

uint64_t bytes(const matrix_view& v) { return v.data_bytes + v.scale_bytes; }
uint64_t bytes(const dsv4_matrix& m) { return bytes(m.v); }
uint64_t bytes(const expert_view& e) { return bytes(e.gate) + bytes(e.up) + bytes(e.down); }

/// top_k routed experts (all of a layer's are the same shape and formats) and the shared one.
uint64_t moe_bytes(const std::vector<expert_view>& experts, const expert_view& shared, uint32_t top_k) {
  return (experts.empty() ? 0 : bytes(experts.front()) * top_k) + bytes(shared);
}

}  // namespace

token_bytes dsv4_token_bytes(const dsv4_weights& w) {
  token_bytes n;
  n.head = bytes(w.head);
  for (const dsv4_layer_w& L : w.layers) {
    n.dense += bytes(L.wq_a) + bytes(L.wq_b) + bytes(L.wkv) + bytes(L.wo_a) + bytes(L.wo_b);
    n.router += bytes(L.gate);
    if (L.kind.ratio) n.dense += bytes(L.comp.wkv) + bytes(L.comp.wgate);
    if (L.kind.indexer)
      n.dense += bytes(L.ix_comp.wkv) + bytes(L.ix_comp.wgate) + bytes(L.ix_wq_b) + bytes(L.ix_weights_proj);
    n.experts += moe_bytes(L.experts, L.shared, w.cfg.top_k);
  }
  return n;
}

token_bytes dsv41_token_bytes(const dsv41_weights& w) {
  token_bytes n;
  n.head = bytes(w.head);
  for (size_t l = 0; l < w.layers.size(); ++l) {
    const dsv41_layer_w& L = w.layers[l];
    const dsv41_layer_plan& P = w.cfg.plan.at(l);
    n.dense += bytes(L.wq_a) + bytes(L.wq_b) + bytes(L.wkv) + bytes(L.wo_a) + bytes(L.wo_b);
    n.router += bytes(L.gate);
    if (P.mode == dsv41_mode::full)
      n.dense += bytes(L.comp_wkv) + (P.ratio > 1 ? bytes(L.comp_wgate) : 0) + bytes(L.ix_wk);
    if (P.mode == dsv41_mode::full || P.mode == dsv41_mode::reindex) n.dense += bytes(L.ix_wq_b) + bytes(L.ix_weights_proj);
    if (P.engram >= 0) n.dense += bytes(L.eg_wkv);
    n.experts += moe_bytes(L.experts, L.shared, w.cfg.top_k);
  }
  return n;
}

}  // namespace cmfx::driver
