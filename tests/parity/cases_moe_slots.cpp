// Expert-cache MoE cases (gpu_moe::slots, kernels::moe's slot_map; issue #9's --vram-budget): a cached layer
// against the resident layer of the same experts, bit for bit, and against the CPU kernel; the interface's
// refusals. Formats that the expert cache serves: q4tp, q2tp, MXFP4, FP8 (block 128 and 32), f32 and int8
// activations, batch 1 and 3, with and without the shared expert.
#include <algorithm>
#include <bit>

#include "cmfx/core/error.hpp"
#include "cmfx/core/thread_pool.hpp"
#include "cmfx/kernels/moe.hpp"
#include "harness.hpp"
#include "moe_fixtures.hpp"

namespace cmfx::parity {

namespace {

using namespace moe_fixtures;

// ---- expert cache (gpu_moe::slots, kernels::moe's slot_map)

constexpr uint32_t kSlots = 6;  // slots of the cached layer in these cases (fewer than the 16 experts)

/// Runs kernels::moe on one layer into a fresh poisoned output; returns "" or why not. disp: dispatches recorded.
std::string run_moe(suite& s, const gpu::gpu_moe& m, const gpu::buffer& xb, uint32_t n, const gpu::buffer& ib,
                    const gpu::buffer& wb, uint32_t k, act_precision act, gpu::view slot_map, std::vector<float>& got,
                    uint32_t& disp) {
  const uint64_t hn = gpu::kernels::moe_scratch_floats(m, n, k), d = m.dim;
  guarded hg(s.dev, hn * 4), og(s.dev, n * d * 4);
  gpu::commands c = s.dev.begin();
  s.kern.moe(c, m, xb, n, ib, wb, k, kLimit, hg.payload(), og.payload(), act, slot_map);
  disp = c.dispatch_count();
  s.submit(c);
  got.assign(n * d, 0.0f);
  std::vector<float> h(hn);
  std::string why;
  if (!og.read(got.data(), why) || !hg.read(h.data(), why)) return why;
  for (float v : got)
    if (std::bit_cast<uint32_t>(v) == guarded::nan_word) return "an output was not written (poison left)";
  return {};
}

/// A cached layer (kSlots slots, alloc_moe_slots / write_moe_slot) against the resident layer (upload_moe) of the
/// same E experts: the experts the tokens select, plus one unselected expert, sit at a random permutation of the
/// slots (written over stale experts first); every other expert's map entry is garbage (≥ kSlots or a slot that
/// holds another expert). The outputs must be bit-identical (same selected experts, same sum order), and the
/// resident layer's must match the CPU kernel (so that a bit-identical pair of wrong outputs fails). Then one
/// selected expert's entry ≥ kSlots: NaN for the tokens that select it, the other tokens still bit-identical.
template <class F>
std::string moe_slots_case(suite& s, uint64_t seed, uint32_t E, uint64_t d, uint64_t I, uint32_t k, uint32_t n,
                           bool shared, act_precision act, std::string& info) {
  rng r(seed);
  const std::vector<host_expert> ex = make_experts<F>(r, E + (shared ? 1 : 0), d, I);
  const std::vector<expert_view> views = views_of(ex, E);
  const expert_view* sh = shared ? &ex.back().v : nullptr;
  // the selected set: k + 1 experts (≤ kSlots − 1, so one slot holds an unselected expert); token 0 selects
  // `lone` (the last of the set), which no other token selects
  std::vector<uint32_t> pool(E);
  for (uint32_t e = 0; e < E; ++e) pool[e] = e;
  for (uint32_t j = 0; j < kSlots; ++j) std::swap(pool[j], pool[j + r.below(E - j)]);
  const std::vector<uint32_t> sel(pool.begin(), pool.begin() + k + 1);
  const uint32_t lone = sel[k], extra = pool[k + 1];
  std::vector<uint32_t> ids(uint64_t(n) * k);
  std::vector<float> w(uint64_t(n) * k);
  for (uint32_t t = 0; t < n; ++t) {
    std::vector<uint32_t> cand(sel.begin(), sel.begin() + k);  // the k experts besides `lone`
    if (t == 0) cand[r.below(k)] = lone;
    for (uint32_t j = 0; j < k; ++j) {
      std::swap(cand[j], cand[j + r.below(k - j)]);
      ids[t * k + j] = cand[j];
      w[t * k + j] = r.uniform(0.1f, 1.5f);
    }
  }
  const std::vector<float> X = r.normal(n * d);
  // the cache: stale experts everywhere first, then the needed ones at a random permutation of the slots
  const gpu::gpu_moe gm = gpu::upload_moe(s.dev, views, sh);
  const gpu::gpu_moe gc = gpu::alloc_moe_slots(s.dev, views[0], E, kSlots, sh);
  for (uint32_t sl = 0; sl < kSlots; ++sl) gpu::write_moe_slot(s.dev, gc, sl, views[pool[kSlots - 1 - sl]]);
  std::vector<uint32_t> perm(kSlots);
  for (uint32_t i = 0; i < kSlots; ++i) perm[i] = i;
  for (uint32_t i = 0; i + 1 < kSlots; ++i) std::swap(perm[i], perm[i + r.below(kSlots - i)]);
  std::vector<uint32_t> map(E);
  for (uint32_t e = 0; e < E; ++e)  // garbage: out of range, or a slot holding another expert
    map[e] = r.below(2) ? uint32_t(kSlots + r.below(1000)) : uint32_t(r.below(kSlots));
  map[pool[0]] = 0xFFFFFFFFu;
  std::vector<uint32_t> resident(sel);
  resident.push_back(extra);
  for (uint32_t i = 0; i < resident.size(); ++i) {
    gpu::write_moe_slot(s.dev, gc, perm[i], views[resident[i]]);
    map[resident[i]] = perm[i];
  }
  for (uint32_t e = 0; e < E; ++e)  // an unselected expert never points at the slot of a selected one only
    if (std::find(resident.begin(), resident.end(), e) == resident.end() && map[e] < kSlots &&
        std::find(perm.begin(), perm.begin() + long(resident.size()), map[e]) == perm.begin() + long(resident.size()))
      map[e] = perm[0];
  // the map at a 12-byte offset (not on the storage alignment: exercises its offset in the push constants)
  std::vector<uint32_t> map_buf(3, 0xA5A5A5A5u);
  map_buf.insert(map_buf.end(), map.begin(), map.end());
  const gpu::buffer xb = upload(s.dev, X), ib = upload(s.dev, ids), wb = upload(s.dev, w), mb = upload(s.dev, map_buf);
  const gpu::view mv(mb, 12, uint64_t(E) * 4);
  std::vector<float> want, got;
  uint32_t dr = 0, dc = 0;
  std::string why = run_moe(s, gm, xb, n, ib, wb, k, act, gpu::view(), want, dr);
  if (!why.empty()) return "resident: " + why;
  why = run_moe(s, gc, xb, n, ib, wb, k, act, mv, got, dc);
  if (!why.empty()) return "cached: " + why;
  const bool i8_path = act == act_precision::i8 && I % 32 == 0 && d % 32 == 0;
  // int8 rows (5; 3 or 4 where the tails apply: matvec_tuning::moe_tails) / int8 expert-grouped (6) /
  // expert-grouped: the tiled GEMM per expert (5) where the expert's rows are whole 64-row tiles and the columns
  // whole steps of max(32, chunk) values, else the row-per-team kernels (4) / per pair (2)
  constexpr uint64_t chunk = F::elem_bits >= 8 ? 128 / F::elem_bits : F::block_elems, tk = chunk > 32 ? chunk : 32;
  const bool gemm_path = (2 * I) % 64 == 0 && d % 64 == 0 && d % tk == 0 && I % tk == 0;
  uint32_t want_disp = i8_path ? (n == 1 ? 5u : 6u) : n > 1 ? (gemm_path ? 5u : 4u) : 2u;
  if (i8_path && n == 1 && dr >= 3 && dr <= 5) want_disp = dr;
  if (dr != dc || dr != want_disp)
    return "dispatches: resident " + std::to_string(dr) + ", cached " + std::to_string(dc) + " (want " +
           std::to_string(want_disp) + ")";
  // the resident layer is right (CPU kernel, the activation precision that ran: I % 32 != 0 falls back to f32)
  const act_precision ran = i8_path ? act_precision::i8 : act_precision::f32;
  thread_pool tp(2);
  moe_scratch scratch;
  std::vector<float> cpu(n * d);
  moe_forward(tp, best_cpu_kernels(), views, sh, X.data(), n, d, ids.data(), w.data(), k, kLimit, cpu.data(), scratch,
              ran);
  std::string i1;
  const std::string v1 = ran == act_precision::i8
                             ? verdict(compare(want.data(), cpu.data(), cpu.size()), kI8CpuNmse, i1, kI8CpuMaxAbsRel)
                             : verdict(compare(want.data(), cpu.data(), cpu.size()), kNmse, i1);
  if (!v1.empty()) return "resident layer vs CPU kernel: " + v1;
  for (uint64_t i = 0; i < want.size(); ++i)
    if (!std::isfinite(want[i])) return "resident output " + std::to_string(i) + " not finite";
  if (std::memcmp(want.data(), got.data(), want.size() * 4) != 0) {
    uint64_t i = 0;
    while (std::bit_cast<uint32_t>(want[i]) == std::bit_cast<uint32_t>(got[i])) ++i;
    return "cached output " + std::to_string(i) + " = " + std::to_string(got[i]) + ", resident " +
           std::to_string(want[i]) + " (not bit-identical)";
  }
  // `lone` not in a slot any more: token 0 NaN, the others unchanged
  map_buf[3 + lone] = kSlots + uint32_t(r.below(3));
  const gpu::buffer mb2 = upload(s.dev, map_buf);
  why = run_moe(s, gc, xb, n, ib, wb, k, act, gpu::view(mb2, 12, uint64_t(E) * 4), got, dc);
  if (!why.empty()) return "cached, expert missing: " + why;
  for (uint64_t i = 0; i < d; ++i)
    if (!std::isnan(got[i])) return "token 0 output " + std::to_string(i) + " is not NaN with its expert unmapped";
  if (std::memcmp(want.data() + d, got.data() + d, (n - 1) * d * 4) != 0)
    return "an unmapped expert of token 0 changed another token's output";
  info = "bit-identical to the resident layer (" + std::to_string(dr) + " dispatches; vs CPU " + i1 +
         "); unmapped expert -> token 0 NaN" + (n > 1 ? ", others unchanged" : "");
  return {};
}

/// Passes of a cached layer (moe_extras::pass, kernels::moe_pass_sum; the grouped int8 path): n tokens select more
/// experts than the kSlots slots hold. Passes of at most kSlots of them (the union in random order, each pass
/// written into random slots over the previous pass's experts, the map naming only this pass's experts — every
/// other entry garbage ≥ kSlots) run each selected expert once, the shared expert in one of them; moe_pass_sum's
/// output must be the resident layer's bit for bit (moe_slots_case holds the resident layer to the CPU kernel).
/// Then the same passes without one expert: the tokens that select it get another output (their rows of h stay
/// poisoned), the others the same bits. (The lists' pass filter only saves work — the row kernels skip an unmapped
/// expert, and the shared expert's rows are the same in every pass — so no output tells it apart.)
template <class F>
std::string moe_pass_case(suite& s, uint64_t seed, uint32_t E, uint64_t d, uint64_t I, uint32_t k, uint32_t n,
                          bool shared, std::string& info) {
  rng r(seed);
  const std::vector<host_expert> ex = make_experts<F>(r, E + (shared ? 1 : 0), d, I);
  const std::vector<expert_view> views = views_of(ex, E);
  const expert_view* sh = shared ? &ex.back().v : nullptr;
  std::vector<uint32_t> ids(uint64_t(n) * k);
  std::vector<float> w(uint64_t(n) * k);
  std::vector<uint32_t> all(E);
  for (uint32_t e = 0; e < E; ++e) all[e] = e;
  for (uint32_t t = 0; t < n; ++t) {
    for (uint32_t j = 0; j < k; ++j) std::swap(all[j], all[j + r.below(E - j)]);
    for (uint32_t j = 0; j < k; ++j) ids[t * k + j] = all[j], w[t * k + j] = r.uniform(0.1f, 1.5f);
  }
  std::vector<uint32_t> uni(ids);
  std::sort(uni.begin(), uni.end());
  uni.erase(std::unique(uni.begin(), uni.end()), uni.end());
  for (size_t i = 0; i + 1 < uni.size(); ++i) std::swap(uni[i], uni[i + r.below(uint32_t(uni.size() - i))]);
  const uint32_t passes = uint32_t((uni.size() + kSlots - 1) / kSlots);
  if (passes < 2) return "the tokens selected only " + std::to_string(uni.size()) + " experts: no second pass";
  const std::vector<float> X = r.normal(n * d);
  const gpu::gpu_moe gm = gpu::upload_moe(s.dev, views, sh);
  const gpu::gpu_moe gc = gpu::alloc_moe_slots(s.dev, views[0], E, kSlots, sh);
  const gpu::buffer xb = upload(s.dev, X), ib = upload(s.dev, ids), wb = upload(s.dev, w);
  std::vector<float> want;
  uint32_t disp = 0;
  if (std::string why = run_moe(s, gm, xb, n, ib, wb, k, act_precision::i8, gpu::view(), want, disp); !why.empty())
    return "resident: " + why;
  const uint32_t shared_pass = uint32_t(r.below(passes));
  // the passes over uni, without uni[skip] when skip < uni.size(); out: the summed output
  auto run_passes = [&](size_t skip, std::vector<float>& out) -> std::string {
    guarded hg(s.dev, gpu::kernels::moe_scratch_floats(gc, n, k) * 4), og(s.dev, n * d * 4);
    for (uint32_t p = 0; p < passes; ++p) {
      std::vector<uint32_t> slot(kSlots), map(E);
      for (uint32_t i = 0; i < kSlots; ++i) slot[i] = i;
      for (uint32_t i = 0; i + 1 < kSlots; ++i) std::swap(slot[i], slot[i + r.below(kSlots - i)]);
      for (uint32_t e = 0; e < E; ++e) map[e] = kSlots + uint32_t(r.below(1000));
      for (size_t i = size_t(p) * kSlots; i < std::min(uni.size(), size_t(p + 1) * kSlots); ++i) {
        if (i == skip) continue;
        const uint32_t sl = slot[i - size_t(p) * kSlots];
        gpu::write_moe_slot(s.dev, gc, sl, views[uni[i]]);
        map[uni[i]] = sl;
      }
      const gpu::buffer mb = upload(s.dev, map);
      gpu::moe_extras ex2;
      ex2.pass = true, ex2.pass_shared = p == shared_pass;
      gpu::commands c = s.dev.begin();
      s.kern.moe(c, gc, xb, n, ib, wb, k, kLimit, hg.payload(), og.payload(), act_precision::i8, mb, ex2);
      s.submit(c);
    }
    std::vector<float> before(n * d);
    std::string why;
    if (!og.read(before.data(), why)) return why;
    for (float v : before)
      if (std::bit_cast<uint32_t>(v) != guarded::nan_word) return "a pass wrote the output";
    gpu::commands c = s.dev.begin();
    s.kern.moe_pass_sum(c, gc, n, ib, k, hg.payload(), og.payload());
    s.submit(c);
    out.assign(n * d, 0.0f);
    std::vector<float> h(gpu::kernels::moe_scratch_floats(gc, n, k));
    if (!og.read(out.data(), why) || !hg.read(h.data(), why)) return why;
    return {};
  };
  std::vector<float> got;
  if (std::string why = run_passes(uni.size(), got); !why.empty()) return why;
  if (std::memcmp(want.data(), got.data(), want.size() * 4) != 0) {
    uint64_t i = 0;
    while (std::bit_cast<uint32_t>(want[i]) == std::bit_cast<uint32_t>(got[i])) ++i;
    return "output " + std::to_string(i) + " after " + std::to_string(passes) + " passes = " + std::to_string(got[i]) +
           ", resident " + std::to_string(want[i]) + " (not bit-identical)";
  }
  const size_t skip = r.below(uint32_t(uni.size()));
  if (std::string why = run_passes(skip, got); !why.empty()) return "passes without one expert: " + why;
  uint64_t changed = 0;
  for (uint32_t t = 0; t < n; ++t) {
    const bool uses = std::find(ids.begin() + t * k, ids.begin() + (t + 1) * k, uni[skip]) != ids.begin() + (t + 1) * k;
    const bool same = std::memcmp(want.data() + t * d, got.data() + t * d, d * 4) == 0;
    if (uses == same)
      return "token " + std::to_string(t) + (uses ? " selects" : " does not select") + " the expert left out, and its " +
             "output is " + (same ? "unchanged" : "changed");
    changed += uses;
  }
  info = std::to_string(uni.size()) + " experts in " + std::to_string(passes) + " passes of <= " +
         std::to_string(kSlots) + ": bit-identical to the resident layer; one left out: " + std::to_string(changed) +
         " tokens changed, the others not";
  return {};
}

/// The interface's refusals: a cached layer without slot_map, a slot_map for a resident layer, a pass with one token
/// or on a resident layer, write_moe_slot out of range / of another shape / on a resident layer, alloc of q8_2f; and
/// moe_slot_bytes = one expert's payload.
std::string moe_slots_usage_case(suite& s, uint64_t seed, std::string& info) {
  using F = fmt_q4tp;
  const uint32_t E = 4, k = 2;
  const uint64_t d = 256, I = 128;
  rng r(seed);
  const std::vector<host_expert> ex = make_experts<F>(r, E, d, I);
  const std::vector<host_expert> other = make_experts<F>(r, 1, d, 2 * I);
  const std::vector<expert_view> views = views_of(ex);
  const gpu::gpu_moe gm = gpu::upload_moe(s.dev, views);
  const gpu::gpu_moe gc = gpu::alloc_moe_slots(s.dev, views[0], E, 2, &ex[3].v);
  const std::vector<uint32_t> ids = {1, 2}, map = {0, 1, 0, 1};
  const std::vector<float> X = r.normal(d), w = {0.5f, 0.7f};
  const gpu::buffer xb = upload(s.dev, X), ib = upload(s.dev, ids), wb = upload(s.dev, w), mb = upload(s.dev, map);
  guarded hg(s.dev, gpu::kernels::moe_scratch_floats(gc, 1, k) * 4), og(s.dev, d * 4);
  std::vector<std::string> msgs;
  auto refused = [&](const char* what, auto&& fn) -> bool {
    try {
      fn();
    } catch (const usage_error& e) {
      msgs.push_back(e.what());
      return true;
    }
    info = what;
    return false;
  };
  gpu::commands c = s.dev.begin();
  if (!refused("cached layer without slot_map", [&] {
        s.kern.moe(c, gc, xb, 1, ib, wb, k, kLimit, hg.payload(), og.payload());
      }) ||
      !refused("slot_map for a resident layer", [&] {
        s.kern.moe(c, gm, xb, 1, ib, wb, k, kLimit, hg.payload(), og.payload(), act_precision::f32, mb);
      }) ||
      !refused("short slot_map", [&] {
        s.kern.moe(c, gc, xb, 1, ib, wb, k, kLimit, hg.payload(), og.payload(), act_precision::f32,
                   gpu::view(mb, 0, 8));
      }) ||
      !refused("a pass with one token (the batch-1 path would sum)", [&] {
        gpu::moe_extras px;
        px.pass = true;
        s.kern.moe(c, gc, xb, 1, ib, wb, k, kLimit, hg.payload(), og.payload(), act_precision::i8, mb, px);
      }) ||
      !refused("a pass on a resident layer", [&] {
        gpu::moe_extras px;
        px.pass = true;
        s.kern.moe(c, gm, xb, 1, ib, wb, k, kLimit, hg.payload(), og.payload(), act_precision::i8, gpu::view(), px);
      }) ||
      !refused("write_moe_slot past the slots", [&] { gpu::write_moe_slot(s.dev, gc, 2, views[0]); }) ||
      !refused("write_moe_slot on a resident layer", [&] { gpu::write_moe_slot(s.dev, gm, 0, views[0]); }) ||
      !refused("write_moe_slot of another shape", [&] { gpu::write_moe_slot(s.dev, gc, 0, other[0].v); }) ||
      !refused("alloc_moe_slots with 0 slots", [&] { (void)gpu::alloc_moe_slots(s.dev, views[0], E, 0, nullptr); }))
    return "not refused: " + info;
  {
    rng r2(seed + 1);
    host_expert q;
    q.g = encode<fmt_q8_2f>(r2, 32, 64, q.v.gate);
    q.u = encode<fmt_q8_2f>(r2, 32, 64, q.v.up);
    q.d = encode<fmt_q8_2f>(r2, 64, 32, q.v.down);
    q.v.gate_fmt = q.v.up_fmt = q.v.down_fmt = format::q8_2f;
    if (!refused("alloc_moe_slots of q8_2f", [&] { (void)gpu::alloc_moe_slots(s.dev, q.v, 4, 2, nullptr); }))
      return "not refused: " + info;
  }
  if (c.dispatch_count() != 0) return "a refused call recorded a dispatch";
  const expert_view& v = views[0];
  const uint64_t want = 2 * (v.gate.data_bytes + v.gate.scale_bytes) + v.down.data_bytes + v.down.scale_bytes;
  if (gpu::moe_slot_bytes(gc) != want)
    return "moe_slot_bytes " + std::to_string(gpu::moe_slot_bytes(gc)) + ", one expert holds " + std::to_string(want);
  info = std::to_string(msgs.size()) + " refusals (e.g. \"" + msgs[0] + "\"); moe_slot_bytes " + std::to_string(want);
  return {};
}

}  // namespace

void moe_slots_cases(suite& s) {
  using R = std::string;
  s.run("moe_slots", "-", "refusals (no slot_map, slot range, shape, q8_2f) + moe_slot_bytes",
        [&](uint64_t seed, R& info) { return moe_slots_usage_case(s, seed, info); });
  for_each_type(all_formats{}, [&]<class F>() {
    const std::string fn(F::name);
    if constexpr (F::id == format::q4tp || F::id == format::q2tp || F::id == format::mxfp4 ||
                  F::id == format::fp8_b128 || F::id == format::fp8_b32) {
      struct slot_shape {
        uint64_t d, I;
        uint32_t k;
      };
      for (const slot_shape& sh : {slot_shape{256, 128, 4}, slot_shape{160, 96, 3}, slot_shape{384, 128, 2}}) {
        if (!F::shape_ok(sh.I, sh.d) || !F::shape_ok(sh.d, sh.I) || sh.I % F::block_rows ||
            sh.d % F::block_rows || (F::block_elems > 1 && (sh.I * sh.d) % F::block_elems))
          continue;
        for (const bool shared : {false, true})
          for (const uint32_t n : {1u, 3u})
            for (const act_precision act : {act_precision::f32, act_precision::i8}) {
              if (act == act_precision::i8 && !s.kern.has_i8(F::id)) continue;
              const R name = "16x[" + std::to_string(sh.I) + "x" + std::to_string(sh.d) + "] k=" +
                             std::to_string(sh.k) + " n=" + std::to_string(n) + (shared ? " + shared" : "") +
                             (act == act_precision::i8 ? " i8" : "") + ", " + std::to_string(kSlots) +
                             " slots vs resident";
              s.run("moe_slots", fn, name, [&](uint64_t seed, R& info) {
                return moe_slots_case<F>(s, seed, 16, sh.d, sh.I, sh.k, n, shared, act, info);
              });
            }
        // passes (the grouped int8 path: int8 formats, rows that split into the kernel's row blocks)
        if (s.kern.has_i8(F::id) && F::id != format::fp8_b128 && F::id != format::fp8_b32 && sh.d % 32 == 0 &&
            sh.I % 32 == 0)
          for (const bool shared : {false, true}) {
            const R name = "16x[" + std::to_string(sh.I) + "x" + std::to_string(sh.d) + "] k=" +
                           std::to_string(sh.k) + " n=12" + (shared ? " + shared" : "") + " i8, " +
                           std::to_string(kSlots) + " slots in passes vs resident";
            s.run("moe_slots", fn, name, [&](uint64_t seed, R& info) {
              return moe_pass_case<F>(s, seed, 16, sh.d, sh.I, sh.k, 12, shared, info);
            });
          }
      }
    }
  });
}

}  // namespace cmfx::parity
