#include "gpu_expert_cache.hpp"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <limits>
#include <thread>

#include "cmfx/core/error.hpp"
#include "cmfx/core/stream_copy.hpp"
#include "cmfx/kernels/cpu_kernels.hpp"
#include "cmfx/vk/device.hpp"

namespace cmfx::driver {

namespace {

uint64_t matrix_bytes(const gpu::gpu_matrix& m) { return m.data.size() + (m.scale ? m.scale.size() : 0); }
uint64_t view_bytes(const matrix_view& v) { return v.data_bytes + v.scale_bytes; }
uint64_t expert_bytes(const expert_view& e) { return view_bytes(e.gate) + view_bytes(e.up) + view_bytes(e.down); }
uint64_t round_up(uint64_t v, uint64_t a) { return (v + a - 1) / a * a; }
constexpr uint32_t absent = 0xFFFFFFFFu;

/// "; prefill chunks: … layer runs in … passes, …" (gpu_expert_cache_line).
std::string chunk_part(const gpu_expert_cache_stats& s) {
  char b[384];
  std::snprintf(b, sizeof b,
                "; prefill chunks: %llu layer runs in %llu passes, %.1f experts each (%.1f %% resident), %.1f MB "
                "moved, %.2f s packing, %.2f s waiting for the ring, %.2f s for the parts up to the routing",
                (unsigned long long)s.chunk_layers, (unsigned long long)s.chunk_passes,
                double(s.chunk_experts) / double(s.chunk_layers),
                s.chunk_experts ? 100.0 * double(s.chunk_hits) / double(s.chunk_experts) : 0.0,
                double(s.chunk_bytes_moved) / 1e6, s.chunk_move_seconds, s.chunk_wait_seconds, s.chunk_cut_seconds);
  std::string part = b;
  if (s.chunk_copy_device_seconds > 0 || s.chunk_pass_device_seconds > 0) {
    std::snprintf(b, sizeof b, "; device: %.2f s copying (%.1f GB/s), %.2f s in the passes",
                  s.chunk_copy_device_seconds,
                  s.chunk_copy_device_seconds > 0 ? double(s.chunk_bytes_moved) / s.chunk_copy_device_seconds / 1e9
                                                  : 0.0,
                  s.chunk_pass_device_seconds);
    part += b;
  }
  if (s.chunk_prefetched) {
    std::snprintf(b, sizeof b, "; prefetched %llu experts, %llu selected (%.2f s device → device)",
                  (unsigned long long)s.chunk_prefetched, (unsigned long long)s.chunk_prefetch_used,
                  s.chunk_d2d_device_seconds);
    part += b;
  }
  std::snprintf(b, sizeof b, "; host %.2f s in the passes", s.chunk_pass_host_seconds);
  return part + b;
}

}  // namespace

std::string gpu_expert_cache_line(const gpu_expert_cache_stats& s, uint32_t experts) {
  if (!s.active) return "expert cache: off (every expert resident)";
  char b[256];
  if (s.tokens == 0 && s.chunk_layers) {  // prefill chunks only
    std::snprintf(b, sizeof b, "expert cache: %u of %u slots per layer (%.1f MB each)", s.slots, experts,
                  double(s.slot_bytes) / 1e6);
    return b + chunk_part(s);
  }
  const double t = double(std::max<uint64_t>(s.tokens, 1));
  std::snprintf(b, sizeof b,
                "expert cache: %u of %u slots per layer (%.1f MB each), %llu tokens, hit rate %.1f %%, %.1f MB moved "
                "per token; per token %.2f ms host copies, %.2f ms device copies, %.2f ms waiting on the device",
                s.slots, experts, double(s.slot_bytes) / 1e6, (unsigned long long)s.tokens,
                s.lookups ? 100.0 * double(s.hits) / double(s.lookups) : 0.0, double(s.bytes_moved) / t / 1e6,
                s.move_seconds / t * 1e3, s.copy_device_seconds / t * 1e3, s.wait_seconds / t * 1e3);
  std::string line = b;
  if (s.cold != cold_experts::copy) {
    std::snprintf(b, sizeof b, "; cold experts on the CPU: %.2f per token, %.2f ms", double(s.cpu_experts) / t,
                  s.cpu_seconds / t * 1e3);
    line += b;
  }
  if (s.chunk_layers) line += chunk_part(s);
  if (s.cold == cold_experts::automatic) {
    std::snprintf(b, sizeof b, " (auto: the CPU rule in %llu of %llu tokens; last timed windows %.2f ms per token "
                  "copying, %.2f ms with the CPU)", (unsigned long long)s.cpu_rule_tokens, (unsigned long long)s.tokens,
                  s.auto_copy_ms, s.auto_cpu_ms);
    line += b;
  }
  return line;
}

gpu_expert_cache_stats gpu_expert_cache_since(const gpu_expert_cache_stats& now, const gpu_expert_cache_stats& then) {
  gpu_expert_cache_stats d = now;
  d.tokens -= then.tokens, d.lookups -= then.lookups, d.hits -= then.hits, d.bytes_moved -= then.bytes_moved;
  d.move_seconds -= then.move_seconds, d.copy_device_seconds -= then.copy_device_seconds;
  d.wait_seconds -= then.wait_seconds;
  d.cpu_experts -= then.cpu_experts, d.cpu_seconds -= then.cpu_seconds, d.cpu_rule_tokens -= then.cpu_rule_tokens;
  d.chunk_layers -= then.chunk_layers, d.chunk_passes -= then.chunk_passes, d.chunk_experts -= then.chunk_experts;
  d.chunk_hits -= then.chunk_hits, d.chunk_bytes_moved -= then.chunk_bytes_moved;
  d.chunk_move_seconds -= then.chunk_move_seconds, d.chunk_wait_seconds -= then.chunk_wait_seconds;
  d.chunk_copy_device_seconds -= then.chunk_copy_device_seconds;
  d.chunk_pass_device_seconds -= then.chunk_pass_device_seconds, d.chunk_cut_seconds -= then.chunk_cut_seconds;
  d.chunk_pass_host_seconds -= then.chunk_pass_host_seconds, d.chunk_prefetched -= then.chunk_prefetched;
  d.chunk_prefetch_used -= then.chunk_prefetch_used;
  d.chunk_d2d_device_seconds -= then.chunk_d2d_device_seconds;
  return d;
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
  L.stacked_shared = moe->shared;
  layers_.push_back(std::move(L));
  return expert_bytes(e0) * top_k_ + (moe->shared ? expert_bytes(shared) : 0);
}

gpu::view gpu_expert_cache::slot_map(uint32_t l) const { return stats_.active ? gpu::view(layers_.at(l).map) : gpu::view(); }

gpu::view gpu_expert_cache::ids_slot(uint32_t l) const {
  return gpu::view(readback_, uint64_t(l) * rec_stride_, uint64_t(top_k_) * 4);
}

gpu::view gpu_expert_cache::weights_slot(uint32_t l) const {
  if (!cpu_fallback()) return {};
  return gpu::view(readback_, uint64_t(l) * rec_stride_ + uint64_t(top_k_) * 4, uint64_t(top_k_) * 4);
}

gpu::view gpu_expert_cache::input_slot(uint32_t l) const {
  if (!cpu_fallback()) return {};
  return gpu::view(readback_, uint64_t(l) * rec_stride_ + uint64_t(top_k_) * 8, uint64_t(layers_.at(l).moe->dim) * 4);
}

gpu::view gpu_expert_cache::weights_in(uint32_t l) const {
  if (!cpu_fallback()) return {};
  return gpu::view(weights_in_, uint64_t(l) * w_stride_, uint64_t(top_k_) * 4);
}

gpu::view gpu_expert_cache::cpu_sum(uint32_t l) const {
  if (!cpu_fallback()) return {};
  return gpu::view(cpu_sums_, uint64_t(l) * sum_stride_, uint64_t(layers_.at(l).moe->dim) * 4);
}

uint64_t gpu_expert_cache::resident_bytes() const {
  if (layers_.empty()) return 0;
  const uint64_t one = expert_bytes(layers_[0].host.at(0));
  uint64_t all = 0;
  for (const layer& L : layers_) all += uint64_t(experts_) * one + (L.moe->shared ? expert_bytes(L.shared) : 0);
  return all;
}

thread_pool& gpu_expert_cache::host_pool(uint32_t threads) {
  if (!copiers_) {
    const uint32_t cores = std::max(1u, std::thread::hardware_concurrency());
    copiers_ = std::make_unique<thread_pool>(std::max(1u, std::min(threads, cores)));
  }
  return *copiers_;
}

uint64_t gpu_expert_cache::place(uint64_t used, const gpu_expert_cache_options& o) {
  const uint32_t E = experts_, K = top_k_, nl = uint32_t(layers_.size());
  if (nl == 0) return 0;
  if (o.transfer_copies && !dev_.info().timeline)
    throw usage_error("expert cache: copies on the transfer queue need timeline semaphores, which " +
                      dev_.info().name + " lacks");
  if (o.prefetch_bytes && o.prefetch_bytes != prefetch_auto && !o.transfer_copies)
    throw usage_error("expert cache: prefetched experts (--prefetch) need the copies on the transfer queue "
                      "(--copy-queue transfer)");
  opt_ = o;
  const bool cpu = o.cold != cold_experts::copy;  // the stand-in slot and the host's inputs
  const uint64_t budget = o.budget;
  const uint64_t one = expert_bytes(layers_[0].host.at(0));  // host bytes of one routed expert
  uint64_t shared_all = 0;  // every layer's stacked shared expert
  for (const layer& L : layers_) shared_all += L.moe->shared ? expert_bytes(L.shared) : 0;
  const uint64_t all = resident_bytes();  // every layer's routed experts (+ shared)
  const bool fits = budget == 0 || used + all <= budget;
  uint64_t slots = E, taken = 0;  // routed-expert slots (cold_experts::cpu: plus the stand-in slot)
  if (!fits) {
    auto gib = [](uint64_t b) { return std::to_string(double(b) / double(1ull << 30)).substr(0, 6) + " GiB"; };
    // copy (and auto, which copies in some tokens): a token needs its top_k experts resident at once; cpu: only the
    // stand-in slot is required.
    const uint64_t min_need = minimum_bytes(0, o.cold);
    if (used + min_need > budget)
      throw usage_error("gpu model: --vram-budget " + gib(budget) + " is below the " + gib(used) +
                        " of non-expert weights, state and scratch plus " +
                        (o.cold == cold_experts::cpu
                             ? std::string("one expert slot per layer (the stand-in slot of --cold-experts cpu)")
                             : "top_k = " + std::to_string(K) + " experts per layer" +
                                   (cpu ? " and the stand-in slot of --cold-experts auto" : "")) +
                        " (" + gib(min_need) + "); at least " + std::to_string(used + min_need) + " bytes (" +
                        gib(used + min_need) + ") are needed");
    slots = std::min<uint64_t>(E, (budget - used - shared_all) / nl / one) - (cpu ? 1 : 0);
    // the prefetch images (transfer copies only) come out of the slots' share, as long as the slots keep their
    // minimum; else there are none
    // auto: only where the copies have their own queue (on the compute queue they would run after the routing
    // they are to overlap)
    const uint64_t want = o.prefetch_bytes != prefetch_auto ? o.prefetch_bytes
                          : dev_.info().transfer_queue  ? std::min<uint64_t>(uint64_t(2) << 30, budget / 32)
                                                        : 0;
    const uint64_t pf = o.transfer_copies ? std::min<uint64_t>(want / one, E) : 0;
    // routed slots the passes need besides the images: top_k (copy's minimum; cpu: one), two with overlap
    const uint64_t need = std::max<uint64_t>(o.cold == cold_experts::cpu ? 1 : K, o.pass_overlap ? 2 : 1);
    if (pf && used + shared_all + pf * one <= budget) {
      const uint64_t with = std::min<uint64_t>(E, (budget - used - shared_all - pf * one) / nl / one);
      if (with >= need + (cpu ? 1 : 0)) slots = with - (cpu ? 1 : 0), pf_cap_ = uint32_t(pf);
    }
  }
  for (layer& L : layers_) {
    const expert_view* sh = L.moe->shared ? &L.shared : nullptr;
    if (fits)
      *L.moe = gpu::upload_moe(dev_, L.host, sh);
    else
      *L.moe = gpu::alloc_moe_slots(dev_, L.host.at(0), E, uint32_t(slots) + (cpu ? 1 : 0), sh);
    taken += matrix_bytes(L.moe->gate_up.w) + matrix_bytes(L.moe->down.w);
  }
  if (fits) {
    for (layer& L : layers_) L.host.clear();
    return taken;
  }
  stats_.active = true;
  stats_.cold = o.cold;
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
  ring_ = alloc_staging(uint64_t(K) * stats_.slot_bytes);
  stats_.prefetch_images = pf_cap_;
  if (pf_cap_) {  // buffers of ≤ 1 GiB (and ≥ one image)
    pf_per_buf_ = uint32_t(std::max<uint64_t>(1, (uint64_t(1) << 30) / stats_.slot_bytes));
    for (uint32_t i = 0; i < pf_cap_; i += pf_per_buf_) {
      const uint64_t bytes = uint64_t(std::min(pf_per_buf_, pf_cap_ - i)) * stats_.slot_bytes;
      pf_dev_.push_back(dev_.alloc(bytes));
      pf_host_.push_back(alloc_staging(bytes));
      taken += bytes;
    }
  }
  (void)host_pool(o.copy_threads);
  const uint64_t dim = layers_[0].moe->dim;
  for (const layer& L : layers_)
    if (L.moe->dim != dim) throw usage_error("gpu model: the expert cache needs one model dimension for every layer");
  // Per layer: ids (top_k uint32); with cold_experts::cpu also the routing weights (top_k f32) and the MoE input.
  rec_stride_ = round_up(uint64_t(K) * 4 + (cpu ? uint64_t(K) * 4 + dim * 4 : 0), 64);
  readback_ = dev_.alloc_readback(uint64_t(nl) * rec_stride_);
  if (cpu) {
    sum_stride_ = round_up(dim * 4, 256);  // a storage binding's offset alignment on every device we know
    cpu_sums_ = dev_.alloc_upload(uint64_t(nl) * sum_stride_);
    std::memset(dev_.mapped(cpu_sums_), 0, uint64_t(nl) * sum_stride_);
    w_stride_ = round_up(uint64_t(K) * 4, 256);
    weights_in_ = dev_.alloc_upload(uint64_t(nl) * w_stride_);
    // The stand-in slot holds the layer's expert 0 (finite weights): a CPU expert read there with a zero routing
    // weight adds SwiGLU · 0 = 0 to the device's sum. (A slot of zero bytes would not do: q4tp decodes them to −8.)
    stand_in_ = uint32_t(slots);
    for (layer& L : layers_) {
      uint8_t* to = dev_.mapped(ring_);
      for (const auto& [from, bytes] : gpu::moe_slot_sources(*L.moe, L.host.at(0))) {
        std::memcpy(to, from, bytes);
        to += bytes;
      }
      gpu::commands c = dev_.begin();
      gpu::record_moe_slot(c, *L.moe, stand_in_, gpu::view(ring_, 0, stats_.slot_bytes));
      dev_.submit_async(c);
      dev_.wait(c);
    }
    cpu_in_.resize(dim);
    cpu_out_.resize(dim);
  }
  for (layer& L : layers_) {
    L.slot_of.assign(E, absent);
    L.map_dev = L.slot_of;
    L.expert_in.assign(slots, -1);
    L.last_use.assign(slots, 0);
    L.heat.assign(cpu ? E : 0, 0.0);
    L.heat_at.assign(cpu ? E : 0, 0);
    L.heat_key.assign(cpu ? E : 0, -std::numeric_limits<double>::infinity());
    L.map = dev_.alloc(uint64_t(E) * 4);
    dev_.upload(L.map, L.slot_of);
    taken += L.map.size();
  }
  return taken;
}

uint64_t gpu_expert_cache::minimum_bytes(uint64_t used, cold_experts cold) const {
  if (layers_.empty()) return used;
  uint64_t shared_all = 0;  // every layer's stacked shared expert
  for (const layer& L : layers_) shared_all += L.moe->shared ? expert_bytes(L.shared) : 0;
  // copy (and auto, which copies in some tokens): a token needs its top_k experts resident at once; cpu: only the
  // stand-in slot is required
  const uint64_t min_slots = (cold == cold_experts::cpu ? 0 : top_k_) + (cold != cold_experts::copy ? 1 : 0);
  return used + min_slots * expert_bytes(layers_[0].host.at(0)) * layers_.size() + shared_all;
}

void gpu_expert_cache::add_pieces(uint8_t* to, const layer& C, uint32_t e) {
  constexpr uint64_t piece = uint64_t(1) << 20;  // the copy threads' unit
  for (const auto& [from, bytes] : gpu::moe_slot_sources(*C.moe, C.host[e]))
    for (uint64_t at = 0; at < bytes; at += piece) {
      chunks_.push_back({to, from + at, std::min(piece, bytes - at)});
      to += chunks_.back().bytes;
    }
}

double gpu_expert_cache::pack_chunks() {
  const auto t0 = std::chrono::steady_clock::now();
  if (opt_.stream_pack)
    copiers_->run(chunks_.size(), [&](uint64_t b, uint64_t en, unsigned) {
      for (uint64_t q = b; q < en; ++q) stream_copy(chunks_[q].to, chunks_[q].from, chunks_[q].bytes);
    });
  else
    copiers_->run(chunks_.size(), [&](uint64_t b, uint64_t en, unsigned) {
      for (uint64_t q = b; q < en; ++q) std::memcpy(chunks_[q].to, chunks_[q].from, chunks_[q].bytes);
    });
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

gpu::buffer gpu_expert_cache::alloc_staging(uint64_t bytes) {
  // host-cached only where that memory is system memory (not a host-visible part of the device's, which the
  // budget does not count)
  return opt_.cached_staging && dev_.info().host_cached ? dev_.alloc_readback(bytes) : dev_.alloc_upload(bytes);
}

uint64_t gpu_expert_cache::drop_prefetch() {
  uint64_t bytes = 0;
  for (const gpu::buffer& b : pf_dev_) bytes += b.size();
  pf_dev_.clear(), pf_host_.clear(), pf_experts_.clear(), pf_copies_.clear();
  pf_cap_ = 0, pf_layer_ = -1;
  stats_.prefetch_images = 0;
  return bytes;
}

void gpu_expert_cache::invalidate() {
  pf_layer_ = -1;  // the prefetch images may be read again only for the layer prefetch() names next
  for (layer& L : layers_) {
    L.slot_of.assign(L.slot_of.size(), absent);
    L.map_dev = L.slot_of;
    L.expert_in.assign(L.expert_in.size(), -1);
    L.last_use.assign(L.last_use.size(), 0);
    L.cpu_used = false;
    dev_.upload(L.map, L.slot_of);
  }
  if (cpu_sums_) std::memset(dev_.mapped(cpu_sums_), 0, cpu_sums_.size());
}

double gpu_expert_cache::heat(const layer& L, uint32_t e) const {
  const double age = double(stats_.tokens - L.heat_at[e]);
  return L.heat[e] * std::exp2(-age / cold_half_life);
}

uint32_t gpu_expert_cache::fill(uint32_t l, const uint8_t* rec, std::vector<gpu::commands>& out) {
  layer& C = layers_.at(l);
  const uint32_t K = top_k_, E = experts_;
  const bool cpu = cpu_rule_;
  const bool heats = !C.heat.empty();  // kept in both rules by cold_experts::automatic
  uint32_t ids[gpu::kernels::route_max_k];
  std::memcpy(ids, rec, uint64_t(K) * 4);
  const uint64_t tick = ++tick_;
  // First every selected expert that is resident is marked used by this token (so that no miss evicts it).
  for (uint32_t j = 0; j < K; ++j)
    if (ids[j] < E && C.slot_of[ids[j]] != absent) C.last_use[C.slot_of[ids[j]]] = tick;
  if (heats)
    for (uint32_t j = 0; j < K; ++j)
      if (const uint32_t e = ids[j]; e < E) {
        C.heat[e] = heat(C, e) + 1.0, C.heat_at[e] = stats_.tokens;
        C.heat_key[e] = std::log2(C.heat[e]) + double(C.heat_at[e]) / cold_half_life;
      }
  // Then each miss takes a slot not used by this token: copy — the least recently used one; cpu — the one whose
  // expert is coldest, and only when it is empty or the miss is hotter by cold_margin (else the miss is computed on
  // the CPU).
  struct move {
    uint32_t e, slot;
  };
  move moves[gpu::kernels::route_max_k];
  uint32_t moved = 0;
  std::vector<uint32_t> on_cpu;  // positions j
  for (uint32_t j = 0; j < K; ++j) {
    const uint32_t e = ids[j];
    if (e >= E) continue;  // an invalid id: the MoE turns the token into NaN (as without the cache)
    ++stats_.lookups;
    if (C.slot_of[e] != absent) {
      ++stats_.hits;
      continue;
    }
    uint32_t victim = absent;
    double least = 0;  // copy: the last use; cpu: heat_key (an empty slot below every key)
    for (uint32_t s = 0; s < C.expert_in.size(); ++s) {
      if (C.last_use[s] == tick) continue;
      const double v = !cpu                   ? double(C.last_use[s])
                       : C.expert_in[s] < 0 ? -std::numeric_limits<double>::infinity()
                                            : C.heat_key[size_t(C.expert_in[s])];
      if (victim == absent || v < least) least = v, victim = s;
    }
    if (cpu && (victim == absent || (C.expert_in[victim] >= 0 &&
                                     !(heat(C, e) > heat(C, uint32_t(C.expert_in[victim])) + opt_.cold_margin)))) {
      on_cpu.push_back(j);
      continue;
    }
    if (victim == absent) throw std::logic_error("expert cache: no free slot (slots < top_k)");
    if (C.expert_in[victim] >= 0) C.slot_of[size_t(C.expert_in[victim])] = absent;
    C.expert_in[victim] = int64_t(e);
    C.slot_of[e] = victim;
    C.last_use[victim] = tick;
    moves[moved++] = {e, victim};
  }
  // The device's slot map: slot_of, and with CPU experts those pointing at the stand-in slot.
  std::vector<uint32_t> want = C.slot_of;
  for (const uint32_t j : on_cpu) want[ids[j]] = stand_in_;
  const bool map_changed = want != C.map_dev;
  // Each move is packed into its own part of the ring by the copy threads and its device copy submitted at once,
  // so the copy engine moves one expert while the host packs the next (the previous layer's copies have run:
  // run_token waited for its part); the device copies it into the slot before this layer's MoE (submission
  // order). The map's update rides with the last copy (or alone when only CPU experts changed it).
  uint8_t* const staged = dev_.mapped(ring_);
  for (uint32_t i = 0; i < moved; ++i) {
    const uint64_t off = uint64_t(i) * stats_.slot_bytes;
    chunks_.clear();
    add_pieces(staged + off, C, moves[i].e);
    stats_.move_seconds += pack_chunks();
    out.push_back(dev_.begin());
    gpu::commands& c = out.back();
    c.barrier();
    if (dev_.info().timestamps) (void)c.timestamp();  // stamp 0; stamp 1 after the copy (run_token reads them)
    gpu::record_moe_slot(c, *C.moe, moves[i].slot, gpu::view(ring_, off, stats_.slot_bytes));
    stats_.bytes_moved += stats_.slot_bytes;
    if (i + 1 == moved && map_changed) c.update(C.map, want.data(), uint64_t(E) * 4);
    if (dev_.info().timestamps) (void)c.timestamp();
    dev_.submit_async(c);
  }
  if (moved == 0 && map_changed) {
    out.push_back(dev_.begin());
    gpu::commands& c = out.back();
    c.barrier();
    if (dev_.info().timestamps) (void)c.timestamp(), (void)c.timestamp();  // run_token reads stamps 0 and 1
    c.update(C.map, want.data(), uint64_t(E) * 4);
    dev_.submit_async(c);
  }
  C.map_dev = std::move(want);
  if (cpu_fallback()) {
    // The device's routing weights: the routing's, zero for the experts the host computes (compute_on_cpu, while
    // the device runs the layer's MoE over the others and the copy engine moves the admitted ones).
    float w[gpu::kernels::route_max_k];
    std::memcpy(w, rec + uint64_t(K) * 4, uint64_t(K) * 4);
    for (const uint32_t j : on_cpu) w[j] = 0.0f;
    std::memcpy(dev_.mapped(weights_in_) + uint64_t(l) * w_stride_, w, uint64_t(K) * 4);
    pending_cpu_ = std::move(on_cpu);
  }
  return moved;
}

void gpu_expert_cache::compute_on_cpu(uint32_t l, const uint8_t* rec) {
  layer& C = layers_.at(l);
  const uint32_t K = top_k_;
  const uint64_t dim = C.moe->dim;
  const std::vector<uint32_t>& js = pending_cpu_;
  float* const sum = reinterpret_cast<float*>(dev_.mapped(cpu_sums_) + uint64_t(l) * sum_stride_);
  if (js.empty()) {
    if (C.cpu_used) std::memset(sum, 0, dim * 4);
    C.cpu_used = false;
    return;
  }
  const auto t0 = std::chrono::steady_clock::now();
  uint32_t ids[gpu::kernels::route_max_k];
  float w[gpu::kernels::route_max_k], sel_w[gpu::kernels::route_max_k];
  std::memcpy(ids, rec, uint64_t(K) * 4);
  std::memcpy(w, rec + uint64_t(K) * 4, uint64_t(K) * 4);
  std::memcpy(cpu_in_.data(), rec + uint64_t(K) * 8, dim * 4);
  uint32_t sel[gpu::kernels::route_max_k];
  const uint32_t m = uint32_t(js.size());
  for (uint32_t i = 0; i < m; ++i) sel[i] = ids[js[i]], sel_w[i] = w[js[i]];
  moe_forward(*copiers_, best_cpu_kernels(), std::span<const expert_view>(C.host), nullptr, cpu_in_.data(), 1, dim,
              sel, sel_w, m, opt_.swiglu_limit, cpu_out_.data(), cpu_scratch_, opt_.act, opt_.cpu_chunk_rows);
  std::memcpy(sum, cpu_out_.data(), dim * 4);
  C.cpu_used = true;
  stats_.cpu_experts += m;
  stats_.cpu_seconds += std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

void gpu_expert_cache::run_token(gpu::commands& pre, gpu::commands& first, std::vector<gpu::commands>& segs,
                                 const std::function<void()>& between) {
  const uint32_t K = top_k_, nl = uint32_t(layers_.size());
  const uint32_t per = cpu_fallback() ? 2 : 1;  // cpu / auto: the MoE's part, then the host's sum added and the rest
  if (segs.size() != uint64_t(nl) * per)
    throw std::logic_error("expert cache: " + std::to_string(per) + " recorded parts per layer expected");
  const auto t_token = std::chrono::steady_clock::now();
  cpu_rule_ = stats_.cold == cold_experts::cpu ||
              (stats_.cold == cold_experts::automatic &&
               (auto_phase_ == 2 || (auto_phase_ == 3 && stats_.auto_cpu_ms < stats_.auto_copy_ms)));
  dev_.submit_async(pre);
  dev_.submit_async(first);
  std::vector<gpu::commands> fills;  // this token's expert copies, one recording per missing expert
  fills.reserve(size_t(nl) * K);
  try {
    const uint8_t* sel = dev_.mapped(readback_);
    if (between) between();
    dev_.wait(pre);
    gpu::commands* prev = &first;
    // not on a CPU device (lavapipe): its threads need the core the spin would take
    const bool spin = opt_.spin_waits && dev_.info().kind != gpu::device_kind::cpu;
    const auto tw = [&](gpu::commands& c) {
      const auto t0 = std::chrono::steady_clock::now();
      if (spin)
        while (!dev_.ready(c)) spin_pause();
      dev_.wait(c);
      stats_.wait_seconds += std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    };
    for (uint32_t l = 0; l < nl; ++l) {
      tw(*prev);
      const uint8_t* rec = sel + uint64_t(l) * rec_stride_;
      (void)fill(l, rec, fills);  // submits one copy per missing expert
      dev_.submit_async(segs[uint64_t(l) * per]);
      if (per == 2) {  // the host's experts while the device runs the others
        compute_on_cpu(l, rec);
        dev_.submit_async(segs[uint64_t(l) * 2 + 1]);
      }
      prev = &segs[uint64_t(l) * per + per - 1];
      if (between) between();
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
  stats_.cpu_rule_tokens += cpu_rule_ ? 1 : 0;
  if (stats_.cold == cold_experts::automatic) {
    // fill (copy) → time copy → time cpu → run the faster → time both again
    auto_s_ += std::chrono::duration<double>(std::chrono::steady_clock::now() - t_token).count();
    const uint32_t len = auto_phase_ == 3 ? auto_exploit : auto_window;
    if (++auto_n_ == len) {
      if (auto_phase_ == 1) stats_.auto_copy_ms = auto_s_ / auto_n_ * 1e3;
      if (auto_phase_ == 2) stats_.auto_cpu_ms = auto_s_ / auto_n_ * 1e3;
      auto_phase_ = auto_phase_ == 3 ? 1 : auto_phase_ + 1;
      auto_n_ = 0, auto_s_ = 0;
    }
  }
}

}  // namespace cmfx::driver
