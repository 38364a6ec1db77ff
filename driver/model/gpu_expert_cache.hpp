#pragma once
// Routed experts of a GPU graph (V4 and V4.1): resident when they fit the VRAM budget, otherwise a per-layer device
// expert cache. The graph runs a token as one submission up to the first layer's routing and one per layer after
// it (run_token); between them the host reads the layer's selected ids from mapped memory, copies the experts that
// are not resident from the mapped weights into a write-combined upload ring (copy threads), and records their
// copies into the least recently used slots plus the slot map's update before the layer's MoE, which reads its
// experts through the map (gpu::kernels::moe(..., slot_map)): ids and sum order unchanged, so the output is
// bit-identical to the resident layer's.
//
// cold_experts::cpu (--cold-experts cpu): a miss is copied in only into an empty slot or when its use count (decayed
// by half every cold_half_life tokens) exceeds by cold_margin that of the coldest resident expert this token does
// not use; every other miss is
// computed on the host's CPU (kernels::moe_forward on the mapped weights, the copy threads as its pool) from the
// layer's MoE input and routing weights, which the recording copies to the host with the ids. On the device its
// slot-map entry points at a stand-in slot (one per layer beyond the cached ones, holding the layer's expert 0:
// finite weights) and its routing weight is zeroed (the host writes the weights back after the cut), so the
// device's MoE adds exactly 0 for it (h = SwiGLU · 0); the recording then adds the host's sum to the MoE output
// (kernels::add from mapped memory). The result differs from the resident graph's by the CPU kernels' rounding and
// summation order (the parity cases bound it).
//
// cold_experts::automatic: the recording is cold_experts::cpu's; run_token times windows of auto_window tokens
// with each rule in turn (after auto_window tokens of copying to fill the cache), then runs the faster one for
// auto_exploit tokens, and measures again.
//
// Prefill chunks (gpu_expert_cache_passes.cpp): a chunk's tokens select most of a layer's experts, more than its
// slots. The graph cuts the chunk's recording after each layer's routing; the host reads the selected ids
// (chunk_ids) and run_passes runs the layer's experts in passes of at most `slots` experts — the resident ones
// first, each later pass's copied in over the least recently used slots (those of earlier passes last) — each pass a
// kernels::moe with
// moe_extras::pass over a slot map holding exactly its experts; kernels::moe_pass_sum then sums the rows of all
// passes: the resident layer's bits. Every needed expert moves at most once per chunk instead of once per token.
// With prefetch_bytes (transfer_copies only) prefetch() copies a layer's first non-resident experts into device
// images while its routing is computed, and its passes copy the selected ones device → device into their slots.
#include <cstdint>
#include <functional>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "cmfx/core/thread_pool.hpp"
#include "cmfx/kernels/act_precision.hpp"
#include "cmfx/kernels/moe.hpp"
#include "cmfx/vk/kernels.hpp"
#include "cold_experts.hpp"

