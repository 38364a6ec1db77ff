// Internal to cmfx_vk: the state behind gpu::kernels (kernels::impl: the variant preamble, the tables, the tuning,
// the pipeline maps and the matrix products' variant choice), shared by kernels.cpp (uploads, the matrix products,
// what the other kernel files reach through kernels_ops.hpp) and kernels_prims.cpp (norms, rope, softmax, top-k,
// the element-wise kernels). No Vulkan header: pipelines and dispatches go through internal.hpp.
#pragma once

#include <algorithm>
#include <array>
#include <cstring>
#include <map>
#include <sstream>

#include "cmfx/core/error.hpp"
#include "cmfx/formats/format_list.hpp"
#include "cmfx/vk/kernels.hpp"
#include "formats_gpu.hpp"
#include "internal.hpp"
#include "kernels_ops.hpp"

namespace cmfx::gpu {

namespace kernels_detail {


inline uint32_t u32(uint64_t v, const char* what) {
  if (v > 0xFFFFFFFFull) throw usage_error(std::string(what) + " does not fit 32 bits");
  return uint32_t(v);
}


}  // namespace kernels_detail

using detail::bind_range;
using detail::binding;
using detail::bound;
using detail::mat_pc;
using kernels_detail::u32;

struct kernels::impl {
  device& dev;
  const device_info& info;
  std::string common;
  uint32_t lanes = 8, teams = 16;           // teams of `lanes` invocations per matrix workgroup
  static constexpr uint32_t wg_rows = 256;  // rmsnorm, softmax, top-k, element-wise
  // Activation floats a matvec workgroup stages in shared memory (16 KiB: 14 workgroups fit an H200 SM, and
  // lavapipe's 32 KiB limit leaves room for the ladders and LUTs). X_TILE = this / NB.
  static constexpr uint32_t x_tile_floats = 4096;
  buffer tables;                            // exp2 of every f16, E2M1 / E4M3 code values (formats_gpu.cpp)
  buffer argmax_part;                       // topk with k = 1 on long rows: the per-workgroup composites
  buffer counters;                          // arrival counters of the last-workgroup tails (0 between uses)
  uint32_t counter_next = 0;                // the next counter op_env::take_counters hands out
  std::vector<buffer> retired;              // replaced scratch that recorded work may still use
  uint64_t binding_limit = 0;               // tests: cap below maxStorageBufferRange
  matvec_tuning tune;                       // 0 fields: automatic
  gemm_precision gemm_prec = gemm_precision::f32;
  /// gemm.comp's GEMM_COOP for the requested precision on this device: 0 f32, 1 tensor cores, 2 emulated.
  uint32_t gemm_coop() const {
    if (gemm_prec == gemm_precision::f16) return info.coop_matrix ? 1 : 0;
    return gemm_prec == gemm_precision::f16_emulated ? 2 : 0;
  }
  std::map<std::array<uint32_t, 6>, const detail::pipeline*> matrix_pipes;  // no string work per call
  std::map<std::array<uint32_t, 9>, const detail::pipeline*> rows_pipes;  // (format, enc, rpt, unroll, i8, x, split, pairs, sub)
  std::map<std::array<uint32_t, 2>, const detail::pipeline*> gather_pipes;  // embed_rows: (format, enc)
  std::map<std::array<uint32_t, 7>, const detail::pipeline*> xreg_pipes;  // (format, enc, ksplit, xc, rpt, teams, nb)

  explicit impl(device& d) : dev(d), info(d.info()) {
    lanes = std::clamp<uint32_t>(info.subgroup_size, 4, 64);
    teams = std::max<uint32_t>(1, 128 / lanes);
    std::ostringstream s;
    s << "#define LANES " << lanes << "\n#define REDUCE_SUBGROUP " << (info.subgroup_arithmetic ? 1 : 0)
      << "\n#define HAS_STORAGE8 " << (info.storage8 ? 1 : 0) << "\n#define HAS_STORAGE16 "
      << (info.storage16 ? 1 : 0) << "\n#define ACC_DOUBLE " << (info.float64 ? 1 : 0) << "\n#define HAS_F64 " << (info.float64_ops ? 1 : 0) << "\n#define SHUFFLE_F64 "
      << (info.subgroup_arithmetic && info.subgroup_shuffle && info.float64 ? 1 : 0) << "\n";
    common = s.str();
    const std::vector<float> t = detail::host_tables();
    tables = dev.alloc(t.size() * 4);
    dev.upload(tables, t);
    const std::vector<uint32_t> zeros(detail::op_env::counter_slots, 0);
    counters = dev.alloc(zeros.size() * 4);
    dev.upload(counters, zeros.data(), zeros.size() * 4);
  }

