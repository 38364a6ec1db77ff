#include "gpu_expert_cache.hpp"

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <thread>

#include "cmfx/core/error.hpp"
#include "cmfx/vk/device.hpp"

namespace cmfx::driver {

namespace {

uint64_t matrix_bytes(const gpu::gpu_matrix& m) { return m.data.size() + (m.scale ? m.scale.size() : 0); }
uint64_t view_bytes(const matrix_view& v) { return v.data_bytes + v.scale_bytes; }
uint64_t expert_bytes(const expert_view& e) { return view_bytes(e.gate) + view_bytes(e.up) + view_bytes(e.down); }

}  // namespace

std::string gpu_expert_cache_line(const gpu_expert_cache_stats& s, uint32_t experts) {
  if (!s.active) return "expert cache: off (every expert resident)";
  char b[256];
  const double t = double(std::max<uint64_t>(s.tokens, 1));
  std::snprintf(b, sizeof b,
                "expert cache: %u of %u slots per layer (%.1f MB each), %llu tokens, hit rate %.1f %%, %.1f MB moved "
                "per token; per token %.2f ms host copies, %.2f ms device copies, %.2f ms waiting on the device",
                s.slots, experts, double(s.slot_bytes) / 1e6, (unsigned long long)s.tokens,
                s.lookups ? 100.0 * double(s.hits) / double(s.lookups) : 0.0, double(s.bytes_moved) / t / 1e6,
                s.move_seconds / t * 1e3, s.copy_device_seconds / t * 1e3, s.wait_seconds / t * 1e3);
  return b;
}

gpu_expert_cache::gpu_expert_cache(gpu::device& dev, uint32_t experts, uint32_t top_k)
    : dev_(dev), experts_(experts), top_k_(top_k) {}

uint64_t gpu_expert_cache::add_layer(const std::vector<expert_view>& experts, const expert_view& shared,
                                     gpu::gpu_moe* moe) {
  if (experts.size() != experts_)
    throw usage_error("gpu model: layer " + std::to_string(layers_.size()) + " has " + std::to_string(experts.size()) +
                      " routed experts, the config " + std::to_string(experts_));
  const expert_view& e0 = experts.at(0);
  moe->experts = experts_;
  moe->shared = shared.gate_fmt == e0.gate_fmt && shared.up_fmt == e0.up_fmt && shared.down_fmt == e0.down_fmt &&
                shared.gate.rows == e0.gate.rows && shared.gate.cols == e0.gate.cols;
  moe->dim = e0.down.rows, moe->inter = e0.down.cols;
  layer L;
  L.host = experts;
  L.shared = shared;
  L.moe = moe;
  layers_.push_back(std::move(L));
  return expert_bytes(e0) * top_k_ + (moe->shared ? expert_bytes(shared) : 0);
}

gpu::view gpu_expert_cache::slot_map(uint32_t l) const { return stats_.active ? gpu::view(layers_.at(l).map) : gpu::view(); }

gpu::view gpu_expert_cache::ids_slot(uint32_t l) const {
  return gpu::view(readback_, uint64_t(l) * top_k_ * 4, uint64_t(top_k_) * 4);
}

uint64_t gpu_expert_cache::resident_bytes() const {
  if (layers_.empty()) return 0;
  const uint64_t one = expert_bytes(layers_[0].host.at(0));
  uint64_t all = 0;
  for (const layer& L : layers_) all += uint64_t(experts_) * one + (L.moe->shared ? expert_bytes(L.shared) : 0);
  return all;
}

uint64_t gpu_expert_cache::place(uint64_t used, uint64_t budget, uint32_t copy_threads) {
  const uint32_t E = experts_, K = top_k_, nl = uint32_t(layers_.size());
  if (nl == 0) return 0;
  const uint64_t one = expert_bytes(layers_[0].host.at(0));  // host bytes of one routed expert
  uint64_t shared_all = 0;  // every layer's stacked shared expert
  for (const layer& L : layers_) shared_all += L.moe->shared ? expert_bytes(L.shared) : 0;
  const uint64_t all = resident_bytes();  // every layer's routed experts (+ shared)
  const bool fits = budget == 0 || used + all <= budget;
  uint64_t slots = E, taken = 0;
  if (!fits) {
    auto gib = [](uint64_t b) { return std::to_string(double(b) / double(1ull << 30)).substr(0, 6) + " GiB"; };
    const uint64_t min_need = uint64_t(K) * one * nl + shared_all;
    if (used + min_need > budget)
      throw usage_error("gpu model: --vram-budget " + gib(budget) + " is below the " + gib(used) +
                        " of non-expert weights, state and scratch plus top_k = " + std::to_string(K) +
                        " experts per layer (" + gib(min_need) + "); at least " + std::to_string(used + min_need) +
                        " bytes (" + gib(used + min_need) + ") are needed");
    slots = std::min<uint64_t>(E, (budget - used - shared_all) / nl / one);
  }
  for (layer& L : layers_) {
    const expert_view* sh = L.moe->shared ? &L.shared : nullptr;
    if (fits)
      *L.moe = gpu::upload_moe(dev_, L.host, sh);
    else
      *L.moe = gpu::alloc_moe_slots(dev_, L.host.at(0), E, uint32_t(slots), sh);
    taken += matrix_bytes(L.moe->gate_up.w) + matrix_bytes(L.moe->down.w);
  }
  if (fits) {
    for (layer& L : layers_) L.host.clear();
    return taken;
  }
  stats_.active = true;
  stats_.slots = uint32_t(slots);
  stats_.slot_bytes = gpu::moe_slot_bytes(*layers_.at(0).moe);
  // Every expert is checked now (formats, shapes, sizes; one slot size for all layers: the ring and the budget
  // assume it), not in the middle of a token.
  for (uint32_t l = 0; l < nl; ++l) {
    if (gpu::moe_slot_bytes(*layers_[l].moe) != stats_.slot_bytes)
      throw usage_error("gpu model: the expert cache needs one expert size; layer " + std::to_string(l) + "'s is " +
                        std::to_string(gpu::moe_slot_bytes(*layers_[l].moe)) + " bytes, layer 0's " +
                        std::to_string(stats_.slot_bytes));
    for (uint32_t e = 0; e < E; ++e) try {
        (void)gpu::moe_slot_sources(*layers_[l].moe, layers_[l].host[e]);
      } catch (const usage_error& err) {
        throw usage_error("gpu model: layer " + std::to_string(l) + ", expert " + std::to_string(e) + ": " + err.what());
      }
  }
  ring_ = dev_.alloc_upload(uint64_t(K) * stats_.slot_bytes);
  copiers_ = std::make_unique<thread_pool>(
      std::max(1u, std::min(copy_threads, std::max(1u, std::thread::hardware_concurrency()))));
  readback_ = dev_.alloc_upload(uint64_t(nl) * K * 4);
  for (layer& L : layers_) {
    L.slot_of.assign(E, 0xFFFFFFFFu);
    L.expert_in.assign(slots, -1);
    L.last_use.assign(slots, 0);
    L.map = dev_.alloc(uint64_t(E) * 4);
    dev_.upload(L.map, L.slot_of);
    taken += L.map.size();
  }
  return taken;
}

void gpu_expert_cache::invalidate() {
  for (layer& L : layers_) {
    L.slot_of.assign(L.slot_of.size(), 0xFFFFFFFFu);
    L.expert_in.assign(L.expert_in.size(), -1);
    L.last_use.assign(L.last_use.size(), 0);
    dev_.upload(L.map, L.slot_of);
  }
}

uint32_t gpu_expert_cache::fill(uint32_t l, const uint32_t* ids, std::vector<gpu::commands>& out) {
  layer& C = layers_.at(l);
  const uint32_t K = top_k_, E = experts_;
  const uint64_t tick = ++tick_;
  uint8_t* const staged = dev_.mapped(ring_);
  uint32_t moved = 0;
  constexpr uint64_t piece = 1ull << 20;
  // First every selected expert that is resident is marked used by this token (so that no miss evicts it), then
  // the misses take the least recently used other slots. Each miss is packed into the ring by the copy threads and
  // its device copy submitted at once, so the copy engine moves one expert while the host packs the next.
  for (uint32_t j = 0; j < K; ++j)
    if (ids[j] < E && C.slot_of[ids[j]] != 0xFFFFFFFFu) C.last_use[C.slot_of[ids[j]]] = tick;
  for (uint32_t j = 0; j < K; ++j) {
    const uint32_t e = ids[j];
    if (e >= E) continue;  // an invalid id: the MoE turns the token into NaN (as without the cache)
    ++stats_.lookups;
    if (C.slot_of[e] != 0xFFFFFFFFu) {
      ++stats_.hits;
      continue;
    }
    // The least recently used slot not taken by this token (slots >= top_k, so one always exists).
    uint32_t victim = 0;
    uint64_t oldest = ~uint64_t(0);
    for (uint32_t s = 0; s < C.expert_in.size(); ++s)
      if (C.last_use[s] != tick && C.last_use[s] < oldest) oldest = C.last_use[s], victim = s;
    if (C.expert_in[victim] >= 0) C.slot_of[size_t(C.expert_in[victim])] = 0xFFFFFFFFu;
    // The packed image goes to its own part of the ring (the previous layer's copies have run: run_token waited
    // for its part); the device copies it into the slot before this layer's MoE (submission order).
    const uint64_t off = uint64_t(moved) * stats_.slot_bytes;
    chunks_.clear();
    uint8_t* to = staged + off;
    for (const auto& [from, bytes] : gpu::moe_slot_sources(*C.moe, C.host[e]))
      for (uint64_t at = 0; at < bytes; at += piece) {
        chunks_.push_back({to, from + at, std::min(piece, bytes - at)});
        to += chunks_.back().bytes;
      }
    const auto t0 = std::chrono::steady_clock::now();
    copiers_->run(chunks_.size(), [&](uint64_t b, uint64_t en, unsigned) {
      for (uint64_t i = b; i < en; ++i) std::memcpy(chunks_[i].to, chunks_[i].from, chunks_[i].bytes);
    });
    stats_.move_seconds += std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    out.push_back(dev_.begin());
    gpu::commands& c = out.back();
    c.barrier();
    if (dev_.info().timestamps) (void)c.timestamp();  // stamp 0; stamp 1 after the copy (run_token reads them)
    gpu::record_moe_slot(c, *C.moe, victim, gpu::view(ring_, off, stats_.slot_bytes));
    stats_.bytes_moved += stats_.slot_bytes;
    ++moved;
    C.expert_in[victim] = int64_t(e);
    C.slot_of[e] = victim;
    C.last_use[victim] = tick;
    bool last_miss = true;  // the slot map's update rides with the last copy
    for (uint32_t q = j + 1; q < K; ++q)
      if (ids[q] < E && C.slot_of[ids[q]] == 0xFFFFFFFFu) last_miss = false;
    if (last_miss) c.update(C.map, C.slot_of.data(), uint64_t(E) * 4);
    if (dev_.info().timestamps) (void)c.timestamp();
    dev_.submit_async(c);
  }
  return moved;
}

void gpu_expert_cache::run_token(gpu::commands& pre, gpu::commands& first, std::vector<gpu::commands>& segs) {
  const uint32_t K = top_k_, nl = uint32_t(layers_.size());
  if (segs.size() != nl) throw std::logic_error("expert cache: one recorded part per layer expected");
  dev_.submit_async(pre);
  dev_.submit_async(first);
  std::vector<uint32_t> ids(K);
  std::vector<gpu::commands> fills;  // this token's expert copies, one recording per missing expert
  fills.reserve(size_t(nl) * K);
  try {
    const uint8_t* sel = dev_.mapped(readback_);
    dev_.wait(pre);
    gpu::commands* prev = &first;
    const auto tw = [&](gpu::commands& c) {
      const auto t0 = std::chrono::steady_clock::now();
      dev_.wait(c);
      stats_.wait_seconds += std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    };
    for (uint32_t l = 0; l < nl; ++l) {
      tw(*prev);
      std::memcpy(ids.data(), sel + uint64_t(l) * K * 4, uint64_t(K) * 4);
      (void)fill(l, ids.data(), fills);  // submits one copy per missing expert
      dev_.submit_async(segs[l]);
      prev = &segs[l];
    }
    tw(*prev);
    for (gpu::commands& f : fills) {  // each holds stamps 0 and 1 around its copies (fill)
      dev_.wait(f);
      if (dev_.info().timestamps) stats_.copy_device_seconds += f.seconds(0, 1);
    }
  } catch (...) {
    // The slots may not hold what the host believes (a copy not submitted, a map not updated): start empty.
    for (gpu::commands& f : fills) dev_.wait(f);
    dev_.wait(pre);
    dev_.wait(first);
    for (gpu::commands& sc : segs) dev_.wait(sc);
    try {
      invalidate();
    } catch (...) {  // the original error matters more; the cache is then unusable anyway
    }
    throw;
  }
  ++stats_.tokens;
}

}  // namespace cmfx::driver