namespace cmfx::driver {

/// How the expert cache is placed and what it does with misses (place()).
struct gpu_expert_cache_options {
  uint64_t budget = 0;          ///< device bytes the model may take (0 = no limit: every expert resident)
  uint32_t copy_threads = 8;    ///< host threads packing misses (and computing them with cold_experts::cpu)
  cold_experts cold = cold_experts::copy;
  act_precision act = act_precision::f32;  ///< the CPU experts' activations (the graph's expert_act)
  float swiglu_limit = 10.0f;   ///< the CPU experts' SwiGLU clamp (the config's)
  double cold_margin = 1.0;     ///< cold_experts::cpu: uses a miss needs beyond the coldest slot's to be copied in
  /// How run_token waits for each layer's part: true — spins on the fence's status (the end of a part seen
  /// sooner, one host core busy; not on a CPU device, whose threads need the core); false — the driver's blocking
  /// wait.
  bool spin_waits = true;
  /// cold_experts::cpu: the CPU experts' rows taken by the copy threads dynamically in chunks of this many rows
  /// (moe_forward's chunk_rows; 0 = a static partition, one range per thread).
  uint64_t cpu_chunk_rows = 64;
  /// run_passes: passes of at most half the slots, whose misses evict neither the pass's experts nor the previous
  /// pass's, so that a pass's copies are recorded without a barrier after the previous pass's MoE and run while it
  /// runs (twice the passes, each half the experts); false: passes of every slot, each pass's copies after the
  /// previous pass.
  bool pass_overlap = false;
  /// run_passes: each pass's copies in device::begin_transfer() recordings, ordered by sync points instead of
  /// barriers — after the MoE that last read their slots (the previous pass's; with pass_overlap the one before
  /// it), each pass's MoE after its copies. With device_options::transfer_queue they run on the copy engines beside
  /// the compute queue. Needs timeline semaphores (device_info::timeline).
  bool transfer_copies = false;
  /// run_passes: bytes of expert images packed per group of copies (at least half the top-k's experts, at most the
  /// slots): one group is packed while the device copies another. Tests set it small to get several groups per pass.
  uint64_t pass_group_bytes = uint64_t(32) << 20;
  /// run_passes with transfer_copies: device bytes (whole expert images, taken from the slots' share of the
  /// budget) into which prefetch() copies a layer's likely misses — the first of its experts not in its slots —
  /// while the part up to its routing runs, when the copy engine would otherwise wait for that routing. The layer's
  /// passes then take the prefetched experts that were selected first and copy them device → device into their
  /// slots. 0: off; prefetch_auto: min(2 GiB, budget / 32) with transfer_copies on a device with a transfer queue,
  /// else 0. Where the images would leave fewer routed slots than the passes need (top_k; one with cold_experts::cpu;
  /// two with pass_overlap), there are none. place_experts passes 0 where prompts will not run in passes.
  uint64_t prefetch_bytes = 0;
  /// prefetch() only for chunks whose selections reach this many per expert (rows × top_k / experts): with fewer,
  /// some prefetched experts go unselected (their copies wasted). With uniform routing an expert goes unselected
  /// with probability about e^-uses.
  double prefetch_min_uses = 4.0;
  /// Where the prefetched experts are copied into their slots: true — in the pass's part on the compute queue;
  /// false — in a transfer recording before the pass's other copies (on the H100 the copy engine moved them device
  /// → device at ~76 GB/s, time it did not spend on the host's experts).
  bool prefetch_d2d_compute = true;
  /// The upload rings the copy engine reads: false — write-combined system memory (device::alloc_upload); true —
  /// host-cached system memory (device::alloc_readback; the copy engine's reads snoop the CPU's caches).
  bool cached_staging = false;
  /// Pack the rings with non-temporal stores (stream_copy) instead of memcpy.
  bool stream_pack = false;
};
/// gpu_expert_cache_options::prefetch_bytes: min(2 GiB, budget / 32) with transfer_copies and a transfer queue.
inline constexpr uint64_t prefetch_auto = ~uint64_t(0);

/// How the expert cache streams prefill chunks' experts, as the driver sets it (cmfx run / serve / bench; the
/// graphs' own defaults are the plain path: copies on the compute queue, no overlap, no prefetch, write-combined
/// rings and memcpy). Measured on an H100 (docs/PERF.md "Fifty-fifth session"): a V4.1 2048-token chunk at a 60 GB
/// budget with 64 distinct host experts per role, 224.5 tok/s on the plain path, 303.4 with these defaults.
struct chunk_streaming {
  bool transfer_copies = true;  ///< gpu_expert_cache_options::transfer_copies (and device_options::transfer_queue)
  bool pass_overlap = true;     ///< gpu_expert_cache_options::pass_overlap
  uint64_t prefetch_bytes = prefetch_auto;  ///< gpu_expert_cache_options::prefetch_bytes
  bool cached_staging = true;   ///< gpu_expert_cache_options::cached_staging
  bool stream_pack = true;      ///< gpu_expert_cache_options::stream_pack
};
/// Sets a GPU graph's cache_* options (dsv4_gpu_options, dsv41_gpu_options) from s.
template <class GraphOptions>
void apply_streaming(const chunk_streaming& s, GraphOptions& g) {
  g.cache_transfer_copies = s.transfer_copies, g.cache_pass_overlap = s.pass_overlap;
  g.cache_prefetch_bytes = s.prefetch_bytes, g.cache_cached_staging = s.cached_staging;
  g.cache_stream_pack = s.stream_pack;
}

/// The cache's options from a GPU graph's (dsv4_gpu_options, dsv41_gpu_options: the same member names).
template <class GraphOptions>
gpu_expert_cache_options expert_cache_options(const GraphOptions& g, float swiglu_limit) {
  gpu_expert_cache_options o;
  o.budget = g.vram_budget, o.copy_threads = g.copy_threads, o.cold = g.cold, o.act = g.expert_act;
  o.swiglu_limit = swiglu_limit, o.cold_margin = g.cold_margin, o.spin_waits = g.cache_spin_waits;
  o.cpu_chunk_rows = g.cache_cpu_chunk, o.pass_overlap = g.cache_pass_overlap;
  o.transfer_copies = g.cache_transfer_copies, o.pass_group_bytes = g.cache_pass_group_bytes;
  o.prefetch_bytes = g.cache_prefetch_bytes, o.prefetch_min_uses = g.cache_prefetch_min_uses;
  o.prefetch_d2d_compute = g.cache_prefetch_d2d_compute;
  o.cached_staging = g.cache_cached_staging, o.stream_pack = g.cache_stream_pack;
  return o;
}
/// Tokens after which a use counts half in cold_experts::cpu's admission rule.
inline constexpr double cold_half_life = 64.0;
/// cold_experts::automatic: tokens timed per rule, and tokens run with the faster one before timing both again.
inline constexpr uint32_t auto_window = 16, auto_exploit = 224;

/// The expert cache's totals since construction.
struct gpu_expert_cache_stats {
  bool active = false;        ///< false: every expert resident
  cold_experts cold = cold_experts::copy;
  uint32_t slots = 0;         ///< routed-expert slots per layer (cold_experts::cpu: and the stand-in slot)
  uint64_t slot_bytes = 0;    ///< device bytes of one expert (gate, up, down)
  uint64_t tokens = 0;        ///< steps run with the cache
  uint64_t lookups = 0;       ///< selected routed experts (top_k per layer per token)
  uint64_t hits = 0;          ///< of those, already resident
  uint64_t bytes_moved = 0;   ///< host → device expert bytes
  double move_seconds = 0;    ///< host time spent copying experts into the upload ring (inside the steps)
  double copy_device_seconds = 0;  ///< device time of the ring → slot copies (timestamps; 0 without them)
  double wait_seconds = 0;    ///< host time blocked on the device's per-layer parts (compute + copies + latency)
  uint64_t cpu_experts = 0;   ///< misses computed on the host's CPU (cold_experts::cpu)
  double cpu_seconds = 0;     ///< host time computing them (reading the inputs, the experts, writing the sum)
  uint64_t cpu_rule_tokens = 0;  ///< tokens run with cold_experts::cpu's rule (automatic: the windows that chose it)
  double auto_copy_ms = 0, auto_cpu_ms = 0;  ///< automatic: the last windows' mean token times per rule
  // prefill chunks (run_passes)
  uint64_t chunk_layers = 0;       ///< layers of chunks run in passes
  uint64_t chunk_passes = 0;       ///< passes (≥ 1 per layer of a chunk)
  uint64_t chunk_experts = 0;      ///< distinct experts the layers' chunks selected
  uint64_t chunk_hits = 0;         ///< of those, resident when the layer's chunk began
  uint64_t chunk_bytes_moved = 0;  ///< host → device expert bytes for chunks
  double chunk_move_seconds = 0;   ///< host time packing them into the upload ring
  double chunk_wait_seconds = 0;   ///< host time waiting for the ring (the device's copies of earlier groups)
  double chunk_copy_device_seconds = 0;  ///< device time of their ring → slot copies (timestamps; 0 without them)
  double chunk_pass_device_seconds = 0;  ///< device time of the passes' MoE recordings (timestamps)
  double chunk_cut_seconds = 0;    ///< host time waiting for the parts up to each layer's routing (wait_cut)
  double chunk_pass_host_seconds = 0;  ///< host time in run_passes (packing, ring waits, recording, submitting)
  uint32_t prefetch_images = 0;        ///< device images for prefetch() (0: none; place, drop_prefetch)
  uint64_t chunk_prefetched = 0;       ///< experts prefetch() copied in (counted in chunk_bytes_moved)
  uint64_t chunk_prefetch_used = 0;    ///< of those, selected by their layer's chunk (the rest wasted)
  double chunk_d2d_device_seconds = 0;  ///< device time of the prefetched experts' copies into slots (timestamps)
};

/// The counters of `now` since `then` (both of one cache: the totals' differences; the shape and the automatic
/// rule's last timings as `now` has them).
gpu_expert_cache_stats gpu_expert_cache_since(const gpu_expert_cache_stats& now, const gpu_expert_cache_stats& then);

/// "expert cache: S of E slots per layer, hit rate …, … MB moved per token" (or "every expert resident").
std::string gpu_expert_cache_line(const gpu_expert_cache_stats& s, uint32_t experts);

class gpu_expert_cache {
 public:
  gpu_expert_cache(gpu::device& dev, uint32_t experts, uint32_t top_k);