  /// The pipeline of shader with the variant preamble + defs (op_env::pipe).
  const detail::pipeline* pipe(const char* shader, const std::string& defs, uint32_t wg, uint32_t bindings,
                               uint32_t push) {
    return detail::op_env_of(*this).pipe(shader, defs, wg, bindings, push);
  }

  /// Rows per team, column split and unrolling of one matmul (matvec_tuning fields override). Defaults from
  /// the H200 sweeps of docs/VULKAN.md: two rows per team and column splits measured no better (noisy);
  /// four chunks of loads in flight per lane for matvec, one for GEMM (8x the arithmetic per load already).
  matvec_tuning choose(uint64_t rows, uint64_t cols, uint32_t nb, format f) const {
    (void)rows, (void)cols, (void)f;
    matvec_tuning c = tune;
    if (!c.unroll) c.unroll = nb == 1 ? 4 : 1;
    if (!c.split) c.split = 1;
    c.split = std::min(c.split, teams);
    return c;
  }

  const detail::pipeline* matrix_pipe(bool dequant, format f, scale_encoding enc, uint32_t nb, const matvec_tuning& t) {
    const std::array<uint32_t, 6> key{dequant, uint32_t(f), uint32_t(enc), nb, t.split, t.unroll};
    if (auto it = matrix_pipes.find(key); it != matrix_pipes.end()) return it->second;
    const uint32_t rows_per_wg = dequant ? teams : teams / t.split;
    std::ostringstream d;
    d << "#define TEAMS " << teams << "\n#define ROWS_PER_WG " << rows_per_wg << "\n#define SPLIT " << t.split
      << "\n#define NB " << nb << "\n#define UNROLL " << t.unroll
      << "\n#define X_TILE " << x_tile_floats / nb << "\n" << detail::tab_defines() << format_defines(f, enc);
    const detail::pipeline* p = pipe(dequant ? "dequant.comp" : "matvec.comp", d.str(), lanes * teams, 6, sizeof(mat_pc));
    matrix_pipes.emplace(key, p);
    return p;
  }

