#pragma once
// What the layer-primitive kernels (kernels_route.cpp, kernels_mhc.cpp, kernels_quant.cpp, kernels_moe.cpp,
// kernels_attn.cpp) need from kernels::impl (kernels.cpp): the device, the variant preamble and the shared tables — exposed through
// op_env_of so that those files stay separate from the matrix kernels. No Vulkan header.
#include <algorithm>
#include <bit>
#include <cstdint>
#include <cstdio>
#include <string>

#include "cmfx/core/error.hpp"
#include "cmfx/formats/ladder.hpp"
#include "cmfx/vk/kernels.hpp"
#include "formats_gpu.hpp"
#include "internal.hpp"

namespace cmfx::gpu::detail {

struct op_env {
  device& dev;
  const device_info& info;
  const std::string& common;  ///< the variant #defines every shader gets (LANES, REDUCE_SUBGROUP, ...)
  uint32_t lanes, teams;      ///< subgroup lanes; teams of `lanes` per 128-invocation matrix workgroup
  const buffer& tables;       ///< exp2 of every f16, E2M1 / E4M3 code values (formats_gpu.cpp)
  uint32_t gemm_coop = 0;     ///< gemm.comp's GEMM_COOP for the tiled GEMMs (kernels::set_gemm_precision)
  const buffer* counters = nullptr;  ///< counter_slots uint32 arrival counters, 0 between uses (kernels::impl)
  uint32_t* counter_next = nullptr;  ///< the next free one (round robin)

  static constexpr uint32_t wg = 256;  ///< workgroup size of the row kernels
  /// Arrival counters of the last-workgroup tails (e.g. mhc_block.comp HC_TAIL): each dispatch that uses them
  /// takes its own range round robin, so that dispatches of one concurrent group never share a counter (a use
  /// returns its counters to 0; the next use of the same counter is thousands of dispatches later, behind barriers).
  static constexpr uint32_t counter_slots = 8192;
  /// The first of n consecutive counters (n ≤ counter_slots / 4, else usage_error). Like the rest of `kernels`, not
  /// thread-safe: one thread records with a kernels instance.
  uint32_t take_counters(uint32_t n) const {
    if (n == 0 || n > counter_slots / 4) throw usage_error("take_counters: " + std::to_string(n) + " counters");
    if (*counter_next + n > counter_slots) *counter_next = 0;
    const uint32_t first = *counter_next;
    *counter_next += n;
    return first;
  }

  /// common/act_q8_wide.glsl's variant: its butterflies through subgroup shuffles where the subgroups hold whole
  /// blocks of 32 (subgroup arithmetic and shuffles, a subgroup size that is a multiple of 32), else shared memory.
  std::string act_wide_defines() const {
    return info.subgroup_arithmetic && info.subgroup_shuffle && lanes % 32 == 0 ? "#define ACT_WIDE_SG 1\n" : "";
  }