  /// Layer l's (= the count so far) host experts and shared expert; sets moe's shape (experts, dim, inter) and
  /// whether the shared expert is stacked with the routed ones (same formats and shape; else the graph runs it
  /// apart); place() fills it. The views must stay valid while the model lives (mapped weights). Returns the weight
  /// bytes one token reads from the layer's stacked experts (top_k routed + the stacked shared one).
  uint64_t add_layer(const std::vector<expert_view>& experts, const expert_view& shared, gpu::gpu_moe* moe);
  /// Bytes every layer's routed (and stacked shared) experts take when all are resident — what place() compares
  /// with the budget.
  uint64_t resident_bytes() const;
  /// The smallest budget place() accepts beside `used` device bytes (with the expert cache in mode `cold`).
  uint64_t minimum_bytes(uint64_t used, cold_experts cold) const;
  /// After every other allocation (`used` device bytes): uploads every layer's experts when they fit o.budget
  /// (0 = no limit), else allocates the same number of slots per layer (what the budget leaves: ≥ top_k with
  /// cold_experts::copy, ≥ 0 besides the slot of zeros with cold_experts::cpu; else a usage_error naming the
  /// minimum). Returns the device bytes it took.
  uint64_t place(uint64_t used, const gpu_expert_cache_options& o);

