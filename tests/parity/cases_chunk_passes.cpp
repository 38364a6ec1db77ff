// Prefill chunks under the expert cache (driver/model/chunk_experts.hpp, gpu_expert_cache::run_passes): a chunk's
// recording is cut after each layer's routing; the host reads the selected ids and runs the layer's experts in passes
// of at most `slots` experts, copying each pass's misses in; kernels::moe_pass_sum sums every pass's rows. A graph
// whose budget leaves `slots` slots per layer must give the prompt's logits and the decode steps after it bit for bit
// as the same graph with every expert resident (int8 expert activations in the chunks: the passes' path), and its
// statistics must add up.
#include <cmath>
#include <cstring>

#include "harness.hpp"
#include "model/dsv41_forward.hpp"
#include "model/dsv41_gpu.hpp"
#include "model/dsv4_forward.hpp"
#include "model/dsv4_gpu.hpp"
#include "model_toys.hpp"

namespace cmfx::parity {

namespace {

using namespace cmfx::driver;

constexpr uint32_t kChunk = 7;
constexpr uint64_t kDecode = 6, kAgain = 9;

bool same_bits(const std::vector<float>& a, const std::vector<float>& b) {
  return a.size() == b.size() && (a.empty() || std::memcmp(a.data(), b.data(), a.size() * 4) == 0);
}

double nmse(const std::vector<float>& a, const std::vector<float>& ref) {
  double num = 0, den = 0;
  for (size_t i = 0; i < ref.size(); ++i) {
    const double e = double(a[i]) - ref[i];
    num += e * e, den += double(ref[i]) * ref[i];
  }
  return den > 0 ? num / den : num;
}

/// Model (dsv4_model / dsv41_model, opened with CpuOptions) and its GPU graph resident and with a budget leaving
/// `slots` expert slots per layer (cold: the cache's cold_experts rule; cpu keeps a stand-in slot besides them).
/// prompt 40 = 5 × 7 + 5: the same chunks in both; prompt 43 = 6 × 7 + 1: the cached graph moves a row into the last
/// chunk (a pass needs two rows: 5 of 7, one of 6, one of 2), which the resident graph is given as three calls marked
/// as one prefill (35, 6, 2 ids). The prompt's logits bit for bit; then kDecode steps and a second call of kAgain ids,
/// whose chunks (V4; V4.1's are decode steps under the stale-key rule) start from the slots the steps left: bit for
/// bit with cold_experts::copy; with cpu the host computes some experts of the steps (its rounding: the cold-cpu
/// cases bound it against the CPU graph), so here they must only run, with finite logits.
template <class Model, class CpuOptions, class GpuModel, class GpuOptions>
std::string passes_case(suite& s, const std::string& path, uint32_t slots, uint64_t prompt, cold_experts cold,
                        bool overlap, bool transfer, bool small_groups, uint32_t prefetch, bool d2d_transfer,
                        bool cached_stream, int prefetch_off, uint64_t seed, std::string& info) {
  CpuOptions co;
  co.threads = 1;
  auto cpu = Model::open(path, co);
  const auto& cf = cpu->config();
  GpuOptions go;
  go.max_ctx = prompt + kDecode + kAgain;
  go.prefill_chunk = kChunk;
  go.gemm = gpu::gemm_precision::f32;
  go.expert_act = act_precision::i8;
  go.prefill_experts = prefill_expert_mode::act;  // int8 experts in the chunks too, whatever their format
  go.device_embedding = false;
  go.vram_budget = uint64_t(1) << 60;  // the chunk scratch allocated up front, as under a budget; every expert fits
  GpuModel resident(cpu->weights(), s.dev, s.kern, go);
  if (resident.cache_stats().active) return "a budget of 2^60 bytes activated the expert cache";
  const expert_view& e0 = cpu->weights().layers.at(0).experts.at(0);
  auto vb = [](const matrix_view& v) { return v.data_bytes + v.scale_bytes; };
  const uint64_t one = vb(e0.gate) + vb(e0.up) + vb(e0.down);
  const uint32_t kept = slots + (cold == cold_experts::copy ? 0 : 1);  // and the stand-in slot
  go.vram_budget = resident.weight_bytes() + resident.state_bytes() - uint64_t(cf.layers) * (cf.experts - kept) * one;
  if (prefetch) {  // `prefetch` images beside the slots, for every chunk however few its rows
    go.vram_budget += prefetch * one;
    go.cache_prefetch_bytes = prefetch * one;
    go.cache_prefetch_min_uses = 0;
    go.cache_prefetch_d2d_compute = !d2d_transfer;
  } else if (prefetch_off == 1) {  // one image, not in the budget: it would leave slots - 1 < top_k = slots (2)
    if (slots != cf.top_k) return "the refusal case needs slots = top_k";  // (cpu + overlap: < 2, the pass minimum)
    go.cache_prefetch_bytes = one;
    go.cache_prefetch_min_uses = 0;
  } else if (prefetch_off == 2) {  // images beside the slots, but the chunks' uses per expert below the gate
    go.vram_budget += 3 * one;
    go.cache_prefetch_bytes = 3 * one;
    go.cache_prefetch_min_uses = double(kChunk) * cf.top_k / cf.experts + 0.5;
  }
  go.cache_cached_staging = go.cache_stream_pack = cached_stream;
  go.cold = cold;
  go.cache_pass_overlap = overlap;
  go.cache_transfer_copies = transfer;
  // ⌊top_k / 2⌋ (≥ 1) images a group: several groups a pass; without overlap more than the ring's two, so a pass
  // reuses a group (its host waits for the pass's own earlier copy)
  if (small_groups) go.cache_pass_group_bytes = 1;
  go.budget_keeps_chunks = true;  // the toy's experts are smaller than the chunk scratch: they would fit without it
  GpuModel cached(cpu->weights(), s.dev, s.kern, go);
  const gpu_expert_cache_stats& cs = cached.cache_stats();
  if (!cs.active || cs.slots != slots)
    return "the budget left " + std::to_string(cs.slots) + " slots per layer (active " + std::to_string(cs.active) +
           "), not " + std::to_string(slots);
  if (!cached.prefill_chunked()) return "the cached graph does not run prompts in chunks";
  const std::vector<uint32_t> ids = random_ids(seed, cf.vocab, prompt + kDecode + kAgain);
  const std::span<const uint32_t> p(ids.data(), prompt);
  const uint64_t ragged = prompt % kChunk == 1, chunks = (prompt + kChunk - 1) / kChunk;
  const std::vector<float> a = cached.forward(p, true);
  std::vector<float> b;
  if (ragged) {  // the cached graph's chunk boundaries: 5 × 7 rows, then 6, then 2
    const uint64_t head = prompt - 8;
    (void)resident.mark_prefill(prompt);  // V4.1: one official prefill, as the cached graph's one call
    (void)resident.forward(p.first(head), false);
    (void)resident.forward(p.subspan(head, 6), false);
    b = resident.forward(p.subspan(head + 6), true);
  } else {
    b = resident.forward(p, true);
  }
  if (cached.last_prefill().chunks != chunks)
    return "the cached prompt ran " + std::to_string(cached.last_prefill().chunks) + " chunks, not " +
           std::to_string(chunks);
  if (a.size() != cf.vocab || cached.pos() != prompt) return "no logits or a wrong position after the cached prompt";
  if (!same_bits(a, b))
    return "the prompt's logits differ from the resident graph's (NMSE " + std::to_string(nmse(a, b)) + ")";
  const uint64_t layer_runs = cs.chunk_layers;
  const bool exact = cold == cold_experts::copy;  // the host's experts (cpu) round otherwise
  auto compare = [&](const std::vector<float>& x, const std::vector<float>& y, const std::string& where) {
    if (x.size() != y.size()) return where + ": no logits";
    if (exact && !same_bits(x, y))
      return where + " differs from the resident graph's (NMSE " + std::to_string(nmse(x, y)) + ")";
    for (const float v : x)
      if (!std::isfinite(v)) return where + ": a logit is not finite";
    return std::string();
  };
  for (uint64_t t = prompt; t < prompt + kDecode; ++t) {
    const std::span<const uint32_t> step(&ids[t], 1);
    if (auto w = compare(cached.forward(step, true), resident.forward(step, true),
                         "decode step at position " + std::to_string(t));
        !w.empty())
      return w;
  }
  const std::span<const uint32_t> again(ids.data() + prompt + kDecode, kAgain);
  if (auto w = compare(cached.forward(again, true), resident.forward(again, true), "the second call's logits");
      !w.empty())
    return w;
  const uint64_t again_chunks = cached.last_prefill().chunks;
  if (cs.chunk_layers != layer_runs + again_chunks * cf.layers)
    return "statistics: the second call ran " + std::to_string(again_chunks) + " chunks but " +
           std::to_string(cs.chunk_layers - layer_runs) + " layer runs";
  if (layer_runs != chunks * cf.layers)
    return "statistics: " + std::to_string(layer_runs) + " layer runs of the prompt's chunks, not " +
           std::to_string(chunks * cf.layers);
  if (cs.chunk_passes <= cs.chunk_layers) return "statistics: no layer of a chunk needed more than one pass";
  // with overlap a pass takes at most half the slots: at least ⌈distinct / ⌊slots / 2⌋⌉ passes per layer run
  if (overlap && cs.chunk_passes * (slots / 2) < cs.chunk_experts)
    return "statistics: overlapped passes held more than half the slots";
  if (cs.chunk_bytes_moved != (cs.chunk_experts - cs.chunk_hits - cs.chunk_prefetch_used + cs.chunk_prefetched) *
                                  cs.slot_bytes)
    return "statistics: chunk bytes moved != (copied experts - prefetched ones used + prefetched) x slot bytes";
  if (prefetch && (cs.chunk_prefetched == 0 || cs.chunk_prefetch_used == 0))
    return "statistics: no expert prefetched, or none of them used";
  const uint32_t images = prefetch ? prefetch : prefetch_off == 2 ? 3 : 0;
  if (cs.prefetch_images != images)
    return "statistics: " + std::to_string(cs.prefetch_images) + " prefetch images, not " + std::to_string(images);
  if (prefetch_off && cs.chunk_prefetched != 0)
    return std::string("statistics: experts prefetched although ") +
           (prefetch_off == 1 ? "the budget had no room for the images" : "the chunks were below prefetch_min_uses");
  if (cs.chunk_prefetch_used > cs.chunk_prefetched || cs.chunk_prefetched > cs.chunk_layers * prefetch)
    return "statistics: more prefetched experts used than prefetched, or more prefetched than the images allow";
  if (cs.chunk_experts > cs.chunk_layers * cf.experts || cs.chunk_hits == 0)
    return "statistics: distinct experts or hits out of range";
  const uint64_t steps = kDecode + (again_chunks ? 0 : kAgain);
  if (cs.tokens != steps || cs.lookups != steps * cf.layers * cf.top_k)
    return "statistics: the decode steps' counts do not add up";
  if (!exact && cs.cpu_experts == 0) return "--cold-experts cpu: no expert of the steps ran on the host";
  char b2[320];
  std::snprintf(b2, sizeof b2,
                "%u of %u slots%s%s%s%s%s, %llu + %llu chunks, %.2f passes per layer, %.1f %% resident; %s",
                slots, cf.experts, cold == cold_experts::copy ? "" : " + stand-in (cold experts on the CPU)",
                overlap ? " (copies beside the previous pass)" : "",
                transfer ? (s.dev.info().transfer_queue ? " (on the transfer queue)" : " (transfer recordings)") : "",
                small_groups ? " (small copy groups)" : "",
                prefetch ? (" (" + std::to_string(cs.chunk_prefetch_used) + " of " +
                            std::to_string(cs.chunk_prefetched) + " prefetched experts used, into their slots on the " +
                            (d2d_transfer ? "transfer" : "compute") + " queue)").c_str() : "",
                (unsigned long long)chunks, (unsigned long long)again_chunks,
                double(cs.chunk_passes) / double(cs.chunk_layers),
                100.0 * double(cs.chunk_hits) / double(cs.chunk_experts),
                exact ? "bit for bit" : "the prompt bit for bit, the steps with host experts");
  info = b2;
  return {};
}

}  // namespace

void chunk_passes_cases(suite& s) {
  toy_files files;
  struct variant {
    uint64_t prompt;
    uint32_t slots;
    cold_experts cold;
    bool overlap;
    bool transfer;  // the passes' copies in transfer recordings ordered by sync points
    bool small;     // copy groups of ⌊top_k / 2⌋ images (several a pass) instead of 32 MiB
    uint32_t prefetch = 0;  // images prefetched while each layer's routing runs (transfer copies)
    bool d2d_transfer = false;  // their copies into the slots in transfer recordings (else in the passes' parts)
    bool cached_stream = false;  // host-cached upload rings packed with non-temporal stores
    int prefetch_off = 0;  // prefetch asked for but not to happen: 1 the budget has no room, 2 the chunks too small
  };
  using C = cold_experts;
  for (const variant v : {variant{40, 2, C::copy, false, false, false}, variant{40, 3, C::copy, false, false, false},
                          variant{43, 2, C::copy, false, false, false}, variant{40, 1, C::cpu, false, false, false},
                          variant{40, 3, C::copy, true, false, false}, variant{43, 4, C::copy, true, false, true},
                          variant{40, 4, C::copy, false, false, true}, variant{43, 2, C::copy, false, true, false},
                          variant{40, 4, C::copy, false, true, true}, variant{40, 4, C::copy, true, true, true},
                          variant{40, 2, C::copy, false, true, false, 3, false, true},
                          variant{43, 4, C::copy, true, true, true, 5, true},
                          variant{40, 2, C::copy, false, true, false, 0, false, false, 1},
                          variant{40, 2, C::cpu, true, true, false, 0, false, false, 1},
                          variant{40, 3, C::copy, true, true, false, 0, false, false, 2}}) {
    const std::string what = "prefill chunks of 7 in expert passes, " + std::to_string(v.slots) + " slots" +
                             (v.cold == cold_experts::cpu ? " (cold experts on the CPU)" : "") +
                             (v.overlap ? " overlapping copies" : "") + (v.transfer ? " transfer copies" : "") +
                             (v.small ? " small groups" : "") +
                             (v.prefetch ? " prefetch " + std::to_string(v.prefetch) : "") +
                             (v.d2d_transfer ? " (transfer d2d)" : "") +
                             (v.cached_stream ? " cached rings, streamed" : "") +
                             (v.prefetch_off == 1   ? " prefetch refused (no room)"
                              : v.prefetch_off == 2 ? " prefetch gated (few uses)"
                                                    : "") +
                             ", " +
                             std::to_string(v.prompt) + "+" + std::to_string(kDecode) + "+" + std::to_string(kAgain) +
                             " tokens";
    s.run("model_v4", "-", what + ", cmf q4tp toy", [&, v](uint64_t seed, std::string& info) {
      return passes_case<dsv4_model, dsv4_options, dsv4_gpu_model, dsv4_gpu_options>(
          s, files.make("cmf", "q4tp"), v.slots, v.prompt, v.cold, v.overlap, v.transfer, v.small, v.prefetch,
          v.d2d_transfer, v.cached_stream, v.prefetch_off, seed, info);
    });
    s.run("model_v41", "-", what + ", release toy", [&, v](uint64_t seed, std::string& info) {
      return passes_case<dsv41_model, dsv41_options, dsv41_gpu_model, dsv41_gpu_options>(
          s, files.make("release", "native", "v41"), v.slots, v.prompt, v.cold, v.overlap, v.transfer, v.small,
          v.prefetch, v.d2d_transfer, v.cached_stream, v.prefetch_off, seed, info);
    });
  }
}

}  // namespace cmfx::parity