  const pipeline* pipe(const char* shader, const std::string& defs, uint32_t wg_size, uint32_t bindings,
                       uint32_t push) const {
    pipeline_desc d;
    d.shader = shader;
    d.defines = common + defs;
    d.spec = {wg_size};
    d.bindings = bindings;
    d.push_bytes = push;
    d.subgroup = info.subgroup_arithmetic ? lanes : 0;
    return get_pipeline(dev.impl(), d);
  }
  /// Workgroups spread over x (≤ 65535) and y.
  void grid(uint64_t groups, uint32_t& gx, uint32_t& gy) const {
    const uint64_t mx = std::min<uint64_t>(info.max_groups_x, 65535);
    gx = uint32_t(std::min<uint64_t>(std::max<uint64_t>(groups, 1), mx));
    const uint64_t y = (std::max<uint64_t>(groups, 1) + gx - 1) / gx;
    if (y > 65535) throw usage_error("too many workgroups for one dispatch");
    gy = uint32_t(y);
  }
  /// A binding of the first `bytes` bytes of v; none → a 16-byte dummy (the tables).
  bound bind(const view& v, uint64_t bytes) const {
    if (!v) return bound{bind_range(info, tables, 0, 16).b, 0};
    return bind_range(info, v, 0, std::max<uint64_t>(bytes, 4));
  }
};

op_env op_env_of(kernels::impl& p);

/// The batch-1 row kernel's defines (shaders/matvec_rows.comp; i8: int8 activations) for a dispatch of `rows` rows
/// of `cols` columns in format f, and its rows per workgroup; false when the device has no such kernel for f
/// (kernels.cpp). pairs_ok: plane 0 starts on 16 bytes (the chunk-pair variant's value loads may be chosen).
/// block_rows: the rows a workgroup's rows must divide (one expert's gate or up half, or its down rows) — the
/// default batches of rows (matvec_tuning::moe_b1_batches 0) shrink until they do.
bool rows_kernel_defines(kernels::impl& p, format f, scale_encoding enc, uint64_t rows, uint64_t cols, bool i8,
                         bool pairs_ok, uint64_t block_rows, std::string& defs, uint32_t& rows_per_wg);

/// The work-split overrides of kernels::set_tuning (0 fields: automatic) (kernels.cpp).
const matvec_tuning& tuning_of(const kernels::impl& p);

/// Lanes that share one chunk's words in a one-row-per-team f32 product of format f (common/moe.glsl MOE_SUB):
/// matvec_tuning::sub where set, else the row kernel's default for f, capped at what f's chunks allow (kernels.cpp).
uint32_t f32_sub(const kernels::impl& p, format f);

/// Shared memory of one shaders/gemm.comp workgroup: the f32 weight tile (gm rows × tk columns) and activation
/// tile (gn batch rows × tk), the ladder tables of gm rows (the largest format table), and 1.25 KiB for the LUTs.
/// coop (gemm.comp's GEMM_COOP, 1 or 2): f16 tiles of rows padded to tk + 8 halves (with cooperative matrices the
/// accumulators go to y through the same words, in as many rounds as they need).
/// ladder: the format keeps per-row ladders in shared memory (q4tp, q2tp); others only the LUTs.
inline uint64_t gemm_shared_bytes(uint32_t gm, uint32_t gn, uint32_t tk, uint32_t coop = 0, bool ladder = true) {
  const uint64_t tables = (ladder ? uint64_t(gm) * ladder::rungs * 4 : 0) + 1280;
  if (coop == 0) return uint64_t(tk) * (gm + gn) * 4 + tables;
  return uint64_t(tk + 8) * (gm + gn) * 2 + tables;
}

/// Whether format f keeps per-row ladders in gemm.comp's shared memory.
inline bool gemm_ladder(format f) { return f == format::q4tp || f == format::q2tp; }

/// Pairs (batch rows) per tile of the expert-grouped GEMM (gemm.comp's MOE_GEMM mode: GEMM_GN): an expert sees
/// ~n·top_k/E pairs of a chunk (~12 of 512 tokens for V4-Flash).
inline constexpr uint32_t moe_gemm_pairs = 16;

/// Columns per step of gemm.comp for chunk size `chunk`: 64 in the f16 modes (four 16-deep multiply-adds per
/// barrier pair), 32 otherwise; at least one chunk.
inline uint32_t gemm_step(uint32_t chunk, uint32_t coop) { return std::max<uint32_t>(coop ? 64 : 32, chunk); }

/// Invocations of an expert-grouped gemm.comp workgroup of gm rows × 16 pairs: one subgroup per 16 × 16 block with
/// cooperative matrices (coop 1), 256 emulated (2), gm / 4 · 16 / 4 = gm in the f32 mode (4 × 4 outputs each).
inline uint32_t moe_gemm_wg(uint32_t coop, uint32_t gm, uint32_t subgroup) {
  return coop == 1 ? gm / 16 * subgroup : coop == 2 ? 256 : gm;
}

/// gemm.comp's mode defines; empty for f32. Cooperative matrices (1) need the workgroup's subgroups to split its
/// 16 × 16 output blocks evenly, 1, 2, 4 or 8 each: false where they do not (the caller then takes the f32 tiles).
inline bool gemm_coop_defines(uint32_t coop, uint32_t gm, uint32_t gn, uint32_t wg, uint32_t subgroup,
                              std::string& defs) {
  defs.clear();
  if (coop == 0) return true;
  if (coop == 1) {
    if (subgroup == 0 || wg % subgroup || gm % 16 || gn % 16) return false;
    const uint32_t blocks = (gm / 16) * (gn / 16), sgs = wg / subgroup;
    if (blocks % sgs || (blocks / sgs != 1 && blocks / sgs != 2 && blocks / sgs != 4 && blocks / sgs != 8)) return false;
  }
  if ((uint64_t(gm) * gn) % wg) return false;
  defs = "#define GEMM_COOP " + std::to_string(coop) + "\n#define GEMM_SG " + std::to_string(subgroup) + "\n";
  return true;
}

/// Whether gemm.comp's GEMM_WT2 (a subgroup's blocks as 2 rows × BPS / 2 columns of blocks) tiles a gm × gn tile of
/// wg invocations on cooperative matrices: 4 or 8 blocks per subgroup, and the 2-row groups fill the tile.
inline bool gemm_wt2_fits(uint32_t coop, uint32_t gm, uint32_t gn, uint32_t wg, uint32_t subgroup) {
  if (coop != 1 || subgroup == 0 || wg % subgroup || gm % 32 || gn % 16) return false;
  const uint32_t sgs = wg / subgroup, blocks = (gm / 16) * (gn / 16);
  if (blocks % sgs) return false;
  const uint32_t bps = blocks / sgs, nc = bps / 2;
  return (bps == 4 || bps == 8) && gn % (16 * nc) == 0 && (gm / 32) * (gn / (16 * nc)) == sgs;
}

/// Throws usage_error unless v holds `bytes` bytes at a 4-byte aligned offset.
inline void need_view(const view& v, uint64_t bytes, const char* op, const char* arg) {
  if (!v) throw usage_error(std::string(op) + ": " + arg + " missing");
  if (v.bytes < bytes)
    throw usage_error(std::string(op) + ": " + arg + " holds " + std::to_string(v.bytes) + " bytes, needs " +
                      std::to_string(bytes));
  if (v.offset % 4) throw usage_error(std::string(op) + ": " + arg + " offset not a multiple of 4");
}

/// "#define NAME VALUE\n" with a float given by its exact bits (no decimal round trip).
inline std::string def_u(const char* name, uint64_t v) {
  return std::string("#define ") + name + " " + std::to_string(v) + "u\n";
}
inline std::string def_f(const char* name, float v) {
  const uint32_t u = std::bit_cast<uint32_t>(v);
  char b[96];
  std::snprintf(b, sizeof b, "#define %s uintBitsToFloat(0x%08Xu)\n", name, u);
  return b;
}

/// Mirror of `mat_pc` in shaders/common/formats.glsl (the matrix kernels; moe_up / moe_down reuse it).
struct mat_pc {
  uint32_t rows, cols, n, r0, res0, res1, res2, e_off, xoff, x_stride, yoff, y_stride, aux0, aux1, fast, pad;
};
static_assert(sizeof(mat_pc) == 64);

/// Binds the three planes of the whole matrix w (bindings 0–2) and fills the format part of the push constants
/// (rows, cols, r0 = 0, plane offsets, fast = the chunked path applies to the weights). usage_error naming `op`
/// when a plane exceeds one storage binding.
inline void bind_planes(const op_env& e, const gpu_matrix& w, binding* b, mat_pc& pc, const char* op) {
  const slice sl = slice_of(w, 0, w.rows);
  uint32_t res[3] = {};
  for (int i = 0; i < 3; ++i) {
    if (sl.bytes[i] == 0) {
      b[i] = e.bind(view(), 16).b;
      continue;
    }
    if (sl.bytes[i] > e.info.max_storage_range)
      throw usage_error(std::string(op) + ": a matrix plane of " + std::to_string(sl.bytes[i]) +
                        " bytes exceeds this device's storage binding limit of " +
                        std::to_string(e.info.max_storage_range) + " bytes");
    const bound bd = bind_range(e.info, sl.in_scale[i] ? view(w.scale) : view(w.data), sl.off[i], sl.bytes[i]);
    b[i] = bd.b;
    res[i] = bd.residual;
  }
  const format_gpu g = gpu_traits(w.fmt);
  pc.rows = uint32_t(w.rows);
  pc.cols = uint32_t(w.cols);
  pc.r0 = 0;
  pc.res0 = res[0], pc.res1 = res[1], pc.res2 = res[2];
  pc.e_off = sl.e_off, pc.aux0 = sl.aux0, pc.aux1 = sl.aux1;
  pc.fast = w.cols % g.chunk == 0 && res[0] % g.main_align == 0 && sl.e_off == 0;
}

/// gemm.comp's defines for the dense tiled GEMM (gm rows × gn batch rows per tile, 256 invocations) of format f with
/// tk columns per step; coop_defs from gemm_coop_defines.
inline std::string gemm_defines(format f, scale_encoding enc, uint32_t tk, uint32_t gm, uint32_t gn,
                                const std::string& coop_defs) {
  return "#define ROWS_PER_WG " + std::to_string(gm) + "\n#define GEMM_GM " + std::to_string(gm) + "\n#define GEMM_TK " +
         std::to_string(tk) + "\n#define GEMM_GN " + std::to_string(gn) + "\n#define GEMM_WG 256\n" + coop_defs +
         tab_defines() + format_defines(f, enc);
}

/// gemm.comp's defines for the expert-grouped GEMM (MOE_GEMM, kernels_moe.cpp): gm rows × 16 pairs per tile, wg
/// invocations, rows_e rows per expert, x_token: the pairs read their token's input (gate/up) rather than their
/// own h (down); slot_defs: MOE_SLOTS / MOE_E of an expert cache.
std::string moe_gemm_defines(format f, scale_encoding enc, uint32_t gm, uint32_t wg, uint32_t tk,
                             const std::string& coop_defs, uint32_t top_k, bool shared, uint64_t rows_e, bool x_token,
                             const std::string& slot_defs);

}  // namespace cmfx::gpu::detail