  bool active() const noexcept { return stats_.active; }
  /// The graph's host worker threads (made by the first call, `threads` of them, at most the machine's cores): the
  /// cache's copies and CPU experts, and the prefill chunks' host gathers (a chunk's, before its recording: never
  /// at the same time as the cache's copies).
  thread_pool& host_pool(uint32_t threads);
  const gpu_expert_cache_stats& stats() const noexcept { return stats_; }
  /// Layer l's slot map for kernels::moe (no view when every expert is resident).
  gpu::view slot_map(uint32_t l) const;
  /// Where a recording copies layer l's selected ids (top_k uint32) for the host to read after its part ran.
  gpu::view ids_slot(uint32_t l) const;
  /// cold_experts::cpu with the cache active: the recording also copies layer l's routing weights (top_k f32) to
  /// weights_slot(l) and its MoE input (dim f32) to input_slot(l) before the cut; after it, copies weights_in(l)
  /// (the weights with the CPU experts' zeroed) over the routing's weights before the MoE, and adds cpu_sum(l)
  /// (dim f32, the host's experts) to the MoE output after it. Empty views otherwise.
  bool cpu_fallback() const noexcept { return stats_.active && stats_.cold != cold_experts::copy; }
  gpu::view weights_slot(uint32_t l) const;
  gpu::view input_slot(uint32_t l) const;
  gpu::view weights_in(uint32_t l) const;
  gpu::view cpu_sum(uint32_t l) const;

  /// Runs one token: `pre` and `first` (up to the first layer's routing) then segs[l] (the rest after layer l's
  /// routing), making each layer's selected experts resident in between. With cpu_fallback() two parts per layer,
  /// cut before the host's sum is added: segs[2l] (the MoE) runs while the host computes its experts, segs[2l + 1]
  /// is submitted once their sum is written. `between` (may be empty; must not throw)
  /// runs after each submission, before the host waits for it: the next token's recording, a layer at a time.
  /// Returns when the token ran; on an error waits for everything submitted and empties the cache before rethrowing.
  void run_token(gpu::commands& pre, gpu::commands& first, std::vector<gpu::commands>& segs,
                 const std::function<void()>& between = {});