  /// The dense tiled GEMM's tile (shaders/gemm.comp) for format f in the current precision: mode (gemm.comp's
  /// GEMM_COOP; 0 = the f32 tiles, 64 × 64 × 32), weight rows gm × batch rows gn × tk columns per step. In the f16
  /// modes (gemm_coop): f16 tiles of 64 columns, 128 × 128 (formats without per-row ladders), 64 × 128 or 64 × 64,
  /// the largest the shared memory holds (lavapipe's 32 KiB: 64 × 64); where the device cannot hold or split even
  /// 64 × 64, the f32 tiles. Cached per (format, mode): no string work per call (gemm_coop_defines builds strings).
  struct gemm_tiling {
    uint32_t coop = 0, gm = 64, gn = 64, tk = 32;
  };
  static constexpr uint32_t gemm_rows = 64;
  mutable std::map<std::pair<uint32_t, uint32_t>, gemm_tiling> gemm_tiles;
  /// The f16 tiles (weight rows × batch rows), largest first (H200 2026-11-30: `wo_b` of a 512-row chunk 0.75 /
  /// 0.59 / 0.46 ms per layer with 64 × 64 / 64 × 128 / 128 × 128).
  static constexpr std::array<std::pair<uint32_t, uint32_t>, 3> gemm_f16_tiles{{{128, 128}, {64, 128}, {64, 64}}};
  /// Whether a gm × gn f16 tile of format f (tk columns per step, GEMM_COOP mode coop) fits the device: the shared
  /// memory, a subgroup split, and gm = gemm_rows for the formats whose ladders live in shared memory.
  bool gemm_fits(format f, uint32_t coop, uint32_t gm, uint32_t gn, uint32_t tk) const {
    const bool lad = detail::gemm_ladder(f);
    std::string defs;
    return (gm == gemm_rows || !lad) && detail::gemm_shared_bytes(gm, gn, tk, coop, lad) <= info.max_shared_memory &&
           detail::gemm_coop_defines(coop, gm, gn, 256, info.subgroup_size, defs);
  }
  gemm_tiling gemm_tile_of(format f) const {
    const uint32_t want = gemm_coop();
    const auto key = std::make_pair(uint32_t(f), want);
    if (auto it = gemm_tiles.find(key); it != gemm_tiles.end()) return it->second;
    const uint32_t chunk = detail::gpu_traits(f).chunk, tk = detail::gemm_step(chunk, want);
    gemm_tiling t;
    t.tk = detail::gemm_step(chunk, 0);
    if (want)  // the largest tile that fits
      for (const auto& [gm, gn] : gemm_f16_tiles)
        if (gemm_fits(f, want, gm, gn, tk)) {
          t = {want, gm, gn, tk};
          break;
        }
    gemm_tiles.emplace(key, t);
    return t;
  }
  /// The tile of one product (rows × n batch rows) of format f: gemm_tile_of's, or a smaller one that fits where
  /// the grid would have fewer than tune.gemm_min_groups workgroups.
  /// min_groups > 0: that threshold for this product instead of the tuning's.
  gemm_tiling gemm_tile_for(format f, uint64_t rows, uint64_t n, uint32_t min_groups = 0) const {
    gemm_tiling t = gemm_tile_of(f);
    const uint32_t want = min_groups ? min_groups : tune.gemm_min_groups;
    if (!t.coop || !want) return t;
    for (const auto& [gm, gn] : gemm_f16_tiles) {
      if (ceil_div(rows, t.gm) * ceil_div(n, t.gn) >= want) break;
      if (gm * gn < t.gm * t.gn && gemm_fits(f, t.coop, gm, gn, t.tk)) t.gm = gm, t.gn = gn;
    }
    return t;
  }
  uint32_t gemm_mode(format f) const { return gemm_tile_of(f).coop; }
  /// The tiled GEMM pipeline of format f, or nullptr where the device's shared memory cannot hold its tiles (the f32
  /// ones: 64 rows × 64 batch rows × TK columns, plus the format's tables).
  const detail::pipeline* gemm_pipe(format f, scale_encoding enc) { return gemm_pipe(f, enc, gemm_tile_of(f)); }
  const detail::pipeline* gemm_pipe(format f, scale_encoding enc, const gemm_tiling& tile) {
    const auto [coop, gm, gn, tk] = tile;
    if (detail::gemm_shared_bytes(gm, gn, tk, coop, detail::gemm_ladder(f)) > info.max_shared_memory ||
        tk % detail::gpu_traits(f).chunk)
      return nullptr;
    // matvec_tuning::gemm_warp_tile 0 or 2: a subgroup's blocks in two rows where the tile allows it (GEMM_WT2)
    const bool wt2 = tune.gemm_warp_tile != 1 && detail::gemm_wt2_fits(coop, gm, gn, 256, info.subgroup_size);
    const std::array<uint32_t, 6> key{wt2 ? 3u : 2u, uint32_t(f), uint32_t(enc), tk, coop, gm << 16 | gn};
    if (auto it = matrix_pipes.find(key); it != matrix_pipes.end()) return it->second;
    std::string cdefs;
    detail::gemm_coop_defines(coop, gm, gn, 256, info.subgroup_size, cdefs);
    if (wt2) cdefs += "#define GEMM_WT2 1\n";
    const detail::pipeline* p = pipe("gemm.comp", detail::gemm_defines(f, enc, tk, gm, gn, cdefs), 256, 6, sizeof(mat_pc));
    matrix_pipes.emplace(key, p);
    return p;
  }

