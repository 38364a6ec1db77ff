#include "dsv4_state.hpp"

#include <algorithm>
#include <limits>
#include <stdexcept>
#include <string>

#include "cmfx/core/error.hpp"

namespace cmfx::driver {

namespace {

dsv4_comp_state make_comp(uint32_t ratio, uint32_t width) {
  dsv4_comp_state s;
  s.ratio = ratio;
  s.width = width;
  const uint32_t coff = ratio == 4 ? 2 : 1;
  s.cw = coff * width;
  s.cap = coff * ratio + dsv4_rollback_tokens;  // the closing window and, with overlap, the one before it
  s.kv.assign(size_t(s.cap) * s.cw, 0.0f);
  s.score.assign(size_t(s.cap) * s.cw, -std::numeric_limits<float>::infinity());
  return s;
}

}  // namespace

dsv4_state_size dsv4_state_bytes(const dsv4_config& c, uint64_t ctx) {
  dsv4_state_size z;
  const uint64_t f = sizeof(float);
  for (uint32_t i = 0; i < c.layers && i < c.kinds.size(); ++i) {
    const dsv4_layer_kind& k = c.kinds[i];
    z.ring_bytes += uint64_t(c.window + dsv4_rollback_tokens) * c.head_dim * f;
    auto comp = [&](uint32_t ratio, uint32_t width, uint64_t* entries) {
      const uint32_t coff = ratio == 4 ? 2 : 1;
      z.comp_window_bytes += 2 * uint64_t(coff * ratio + dsv4_rollback_tokens) * coff * width * f;
      *entries += ctx / ratio * width * f;
    };
    if (k.ratio) comp(k.ratio, c.head_dim, &z.kv_entry_bytes);
    if (k.indexer) comp(4, c.index_head_dim, &z.index_entry_bytes);
  }
  return z;
}

dsv4_state::dsv4_state(const dsv4_config& c) {
  if (c.kinds.size() != c.layers) throw std::logic_error("dsv4_state: config has no layer kinds (bind the weights first)");
  ring_cap_ = c.window + dsv4_rollback_tokens;
  head_dim_ = c.head_dim;
  layers_.resize(c.layers);
  for (uint32_t i = 0; i < c.layers; ++i) {
    dsv4_layer_state& L = layers_[i];
    L.ring.assign(size_t(ring_cap_) * head_dim_, 0.0f);
    const dsv4_layer_kind& k = c.kinds[i];
    if (k.ratio) L.comp = make_comp(k.ratio, c.head_dim);
    if (k.indexer) L.ix = make_comp(4, c.index_head_dim);
  }
}

void dsv4_state::reset() {
  pos_ = 0;
  for (auto& L : layers_) {
    std::fill(L.ring.begin(), L.ring.end(), 0.0f);
    for (dsv4_comp_state* s : {&L.comp, &L.ix}) {
      std::fill(s->kv.begin(), s->kv.end(), 0.0f);
      std::fill(s->score.begin(), s->score.end(), -std::numeric_limits<float>::infinity());
      s->entries.clear();
    }
  }
}

void dsv4_state::truncate(uint64_t n) {
  if (n == 0) return reset();
  if (n > pos_) throw usage_error("state truncate to " + std::to_string(n) + ": beyond the current position " + std::to_string(pos_));
  if (pos_ - n > dsv4_rollback_tokens)
    throw usage_error("state truncate to " + std::to_string(n) + " from " + std::to_string(pos_) + ": more than " +
                      std::to_string(dsv4_rollback_tokens) + " positions back (prefill again instead)");
  // Rings still hold every position >= n - capacity + margin; only the finished entries need cutting.
  for (auto& L : layers_)
    for (dsv4_comp_state* s : {&L.comp, &L.ix})
      if (s->ratio) s->entries.resize(size_t(n / s->ratio) * s->width);
  pos_ = n;
}

}  // namespace cmfx::driver