  /// Slots a pass can use (the stand-in slot of cold_experts::cpu apart; 0 when the cache is off).
  uint32_t pass_slots() const noexcept { return stats_.active ? stats_.slots : 0; }
  /// Where a chunk's recording copies its routing's selected ids (`pairs` uint32) before the cut that hands them
  /// to the host (grown as needed; its contents are lost when it grows).
  gpu::view chunk_ids(uint64_t pairs);
  /// What the device wrote to chunk_ids(pairs) (valid once that part ran).
  std::span<const uint32_t> read_chunk_ids(uint64_t pairs);
  /// Layer l's experts for a chunk whose selected ids are `ids` (read_chunk_ids after the part up to the routing
  /// ran): the distinct experts in passes of ≤ pass_slots() — the resident ones (and as many misses as the slots
  /// not holding them take) first, then the rest, each pass's misses copied in over the least recently used slots
  /// (the experts of earlier passes last) through the upload ring, in groups whose copies overlap the packing of
  /// the next. Per pass: submits the copies, then a part that sets the slot map to exactly the pass's experts and
  /// in which record(part, first) records the pass (first: the pass that also runs a stacked shared expert). With
  /// pass_overlap: passes of ≤ pass_slots() / 2, the resident ones reserved until their pass, misses evicting
  /// neither the pass's nor the previous pass's experts, the copies without a barrier (beside the previous pass). The
  /// caller records kernels::moe_pass_sum after it and submits it after this returns. Returns the passes; the parts
  /// and copies are waited for by finish_passes (after the chunk's last part). On an error: as drop_passes, then
  /// rethrows.
  uint32_t run_passes(uint32_t l, std::span<const uint32_t> ids,
                      const std::function<void(gpu::commands& part, bool first)>& record);
  /// Right after the part up to layer l's routing was submitted (record_chunk_experts), for a chunk of `pairs`
  /// selections: with prefetch_bytes, packs the first of layer l's experts not in its slots (as many as the bytes
  /// take) and submits their copies into the device's prefetch images, after the copies submitted before — the
  /// copy engine keeps copying while the part runs. Nothing when the option is off, the chunk is below
  /// prefetch_min_uses, or every expert is resident. run_passes(l) uses them; any other run_passes drops them.
  void prefetch(uint32_t l, uint64_t pairs);
  /// Frees the prefetch images and their staging (place_experts, where prompts will not run in passes after all;
  /// their bytes stay unused, as the chunk scratch's). Before any prefetch(). Returns the device bytes freed.
  uint64_t drop_prefetch();
  /// Waits for a chunk's part up to a layer's routing (record_chunk_experts' cut), counting the time.
  void wait_cut(gpu::commands& c);
  /// Waits for the parts and copies of run_passes (the chunk's end, or the next layer's cut).
  void finish_passes();
  /// For an error path: waits for them without throwing and empties the cache (the slots may not hold what the host
  /// believes).
  void drop_passes() noexcept;

 private:
  struct layer {
    std::vector<expert_view> host;  // routed experts (views into the mapped weights)
    expert_view shared;
    gpu::gpu_moe* moe = nullptr;
    std::vector<uint32_t> slot_of;   // [experts]
    std::vector<int64_t> expert_in;  // [slots]: −1 empty
    std::vector<uint64_t> last_use;  // [slots]
    gpu::buffer map;                 // uint32 [experts] (0xFFFFFFFF = not resident)
    std::vector<uint32_t> map_dev;   // what `map` holds (cold_experts::cpu: slot_of, CPU experts → the stand-in)
    std::vector<double> heat;        // [experts] decayed use counts (cold_experts::cpu) as of heat_at
    std::vector<uint64_t> heat_at;   // [experts] token of the last update
    // [experts] log2(heat) + heat_at / cold_half_life: the decay scales every heat alike, so this orders the
    // experts by their current heat without a power per comparison (the coldest-slot search)
    std::vector<double> heat_key;
    bool cpu_used = false;           // the last token's cpu_sum of this layer is not zero
    bool stacked_shared = false;     // the shared expert stacked with the routed ones (add_layer)
  };
  struct chunk {
    uint8_t* to;
    const uint8_t* from;
    uint64_t bytes;
  };
  /// Makes layer l's selected experts resident: per missing expert, packs its image into the ring and submits a
  /// recording of its copy into a slot (appended to `out`; the last one also updates the slot map). With
  /// cold_experts::cpu the misses not admitted are computed on the host into cpu_sum(l) and their weights zeroed in
  /// weights_in(l). `rec`: the layer's
  /// record in the readback buffer (ids, then weights and input). Returns the number of experts moved.
  uint32_t fill(uint32_t l, const uint8_t* rec, std::vector<gpu::commands>& out);
  /// Layer l's CPU experts (fill's choice: positions j of the selection) into cpu_sum(l); zeros when there are none.
  void compute_on_cpu(uint32_t l, const uint8_t* rec);
  double heat(const layer& L, uint32_t e) const;
  void invalidate();
  struct move_to {
    uint32_t e, slot;
    uint32_t image = 0xFFFFFFFFu;  // the prefetch image holding e (else packed into the ring)
  };
  /// run_passes: packs the experts of `moves` into the ring in groups and submits each group's slot copies (after
  /// a barrier: everything submitted before has run; without one — overlap — the copies may run beside the work
  /// after the last barrier, i.e. the previous pass's MoE, whose slots they do not touch). With transfer_copies:
  /// transfer recordings after `after` instead of a barrier.
  /// Moves from prefetch images come first; unless prefetch_d2d_compute (then the pass's part copies them) they are
  /// copied device → device in one transfer recording before the groups (after `after` and the prefetch's copies).
  void copy_in(layer& C, const std::vector<move_to>& moves, bool overlap, gpu::sync_point after);
  /// Appends expert e of layer C's image (its planes in moe_slot_sources order) to chunks_ at `to`, in pieces.
  void add_pieces(uint8_t* to, const layer& C, uint32_t e);
  /// Copies chunks_ on the copy threads (memcpy, or stream_copy with stream_pack); returns the seconds it took.
  double pack_chunks();
  /// Host memory for an upload ring (write-combined, or host-cached with cached_staging).
  gpu::buffer alloc_staging(uint64_t bytes);
  /// The prefetch images' view (image i of pf_per_buf_ per buffer).
  gpu::view prefetch_image(uint32_t i) const;
  /// Waits for the prefetch's copies (adding their timestamps) and forgets them.
  void retire_prefetch();
  /// Whether run_passes stamps its passes: not with pass_overlap on one queue (a timestamp waits for the work
  /// before it, which would hold the next pass's copies behind the MoE they should overlap).
  bool pass_stamps() const;
  /// Whether it stamps its copies: pass_stamps(), and with transfer_copies the transfer queue has timestamps.
  bool copy_stamps() const;