  /// Formats the batch-1 row kernel (shaders/matvec_rows.comp) handles: every one whose decode is a value
  /// times one scale per chunk — not q8_2f (a scale per column).
  bool rows_kernel(format f) const { return info.subgroup_arithmetic && !tune.legacy && f != format::q8_2f; }
  bool i8_kernel(format f) const {
    return rows_kernel(f) && info.int_dot && (f == format::q4tp || f == format::q2tp || f == format::mxfp4);
  }
  /// Activation columns the row kernel stages at once: a power of two that leaves room for the ladders and
  /// LUTs below the device's shared memory (8192 = every activation of the model's matvecs in one tile).
  uint32_t rows_x_tile() const {
    uint32_t t = 8192;
    while (t > 256 && uint64_t(t) * 4 + 4096 > info.max_shared_memory) t /= 2;
    return t;
  }
  std::vector<buffer> act_scratch;  // matmul(..., i8): quantised activations (kept alive: recordings refer to them)
  const buffer& scratch_for(uint64_t bytes) {
    if (act_scratch.empty() || act_scratch.back().size() < bytes) act_scratch.push_back(dev.alloc(std::max<uint64_t>(bytes, 64 << 10)));
    return act_scratch.back();
  }
  /// The row kernel's work split for a matrix of `rows` rows of `cols` columns. Decode runs every matvec as a
  /// dependent dispatch, so what sets its time is how much of the matrix is in flight at once, not the throughput
  /// of many independent products (H200 sweeps of dependent matvecs, docs/VULKAN.md "Dependent matvecs": 4 rows
  /// per subgroup, the best for independent products, was 1.3-2x slower in a chain). So: 2 rows per subgroup (1
  /// for the routers' ≤ 512 rows), then the columns split over up to `teams` subgroups (KSPLIT) until the matrix
  /// has 4096 subgroups, while every lane keeps at least one chunk of each row (FP8 4096x8192 25.9 → 15.9 µs,
  /// 2048x4096 14.7 → 6.7, q2tp 1024x4096 9.4 → 4.6 per dependent product).
  /// Unroll 2, except q2tp with int8 activations: 1 (0.41 / 0.51 / 0.63 vs 0.40 / 0.50 / 0.56 of the roofline on
  /// 1024x4096 / 4096x2048 / 4096x8192, independent products).
  /// concurrent (recorded inside a concurrent group) with matvec_tuning::concurrent = 2: 4 rows per subgroup and
  /// q2tp chunk pairs — faster for many independent products, 3.4 % slower in the decode's small groups (docs/VULKAN.md
  /// "Batch-1 products"), hence opt-in.
  matvec_tuning choose_rows(uint64_t rows, uint64_t cols, format f, bool i8, bool concurrent = false,
                            const matvec_tuning* base = nullptr) const {
    matvec_tuning c = base ? *base : tune;
    const bool throughput = concurrent && c.concurrent == 2;
    const uint64_t want_subgroups = c.target_subgroups ? c.target_subgroups : 4096;
    if (!c.rows_per_team) {
      c.rows_per_team = rows <= 512 ? 1 : throughput ? 4 : 2;
      while (c.target_subgroups && c.rows_per_team < 4 && rows > want_subgroups * c.rows_per_team) c.rows_per_team *= 2;
    }
    if (!c.unroll) c.unroll = (i8 && f == format::q2tp) ? 1 : 2;
    c.unroll = std::min<uint32_t>(c.unroll, 4);
    // f32 activations read by every lane from the buffer, not staged in shared memory: FP8 0.25 → 0.64-0.69 of
    // the roofline, q4tp 0.15 → 0.34, MXFP4 0.19 → 0.29 (H200, docs/VULKAN.md "Activation source").
    if (!c.x_source || c.x_source == 3) c.x_source = 2;  // 3 where matvec_xreg.comp does not apply: from the buffer
    c.rows_per_team = std::min<uint32_t>(c.rows_per_team, 4);  // (x_source 3 allows up to 16)
    const uint64_t all_chunks = cols / std::max<uint32_t>(1, detail::gpu_traits(f).chunk);
    c.sub = i8 || c.x_source != 2 ? 1 : std::min(c.sub ? c.sub : default_sub(f), max_sub(f));
    const bool can_pair = i8 && f == format::q2tp && all_chunks % 2 == 0;
    c.pairs = can_pair && (c.pairs == 2 || (c.pairs == 0 && throughput)) ? 2 : 1;
    const bool can_split = i8 || c.x_source == 2;
    if (!c.split && can_split) {
      const uint64_t chunks = all_chunks / c.pairs * c.sub;  // the units lanes take
      const uint64_t teams_rows = (rows + c.rows_per_team - 1) / c.rows_per_team;
      c.split = 1;
      while (c.split < teams && teams_rows * c.split < want_subgroups && chunks >= uint64_t(lanes) * c.split * 2)
        c.split *= 2;
    }
    c.split = can_split ? std::min(std::max<uint32_t>(c.split, 1), teams) : 1;
    return c;
  }
  /// Largest matvec_tuning::sub of format f: its chunk's words (formats.glsl HAS_CHUNK_WORDS), at least one vec4
  /// of activations per lane.
  static uint32_t max_sub(format f) {
    switch (f) {
      case format::q4tp: case format::mxfp4: case format::fp8_b128: case format::fp8_b32: case format::q8_row: return 4;
      case format::q2tp: case format::f16: case format::bf16: return 2;
      default: return 1;
    }
  }
  /// matvec_tuning::sub = 0: the fastest measured on the H200 (docs/PERF.md "Thirty-fourth session", vk_matvec at
  /// 1024×4096, 32768×1024, 4096×8192): q4tp 2 (0.19–0.22 → 0.28–0.32 of the read roofline; 4: 0.24–0.26), q2tp 2
  /// (0.10–0.11 → 0.14–0.16), MXFP4 4 (0.18 → 0.32–0.35), q8_row 2 (0.60–0.67 → 0.63–0.68); FP8 1 (2 and 4 slower).
  static uint32_t default_sub(format f) {
    switch (f) {
      case format::q4tp: case format::q2tp: case format::q8_row: return 2;
      case format::mxfp4: return 4;
      default: return 1;
    }
  }
  /// The split of shaders/matvec_xreg.comp (matvec_tuning::x_source = 3, opt-in: f32 activations held in
  /// registers) for a row of `cols` columns; ksplit = 0 where it does not apply (int8
  /// activations, another x_source, or a row whose chunks would need more than 64 activation floats per lane in a
  /// workgroup of 256 invocations). Each lane owns xc chunks of every row, the ksplit subgroups of a row team cover
  /// the row, a team walks nb batches of rpt rows (the loads of a batch all in flight), teams per workgroup fill
  /// 128 invocations.
  struct xreg_split {
    uint32_t ksplit = 0, xc = 0, rpt = 0, rteams = 0, nb = 0;
    uint32_t rows_per_wg() const { return rteams * rpt * nb; }
  };
  xreg_split choose_xreg(uint64_t cols, format f, bool i8) const {
    xreg_split x;
    const uint32_t chunk = detail::gpu_traits(f).chunk;
    // Opt-in (x_source 3) for every format. On the H200 it is the faster kernel for one large product — independent
    // q4tp 0.29 / 0.32 → 0.36 / 0.36 of the read roofline at 32768×1024 / 4096×8192, q2tp 0.14 / 0.16 → 0.20 /
    // 0.19, MXFP4 0.32 / 0.34 → 0.42 / 0.39; chained 2–15 % faster there — but twice as slow chained at
    // 1024×4096 (too few workgroups), and the whole --act f32 decode with it measured 2–4 % slower in four machine
    // starts, also when only products of >= 1024 subgroups took it (75.3 against 76.7 tok/s): docs/PERF.md
    // "Thirty-seventh session" and "Thirty-eighth session". x_source 0 reads the activations from the buffer.
    if (i8 || tune.x_source != 3 || chunk == 0 || chunk % 4 || cols % chunk) return x;
    const uint64_t nct = cols / chunk, max_sg = std::max<uint32_t>(1, 256 / lanes);
    const uint64_t xc = ceil_div(nct, uint64_t(lanes) * max_sg);
    if (xc * chunk > 64) return x;
    x.xc = uint32_t(xc);
    x.ksplit = uint32_t(ceil_div(nct, uint64_t(lanes) * xc));
    x.rpt = tune.rows_per_team ? tune.rows_per_team : 4;
    x.rteams = std::max<uint32_t>(1, (128 / lanes) / x.ksplit);
    // 4 batches of 4 rows (64–80 registers per invocation; 8 rows in one batch held 124–159 and were slower)
    x.nb = tune.xreg_batches ? tune.xreg_batches : 4;
    return x;
  }
  const detail::pipeline* xreg_pipe(format f, scale_encoding enc, const xreg_split& x) {
    const std::array<uint32_t, 7> key{uint32_t(f), uint32_t(enc), x.ksplit, x.xc, x.rpt, x.rteams, x.nb};
    if (auto it = xreg_pipes.find(key); it != xreg_pipes.end()) return it->second;
    std::ostringstream d;
    const uint32_t t = x.ksplit * x.rteams;
    d << "#define TEAMS " << t << "\n#define KSPLIT " << x.ksplit << "\n#define RPT " << x.rpt << "\n#define ROWS_PER_WG "
      << x.rows_per_wg() << "\n#define XC " << x.xc << "\n#define NB " << x.nb << "\n" << detail::tab_defines() << format_defines(f, enc);
    const detail::pipeline* p = pipe("matvec_xreg.comp", d.str(), lanes * t, 6, sizeof(mat_pc));
    xreg_pipes.emplace(key, p);
    return p;
  }
  /// The #defines of shaders/matvec_rows.comp for one variant (also the base of the MoE mode, kernels_moe.cpp);
  /// batches > 1 (RBATCH: int8 activations) makes a workgroup walk that many batches of rows.
  std::string rows_defs(format f, scale_encoding enc, const matvec_tuning& t, bool i8, uint32_t batches = 1) const {
    std::ostringstream d;
    d << "#define TEAMS " << teams << "\n#define KSPLIT " << t.split << "\n#define RPT " << t.rows_per_team
      << "\n#define RBATCH " << batches << "\n#define ROWS_PER_WG " << teams / t.split * t.rows_per_team * batches
      << "\n#define UNROLL " << t.unroll << "\n#define X_TILE " << rows_x_tile()
      << "\n#define ACT_I8 " << (i8 ? 1 : 0) << "\n#define X_GLOBAL " << (t.x_source == 2 ? 1 : 0)
      << "\n#define PAIR " << (t.pairs == 2 ? 1 : 0) << "\n#define SUB " << std::max<uint32_t>(t.sub, 1) << "\n"
      << detail::tab_defines() << format_defines(f, enc);
    return d.str();
  }
  const detail::pipeline* rows_pipe(format f, scale_encoding enc, const matvec_tuning& t, bool i8) {
    const std::array<uint32_t, 9> key{uint32_t(f), uint32_t(enc), t.rows_per_team, t.unroll, i8, t.x_source, t.split, t.pairs, t.sub};
    if (auto it = rows_pipes.find(key); it != rows_pipes.end()) return it->second;
    const detail::pipeline* p = pipe("matvec_rows.comp", rows_defs(f, enc, t, i8), lanes * teams, 6, sizeof(mat_pc));
    rows_pipes.emplace(key, p);
    return p;
  }

