// The expert cache's passes for prefill chunks (gpu_expert_cache.hpp, "Prefill chunks"): which experts each pass
// holds, their copies through the upload ring, and the pass's slot map.
#include <algorithm>
#include <chrono>
#include <cstring>
#include <stdexcept>

#include "cmfx/core/error.hpp"
#include "cmfx/vk/device.hpp"
#include "gpu_expert_cache.hpp"

namespace cmfx::driver {

namespace {
constexpr uint32_t absent = 0xFFFFFFFFu;
using clk = std::chrono::steady_clock;
double since(clk::time_point t) { return std::chrono::duration<double>(clk::now() - t).count(); }
}  // namespace

gpu::view gpu_expert_cache::chunk_ids(uint64_t pairs) {
  const uint64_t bytes = std::max<uint64_t>(pairs * 4, 16);
  if (!chunk_ids_ || chunk_ids_.size() < bytes) chunk_ids_ = dev_.alloc_readback(bytes);
  return gpu::view(chunk_ids_, 0, pairs * 4);
}

std::span<const uint32_t> gpu_expert_cache::read_chunk_ids(uint64_t pairs) {
  if (!chunk_ids_ || chunk_ids_.size() < pairs * 4) throw std::logic_error("expert cache: chunk_ids not recorded");
  return {reinterpret_cast<const uint32_t*>(dev_.mapped(chunk_ids_)), size_t(pairs)};
}

void gpu_expert_cache::copy_in(layer& C, const std::vector<move_to>& moves, bool overlap, gpu::sync_point after) {
  // Groups of `per` images (≥ 32 MiB a group where the slots allow it): the host packs one group while the copy
  // engine reads another. Two groups, or with pass_overlap as many as a pass's misses take: a fence covers every
  // submission before it, so reusing a group within a pass would wait for the previous pass's MoE, which these
  // copies are to overlap.
  if (!pass_ring_) {
    const uint64_t big = (opt_.pass_group_bytes + stats_.slot_bytes - 1) / stats_.slot_bytes;
    // ≥ top_k / 2 images a group, ≤ the slots (cold_experts::cpu may leave fewer slots than top_k / 2)
    pass_per_ = std::min<uint64_t>(std::max<uint64_t>(big, std::max<uint32_t>(1, top_k_ / 2)),
                                   std::max<uint32_t>(1, stats_.slots));
    const uint64_t cap = std::max<uint32_t>(1, stats_.slots / 2);  // run_passes' pass size with pass_overlap
    const uint64_t groups = opt_.pass_overlap ? std::max<uint64_t>(2, (cap + pass_per_ - 1) / pass_per_) : 2;
    pass_ring_ = alloc_staging(groups * pass_per_ * stats_.slot_bytes);
    group_copy_.assign(groups, -1);
  }
  const uint64_t per = pass_per_, groups = group_copy_.size();
  const bool stamps = copy_stamps(), xfer = opt_.transfer_copies;
  // the prefetched experts first (run_passes orders them so), device → device after the prefetch's copies
  size_t first = 0;
  while (first < moves.size() && moves[first].image != absent) ++first;
  if (first && !opt_.prefetch_d2d_compute) {
    gpu::commands c = dev_.begin_transfer();  // prefetch images exist only with transfer_copies
    c.after(after);
    uint32_t last = 0;  // the prefetch's recordings up to the one holding the last image read here
    for (size_t q = 0; q < first; ++q) last = std::max(last, moves[q].image);
    c.after(pf_copies_.at(last / pf_group_).done());  // a timeline point: the earlier ones ran too
    if (stamps) (void)c.timestamp();
    for (size_t q = 0; q < first; ++q) gpu::record_moe_slot(c, *C.moe, moves[q].slot, prefetch_image(moves[q].image));
    if (stamps) (void)c.timestamp();
    dev_.submit_async(c);
    pf_free_ = c.done();
    pass_copies_.push_back(std::move(c));
    pass_copy_d2d_.push_back(1);
    stats_.chunk_prefetch_used += first;
  }
  uint8_t* const staged = dev_.mapped(pass_ring_);
  for (size_t i = first; i < moves.size(); i += per) {
    const uint64_t g = next_group_++ % groups, n = std::min<uint64_t>(per, moves.size() - i);
    if (group_copy_[g] >= 0) {  // the group's last copies must have read it
      const auto tw = clk::now();
      dev_.wait(pass_copies_[size_t(group_copy_[g])]);
      stats_.chunk_wait_seconds += since(tw);
    }
    chunks_.clear();
    for (uint64_t q = 0; q < n; ++q) add_pieces(staged + (g * per + q) * stats_.slot_bytes, C, moves[i + q].e);
    stats_.chunk_move_seconds += pack_chunks();
    gpu::commands c = xfer ? dev_.begin_transfer() : dev_.begin();
    // after the passes submitted before (they read the slots these copies overwrite); with overlap the barrier
    // before the last pass's MoE orders these copies after the passes before it; with transfer_copies `after` is
    // the MoE that last read these slots
    if (xfer)
      c.after(after);
    else if (!overlap)
      c.barrier();
    if (stamps) (void)c.timestamp();  // stamps 0 and 1 around the copies (finish_passes)
    for (uint64_t q = 0; q < n; ++q)
      gpu::record_moe_slot(c, *C.moe, moves[i + q].slot,
                           gpu::view(pass_ring_, (g * per + q) * stats_.slot_bytes, stats_.slot_bytes));
    if (stamps) (void)c.timestamp();
    dev_.submit_async(c);
    pass_copies_.push_back(std::move(c));
    pass_copy_d2d_.push_back(0);
    group_copy_[g] = int64_t(pass_copies_.size() - 1);
    stats_.chunk_bytes_moved += n * stats_.slot_bytes;
  }
}

uint32_t gpu_expert_cache::run_passes(uint32_t l, std::span<const uint32_t> ids,
                                      const std::function<void(gpu::commands& part, bool first)>& record) {
  layer& C = layers_.at(l);
  const uint32_t E = experts_, S = pass_slots();
  if (S == 0) throw std::logic_error("expert cache: run_passes without slots");
  // the slot copies place each plane by the stacked row count: not inside a routed_only_scope, which lowers it
  if (C.moe->shared != C.stacked_shared)
    throw std::logic_error("expert cache: run_passes on a layer whose stacked shared expert is scoped out");
  const auto t_host = clk::now();
  // the prefetch images hold this layer's experts (prefetch(l) since the last run_passes): image of each expert
  std::vector<uint32_t> image;
  if (pf_layer_ == int64_t(l)) {
    image.assign(E, absent);
    for (size_t i = 0; i < pf_experts_.size(); ++i) image[pf_experts_[i]] = uint32_t(i);
  }
  pf_layer_ = -1;  // read once, by this layer's passes
  try {
    std::vector<uint8_t> need(E, 0);
    for (const uint32_t e : ids)
      if (e < E) need[e] = 1;  // an invalid id: its token's sum is NaN, as on the resident layer
    std::vector<uint32_t> pass, missing;  // the first pass starts with the resident experts, then the prefetched
    for (uint32_t e = 0; e < E; ++e)
      if (need[e] && C.slot_of[e] != absent) pass.push_back(e);
    for (uint32_t e = 0; e < E && !image.empty(); ++e)
      if (need[e] && C.slot_of[e] == absent && image[e] != absent) missing.push_back(e);
    for (uint32_t e = 0; e < E; ++e)
      if (need[e] && C.slot_of[e] == absent && (image.empty() || image[e] == absent)) missing.push_back(e);
    ++stats_.chunk_layers;
    stats_.chunk_experts += pass.size() + missing.size();
    stats_.chunk_hits += pass.size();
    // pass_overlap: passes of at most half the slots; a miss evicts neither its pass's experts nor the previous
    // pass's (their ticks), so the copies need no barrier after the previous pass's MoE. The resident experts are
    // reserved until their pass (they come first), so no miss of an earlier pass evicts them.
    const bool overlap = opt_.pass_overlap && S >= 2;
    const uint32_t cap = overlap ? S / 2 : S;
    constexpr uint64_t reserved = ~uint64_t(0);
    std::vector<uint32_t> order = std::move(pass);
    const size_t resident = order.size();
    order.insert(order.end(), missing.begin(), missing.end());
    for (size_t i = 0; i < resident; ++i) C.last_use[C.slot_of[order[i]]] = reserved;
    std::vector<move_to> moves;
    std::vector<uint32_t> want(E), pass_experts;
    // transfer_copies: pass p's copies run after the MoE that last read their slots — pass p − 1's (with overlap
    // p − 2's), before the first such pass everything submitted to the compute queue so far
    const gpu::sync_point start = opt_.transfer_copies ? dev_.last_submitted(0) : gpu::sync_point{};
    std::vector<gpu::sync_point> part_done;
    const uint32_t lag = overlap ? 2 : 1;
    size_t next = 0;
    uint32_t passes = 0;
    uint64_t prev = 0;  // the previous pass's tick (0: none)
    do {  // at least one pass: the first also runs a stacked shared expert
      const uint64_t tick = ++tick_;
      moves.clear(), pass_experts.clear();
      while (pass_experts.size() < cap && next < order.size()) {
        const uint32_t e = order[next];
        if (next < resident) {  // resident: its pass now
          C.last_use[C.slot_of[e]] = tick;
        } else {
          uint32_t victim = absent;
          for (uint32_t s = 0; s < S; ++s) {
            const uint64_t u = C.last_use[s];
            if (u == tick || u == reserved || (overlap && u == prev && prev != 0)) continue;
            if (victim == absent || u < C.last_use[victim]) victim = s;
          }
          if (victim == absent) {
            if (!pass_experts.empty()) break;  // the rest in the next pass
            throw std::logic_error("expert cache: no slot left for a pass");
          }
          if (C.expert_in[victim] >= 0) C.slot_of[size_t(C.expert_in[victim])] = absent;
          C.expert_in[victim] = int64_t(e);
          C.slot_of[e] = victim;
          C.last_use[victim] = tick;
          moves.push_back({e, victim, image.empty() ? absent : image[e]});
        }
        pass_experts.push_back(e);
        ++next;
      }
      const size_t copies_before = pass_copies_.size();
      copy_in(C, moves, overlap && passes > 0, part_done.size() >= lag ? part_done[part_done.size() - lag] : start);
      std::fill(want.begin(), want.end(), absent);
      for (const uint32_t e : pass_experts) want[e] = C.slot_of[e];
      gpu::commands part = dev_.begin();
      if (opt_.transfer_copies)  // the MoE reads what this pass's copies wrote
        for (size_t i = copies_before; i < pass_copies_.size(); ++i) part.after(pass_copies_[i].done());
      size_t d2d = 0;  // prefetched experts this part copies into their slots (prefetch_d2d_compute)
      uint32_t last = 0;  // after the prefetch's recordings up to the one holding the last of their images
      for (; opt_.prefetch_d2d_compute && d2d < moves.size() && moves[d2d].image != absent; ++d2d)
        last = std::max(last, moves[d2d].image);
      if (d2d) part.after(pf_copies_.at(last / pf_group_).done());  // a timeline point: the earlier ones ran too
      part.barrier();  // after the pass's copies and the passes before (which read the map and the slots)
      if (d2d && pass_stamps()) (void)part.timestamp();  // stamps 0 and 1 around them, 2 and 3 around the pass
      for (size_t q = 0; q < d2d; ++q)  // distinct slots, and not the map: unordered transfers
        gpu::record_moe_slot(part, *C.moe, moves[q].slot, prefetch_image(moves[q].image));
      if (d2d && pass_stamps()) (void)part.timestamp();
      part.update(gpu::view(C.map), want.data(), uint64_t(E) * 4);
      part.barrier();
      if (pass_stamps()) (void)part.timestamp();  // stamps around the pass (finish_passes)
      record(part, passes == 0);
      if (pass_stamps()) (void)part.timestamp();
      dev_.submit_async(part);
      if (opt_.transfer_copies) part_done.push_back(part.done());
      if (d2d) pf_free_ = part.done(), stats_.chunk_prefetch_used += d2d;
      pass_parts_.push_back(std::move(part));
      pass_part_d2d_.push_back(d2d ? 1 : 0);
      C.map_dev = want;  // the next decode step's fill restores the map of every resident expert
      ++passes;
      prev = tick;
    } while (next < order.size());
    stats_.chunk_passes += passes;
    stats_.chunk_pass_host_seconds += since(t_host);
    return passes;
  } catch (...) {
    drop_passes();
    throw;
  }
}

gpu::view gpu_expert_cache::prefetch_image(uint32_t i) const {
  return gpu::view(pf_dev_.at(i / pf_per_buf_), uint64_t(i % pf_per_buf_) * stats_.slot_bytes, stats_.slot_bytes);
}

void gpu_expert_cache::retire_prefetch() {
  const bool stamps = copy_stamps();
  for (gpu::commands& c : pf_copies_) {
    dev_.wait(c);
    if (stamps) stats_.chunk_copy_device_seconds += c.seconds(0, 1);
  }
  pf_copies_.clear();
}

void gpu_expert_cache::prefetch(uint32_t l, uint64_t pairs) {
  if (pf_cap_ == 0 || double(pairs) < opt_.prefetch_min_uses * double(experts_)) return;
  layer& C = layers_.at(l);
  try {
    // the staging's last copies ran long ago (the passes that read their images waited for them)
    retire_prefetch();
    pf_layer_ = -1;
    pf_experts_.clear();
    for (uint32_t e = 0; e < experts_ && pf_experts_.size() < pf_cap_; ++e)
      if (C.slot_of[e] == absent) pf_experts_.push_back(e);
    if (pf_experts_.empty()) return;
    // groups of ⌈pass_group_bytes / slot_bytes⌉ images (≤ the images), each submitted once packed: the copy engine
    // starts on the first while the host packs the next
    const uint64_t per = std::clamp<uint64_t>((opt_.pass_group_bytes + stats_.slot_bytes - 1) / stats_.slot_bytes, 1,
                                              pf_cap_);
    pf_group_ = uint32_t(per);
    const bool stamps = copy_stamps();
    for (size_t i = 0; i < pf_experts_.size(); i += per) {
      const size_t n = std::min<size_t>(per, pf_experts_.size() - i);
      chunks_.clear();
      for (size_t q = i; q < i + n; ++q)
        add_pieces(dev_.mapped(pf_host_[q / pf_per_buf_]) + (q % pf_per_buf_) * stats_.slot_bytes, C, pf_experts_[q]);
      stats_.chunk_move_seconds += pack_chunks();
      gpu::commands c = dev_.begin_transfer();
      c.after(pf_free_);  // the passes' copies out of the images (the previous prefetch's) have run
      if (stamps) (void)c.timestamp();
      for (size_t q = i; q < i + n; ++q) {  // an image's bytes are contiguous in both buffers
        const uint64_t at = (q % pf_per_buf_) * stats_.slot_bytes;
        c.copy(gpu::view(pf_host_[q / pf_per_buf_], at, stats_.slot_bytes), prefetch_image(uint32_t(q)),
               stats_.slot_bytes);
      }
      if (stamps) (void)c.timestamp();
      dev_.submit_async(c);
      pf_copies_.push_back(std::move(c));
      stats_.chunk_bytes_moved += n * stats_.slot_bytes;
      stats_.chunk_prefetched += n;
    }
    pf_layer_ = int64_t(l);
  } catch (...) {
    drop_passes();
    throw;
  }
}

bool gpu_expert_cache::pass_stamps() const {
  // with overlap only where the copies have their own queue
  return dev_.info().timestamps && (!opt_.pass_overlap || (opt_.transfer_copies && dev_.info().transfer_queue));
}
bool gpu_expert_cache::copy_stamps() const {
  return pass_stamps() && (!opt_.transfer_copies || dev_.info().transfer_timestamps);
}

void gpu_expert_cache::wait_cut(gpu::commands& c) {
  const auto t0 = clk::now();
  dev_.wait(c);
  stats_.chunk_cut_seconds += since(t0);
}

void gpu_expert_cache::finish_passes() {
  try {
    const bool stamps = pass_stamps(), cstamps = copy_stamps();
    for (size_t i = 0; i < pass_copies_.size(); ++i) {
      dev_.wait(pass_copies_[i]);
      if (cstamps) (pass_copy_d2d_[i] ? stats_.chunk_d2d_device_seconds : stats_.chunk_copy_device_seconds) +=
          pass_copies_[i].seconds(0, 1);
    }
    for (size_t i = 0; i < pass_parts_.size(); ++i) {
      dev_.wait(pass_parts_[i]);
      if (!stamps) continue;
      const uint32_t at = pass_part_d2d_[i] ? 2 : 0;
      if (at) stats_.chunk_d2d_device_seconds += pass_parts_[i].seconds(0, 1);
      stats_.chunk_pass_device_seconds += pass_parts_[i].seconds(at, at + 1);
    }
    if (pf_layer_ < 0) retire_prefetch();  // read by the passes just waited for (or unused): they ran
  } catch (...) {
    drop_passes();
    throw;
  }
  pass_copies_.clear(), pass_parts_.clear(), pass_copy_d2d_.clear(), pass_part_d2d_.clear();
  group_copy_.assign(group_copy_.size(), -1);
}

void gpu_expert_cache::drop_passes() noexcept {
  try {
    for (gpu::commands& c : pass_copies_) dev_.wait(c);
    for (gpu::commands& c : pass_parts_) dev_.wait(c);
    for (gpu::commands& c : pf_copies_) dev_.wait(c);
  } catch (...) {  // the device is lost: nothing more to wait for
  }
  pass_copies_.clear(), pass_parts_.clear(), pass_copy_d2d_.clear(), pass_part_d2d_.clear(), pf_copies_.clear();
  group_copy_.assign(group_copy_.size(), -1);
  try {
    invalidate();
  } catch (...) {
  }
}

}  // namespace cmfx::driver