  gpu::device& dev_;
  uint32_t experts_, top_k_;
  std::vector<layer> layers_;
  gpu::buffer ring_;      // host-written: the packed images of one layer's missing experts
  gpu::buffer readback_;  // host-read (cached): every layer's ids (cold_experts::cpu: and weights and MoE input)
  uint64_t rec_stride_ = 0;  // bytes per layer in readback_
  gpu::buffer cpu_sums_;  // host-written: every layer's CPU experts' sum (cold_experts::cpu)
  uint64_t sum_stride_ = 0;
  gpu::buffer weights_in_;  // host-written: every layer's routing weights, the CPU experts' zeroed
  uint64_t w_stride_ = 0;
  uint32_t stand_in_ = 0;  // cold_experts::cpu: the slot the CPU experts map to
  gpu_expert_cache_options opt_;
  moe_scratch cpu_scratch_;
  std::vector<float> cpu_in_, cpu_out_;
  std::vector<uint32_t> pending_cpu_;  // fill's CPU experts of the layer (positions j), for compute_on_cpu
  std::unique_ptr<thread_pool> copiers_;
  std::vector<chunk> chunks_;  // one layer's packed images in pieces ≤ 1 MiB (reused)
  gpu::buffer chunk_ids_;      // host-read: a chunk's selected ids (chunk_ids)
  std::vector<gpu::commands> pass_parts_, pass_copies_;  // run_passes' submissions, until finish_passes
  gpu::buffer pass_ring_;  // host-written: two groups of pass_per_ packed images (run_passes' copies)
  uint64_t pass_per_ = 0;
  std::vector<int64_t> group_copy_;  // [2 groups]: the pass_copies_ entry that last read the group (−1: none)
  uint64_t next_group_ = 0;
  std::vector<uint8_t> pass_copy_d2d_;  // [pass_copies_]: the recording copies prefetch images (its own stamps)
  std::vector<uint8_t> pass_part_d2d_;  // [pass_parts_]: the part copies prefetch images (stamps 0, 1; the pass 2, 3)
  // prefetch(): device images and their host staging, pf_per_buf_ images per buffer; the layer whose experts
  // pf_experts_ (by image) holds (−1: none); the copies in; the last recording that read the images
  std::vector<gpu::buffer> pf_dev_, pf_host_;
  uint32_t pf_cap_ = 0, pf_per_buf_ = 0, pf_group_ = 1;  // pf_group_: images per recording of pf_copies_
  int64_t pf_layer_ = -1;
  std::vector<uint32_t> pf_experts_;
  std::vector<gpu::commands> pf_copies_;
  gpu::sync_point pf_free_;
  gpu_expert_cache_stats stats_;
  uint64_t tick_ = 0;
  bool cpu_rule_ = false;  // this token: cold_experts::cpu's rule (else copy's)
  // cold_experts::automatic: the phase (0 fill, 1 time copy, 2 time cpu, 3 run the faster), its tokens so far,
  // and the time of the timed ones
  uint32_t auto_phase_ = 0, auto_n_ = 0;
  double auto_s_ = 0;
};

}  // namespace cmfx::driver