  binding dummy() const { return bind_range(info, tables, 0, 16).b; }

  void grid(uint64_t groups, uint32_t& gx, uint32_t& gy) const {
    const uint64_t mx = std::min<uint64_t>(info.max_groups_x, 65535);
    gx = uint32_t(std::min<uint64_t>(std::max<uint64_t>(groups, 1), mx));
    gy = u32(ceil_div(std::max<uint64_t>(groups, 1), gx), "workgroup count");
  }

  /// matvec / GEMM (nb accumulators, nt <= nb batch rows starting at t0) or dequant, sliced by rows so that
  /// every binding stays within maxStorageBufferRange (P14).
  void run_matrix(commands& c, const gpu_matrix& w, view x, uint32_t t0, uint32_t nt, uint32_t nb, view y,
                  bool dequant, bool generic, bool i8 = false, uint64_t R0 = 0, uint64_t R1 = ~uint64_t(0),
                  uint64_t xs = 0, uint64_t ys = 0, uint32_t min_groups = 0) {
    const detail::format_gpu g = detail::gpu_traits(w.fmt);
    // nb == 0: the tiled GEMM for all nt batch rows at once (callers check gemm_ok first)
    const bool tiled = nb == 0;
    const matvec_tuning t = dequant ? matvec_tuning{1, 1} : choose(w.rows, w.cols, tiled ? gemm_tile : nb, w.fmt);
    const gemm_tiling tile = tiled ? gemm_tile_for(w.fmt, std::min(R1, w.rows) - R0, nt, min_groups) : gemm_tiling{};
    const detail::pipeline* p =
        tiled ? gemm_pipe(w.fmt, w.scale_enc, tile) : matrix_pipe(dequant, w.fmt, w.scale_enc, nb, t);
    if (!p) throw std::logic_error("run_matrix: no tiled GEMM for this format on this device");
    const uint32_t rows_per_wg = dequant ? teams : teams / t.split;
    // i8: x holds activations from quantize_act (common/act_q8.glsl), only the row kernel reads them
    if (i8 && (dequant || generic || nb != 1 || !i8_kernel(w.fmt)))
      throw usage_error("matvec_q8: no int8-activation kernel for this format or device");
    const bool try_rows = !dequant && !generic && nb == 1 && rows_kernel(w.fmt);
    const bool use_i8 = i8;
    // the split of the whole matrix, also for a slice of its rows (wo_a's groups: 8 slices recorded concurrently)
    const xreg_split xr = try_rows ? choose_xreg(w.cols, w.fmt, use_i8) : xreg_split{};
    const matvec_tuning rt =
        try_rows && !xr.ksplit ? choose_rows(w.rows, w.cols, w.fmt, use_i8, c.in_concurrent()) : matvec_tuning{};
    const detail::pipeline* rp = !try_rows ? nullptr
                                 : xr.ksplit ? xreg_pipe(w.fmt, w.scale_enc, xr)
                                             : rows_pipe(w.fmt, w.scale_enc, rt, use_i8);
    const uint64_t R = std::min(R1, w.rows), C = w.cols;  // rows [R0, R)
    const uint64_t XS = xs ? xs : C, RY = ys ? ys : R - R0;  // floats between the batch rows of x and of y
    const uint64_t out_row = dequant ? C * 4 : 4;
    const uint64_t per_row = std::max(detail::row_bytes(w), out_row);
    const uint64_t limit = binding_limit ? std::min(binding_limit, info.max_storage_range) : info.max_storage_range;
    const uint64_t room = limit - std::min(limit, detail::fixed_bytes(w) + 1024);
    if (per_row > room) throw usage_error("matrix rows too long for one storage binding on this device");
    uint64_t step = std::min<uint64_t>(RY, room / per_row);
    if (step >= 256) step -= step % 256;
    const uint32_t tile_rows = tile.gm;
    if (tiled && step >= tile_rows) step -= step % tile_rows;
    // Slices start on a multiple of 4 rows (the row kernel's largest rows per subgroup) past R0, so that a
    // subgroup's rows never straddle an FP8 scale tile (matvec_rows.comp takes row 0's scale for all of them).
    if (step >= 4) step -= step % 4;
    uint32_t block_rows = 1;
    visit_format(w.fmt, [&]<class F>() { block_rows = F::block_rows; });
    // (one slice: its first row is R0, a multiple of block_rows and so of the rows per subgroup)
    const bool tile_safe = block_rows == 1 || step % 4 == 0 || step >= R - R0;
    for (uint64_t r0 = R0; r0 < R; r0 += step) {
      const uint64_t r1 = std::min(R, r0 + step);
      const detail::slice sl = detail::slice_of(w, r0, r1);
      binding b[6];
      uint32_t res[3] = {};
      for (int i = 0; i < 3; ++i) {
        if (sl.bytes[i] == 0) {
          b[i] = dummy();
          continue;
        }
        const bound bd = bind_range(info, sl.in_scale[i] ? view(w.scale) : view(w.data), sl.off[i], sl.bytes[i]);
        b[i] = bd.b;
        res[i] = bd.residual;
      }
      mat_pc pc{};
      pc.rows = uint32_t(r1 - r0);
      pc.cols = u32(C, "cols");
      pc.n = nt;
      pc.r0 = u32(r0, "row");
      pc.res0 = res[0], pc.res1 = res[1], pc.res2 = res[2];
      pc.e_off = sl.e_off, pc.aux0 = sl.aux0, pc.aux1 = sl.aux1;
      if (dequant) {
        b[3] = dummy();
        const bound yo = bind_range(info, y, (r0 - R0) * C * 4, (r1 - r0) * C * 4);
        b[4] = yo.b;
        pc.yoff = yo.residual / 4;
        pc.y_stride = 0;
      } else {
        const bound xb = i8 ? bind_range(info, x, 0, kernels::act_q8_bytes(C))
                            : bind_range(info, x, uint64_t(t0) * XS * 4, (uint64_t(nt - 1) * XS + C) * 4);
        if (i8 && xb.residual % 16) throw usage_error("matvec_q8: xq must start on a 16-byte boundary");
        const bound yb =
            bind_range(info, y, (uint64_t(t0) * RY + (r0 - R0)) * 4, ((uint64_t(nt) - 1) * RY + (r1 - r0)) * 4);
        b[3] = xb.b, b[4] = yb.b;
        pc.xoff = xb.residual / 4, pc.x_stride = u32(XS, "x stride");
        pc.yoff = yb.residual / 4, pc.y_stride = u32(RY, "rows");
      }
      b[5] = bind_range(info, tables, 0, tables.size()).b;
      const bool aligned_io = dequant ? pc.yoff % 4 == 0 : pc.xoff % 4 == 0;
      pc.fast = !generic && C % g.chunk == 0 && res[0] % g.main_align == 0 && sl.e_off == 0 && aligned_io;
      const bool rows = rp && pc.fast && tile_safe;
      const detail::pipeline* rpp = rp;
      if (rows && rt.pairs == 2 && res[0] % 16) {  // chunk pairs read 16-byte value loads: a slice whose plane 0
        matvec_tuning one = rt;                    // starts off 16 bytes takes one chunk per unit (same split, same
        one.pairs = 1;                             // rows per workgroup)
        rpp = rows_pipe(w.fmt, w.scale_enc, one, use_i8);
      }
      if (i8 && !rows) throw gpu_error("matvec_q8: this matrix slice cannot take the row kernel");
      if (tiled && !pc.fast) throw std::logic_error("run_matrix: the tiled GEMM needs the fast layout");
      uint32_t gx, gy;
      if (tiled)
        grid(ceil_div(r1 - r0, tile_rows) * ceil_div(nt, tile.gn), gx, gy);
      else
        grid(ceil_div(r1 - r0, !rows ? rows_per_wg : xr.ksplit ? xr.rows_per_wg() : teams / rt.split * rt.rows_per_team),
             gx, gy);
      detail::dispatch(c.impl(), rows ? rpp : p, b, &pc, sizeof pc, gx, gy);
    }
  }

  /// Whether the tiled GEMM takes an n-row product of w (x rows of x_stride floats at x's offset): n above one
  /// GEMM tile of matvec.comp, the fast layout (whole chunks, aligned planes and rows), a kernel for the format.
  bool gemm_ok(const gpu_matrix& w, uint32_t n, const view& x, uint64_t x_stride, uint64_t r0) {
    if (n <= gemm_tile || tune.legacy || w.cols % gemm_tile_of(w.fmt).tk || x_stride % 4 || x.offset % 16) return false;
    const detail::format_gpu g = detail::gpu_traits(w.fmt);
    if (w.cols % g.chunk) return false;
    const detail::slice sl = detail::slice_of(w, r0, std::min<uint64_t>(w.rows, r0 + 1));
    if (sl.e_off != 0) return false;
    return gemm_pipe(w.fmt, w.scale_enc) != nullptr;
  }

  void check_matrix(const gpu_matrix& w, const char* op) const {
    if (!w.data || w.rows == 0 || w.cols == 0) throw usage_error(std::string(op) + ": empty matrix");
  }
};

}  // namespace cmfx::gpu
