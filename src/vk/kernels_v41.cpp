// Host side of the V4.1-specific kernels (issue #9): the candidate-block selection of the CSA2 indexer
// (dsv41_candidate_blocks, driver/model/dsv41_attention.cpp) as block_max (shaders/block_max.comp) → topk
// (kernels.cpp) → mask_scores (shaders/mask_scores.comp). The V4.1 FP4 KV fake-quant is fake_quant with
// fq_format::e2m1_e4m3 (kernels_quant.cpp). The Engram table gather (shaders/engram_gather.comp) and gate + add
// (shaders/engram_gate.comp) of include/cmfx/model/engram.hpp; the wkv projection between them is kernels::matmul.
#include <algorithm>

#include "cmfx/formats/exmy.hpp"
#include "formats_gpu.hpp"
#include "kernels_ops.hpp"

namespace cmfx::gpu {

namespace {

/// Shared-memory flags of mask_scores: the most blocks one workgroup owns.
constexpr uint32_t ms_max_blocks = 1024;
/// Entries a mask_scores workgroup aims to cover (each workgroup also scans the row's k picks once).
constexpr uint32_t ms_entries_per_wg = 8192;

/// Checks shared by the three kernels; returns the block count per row.
uint32_t check_blocks(const char* op, uint32_t rows, uint32_t n, uint32_t bs, view lens) {
  if (bs == 0) throw usage_error(std::string(op) + ": block size must be > 0");
  // Shader indices are 32-bit: row·n + j and (block + 1)·bs must not wrap.
  if (uint64_t(rows) * n > 0xFFFFFFFFull || uint64_t(n) + bs > 0xFFFFFFFFull)
    throw usage_error(std::string(op) + ": rows·n or n + block size exceeds 2^32 − 1");
  if (lens) detail::need_view(lens, uint64_t(rows) * 4, op, "lens");
  return uint32_t((uint64_t(n) + bs - 1) / bs);
}

}  // namespace

void kernels::block_max(commands& c, view score, uint32_t rows, uint32_t n, uint32_t bs, view blk, view lens) {
  const uint32_t nb = check_blocks("block_max", rows, n, bs, lens);
  if (rows == 0 || nb == 0) return;
  const detail::op_env e = detail::op_env_of(*p_);
  const uint64_t sbytes = uint64_t(rows) * n * 4, bbytes = uint64_t(rows) * nb * 4;
  detail::need_view(score, sbytes, "block_max", "score");
  detail::need_view(blk, bbytes, "block_max", "blk");
  const detail::bound sb = e.bind(score, sbytes), bb = e.bind(blk, bbytes), lb = e.bind(lens, uint64_t(rows) * 4);
  const uint32_t pc[8] = {rows, n, bs, nb, sb.residual / 4, bb.residual / 4, lb.residual / 4, lens ? 1u : 0u};
  const detail::binding b[3] = {sb.b, bb.b, lb.b};
  uint32_t gx, gy;
  e.grid((uint64_t(rows) * nb + detail::op_env::wg - 1) / detail::op_env::wg, gx, gy);
  detail::dispatch(c.impl(), e.pipe("block_max.comp", "", detail::op_env::wg, 3, sizeof pc), b, pc, sizeof pc, gx,
                   gy);
}

void kernels::mask_scores(commands& c, view score, uint32_t rows, uint32_t n, uint32_t bs, view blk, view idx,
                          uint32_t k, view lens) {
  const uint32_t nb = check_blocks("mask_scores", rows, n, bs, lens);
  if (rows == 0 || nb == 0) return;
  const detail::op_env e = detail::op_env_of(*p_);
  const uint64_t sbytes = uint64_t(rows) * n * 4, bbytes = uint64_t(rows) * nb * 4, ibytes = uint64_t(rows) * k * 4;
  detail::need_view(score, sbytes, "mask_scores", "score");
  detail::need_view(blk, bbytes, "mask_scores", "blk");
  if (k) detail::need_view(idx, ibytes, "mask_scores", "idx");
  const uint32_t bpw = std::min({nb, ms_max_blocks, std::max<uint32_t>(1, ms_entries_per_wg / bs)});
  const uint32_t groups = (nb + bpw - 1) / bpw;
  const detail::bound sb = e.bind(score, sbytes), bb = e.bind(blk, bbytes), ib = e.bind(k ? idx : view(), ibytes),
                      lb = e.bind(lens, uint64_t(rows) * 4);
  const uint32_t pc[12] = {rows,       n, bs, nb, k, bpw, groups, sb.residual / 4, bb.residual / 4, ib.residual / 4,
                           lb.residual / 4, lens ? 1u : 0u};
  const detail::binding b[4] = {sb.b, bb.b, ib.b, lb.b};
  uint32_t gx, gy;
  e.grid(uint64_t(rows) * groups, gx, gy);
  detail::dispatch(c.impl(),
                   e.pipe("mask_scores.comp", detail::def_u("MS_MAX_BLOCKS", ms_max_blocks), detail::op_env::wg, 4,
                          sizeof pc),
                   b, pc, sizeof pc, gx, gy);
}

void kernels::candidate_blocks(commands& c, view score, uint32_t rows, uint32_t n, uint32_t bs, uint32_t topk_blocks,
                               view blk, view idx, view lens) {
  if (topk_blocks > topk_max_k) throw usage_error("candidate_blocks: topk_blocks > " + std::to_string(topk_max_k));
  const uint32_t nb = check_blocks("candidate_blocks", rows, n, bs, lens);
  if (rows == 0 || nb == 0) return;
  block_max(c, score, rows, n, bs, blk, lens);
  topk(c, blk, rows, nb, topk_blocks, idx);
  mask_scores(c, score, rows, n, bs, blk, idx, topk_blocks, lens);
}

void kernels::engram_gather(commands& c, view data, view scale, uint64_t rows, uint32_t head_dim, uint32_t scale_block,
                            view ids, uint32_t tokens, uint32_t cols, view E) {
  if (head_dim == 0 || scale_block == 0 || head_dim % scale_block != 0)
    throw usage_error("engram_gather: head_dim > 0 and scale_block dividing head_dim required");
  if (rows * head_dim > 0xFFFFFFFFull || rows > 0x7FFFFFFFull)
    throw usage_error("engram_gather: rows·head_dim exceeds 2^32 − 1 (32-bit shader addressing)");
  if (uint64_t(tokens) * cols * head_dim > 0xFFFFFFFFull)
    throw usage_error("engram_gather: tokens·cols·head_dim exceeds 2^32 − 1");
  if (tokens == 0 || cols == 0) return;
  const detail::op_env e = detail::op_env_of(*p_);
  const uint64_t dbytes = rows * head_dim, sbytes = rows * (head_dim / scale_block),
                 ibytes = uint64_t(tokens) * cols * 4, ebytes = uint64_t(tokens) * cols * head_dim * 4;
  detail::need_view(data, dbytes, "engram_gather", "data");
  detail::need_view(scale, sbytes, "engram_gather", "scale");
  detail::need_view(ids, ibytes, "engram_gather", "ids");
  detail::need_view(E, ebytes, "engram_gather", "E");
  const detail::bound db = e.bind(data, dbytes), sb = e.bind(scale, sbytes), ib = e.bind(ids, ibytes),
                      eb = e.bind(E, ebytes), tb = e.bind(view(e.tables), e.tables.size());
  const uint32_t pc[12] = {tokens, cols, head_dim, scale_block, uint32_t(rows), db.residual, sb.residual,
                           ib.residual / 4, eb.residual / 4, 0, 0, 0};
  const detail::binding b[5] = {db.b, sb.b, ib.b, eb.b, tb.b};
  // Format constants from the C++ traits (formats/exmy.hpp) and the host tables' offsets (formats_gpu.cpp).
  const std::string defs = detail::tab_defines() + detail::def_u("UE8M0_NAN_CODE", ue8m0::exp_max_code) +
                           "#define UE8M0_BIAS " + std::to_string(ue8m0::bias) + "\n" +
                           detail::def_u("BF16_MAN_BITS", bfloat16::man_bits);
  uint32_t gx, gy;
  e.grid((uint64_t(tokens) * cols * head_dim + detail::op_env::wg - 1) / detail::op_env::wg, gx, gy);
  detail::dispatch(c.impl(), e.pipe("engram_gather.comp", defs, detail::op_env::wg, 5, sizeof pc), b, pc, sizeof pc,
                   gx, gy);
}

void kernels::engram_gate_add(commands& c, view X, view kv, view qk, uint32_t tokens, uint32_t hc, uint32_t d,
                              float eps, float clamp, view image, view gates) {
  if (hc == 0 || hc > 16 || d == 0) throw usage_error("engram_gate_add: hc in [1, 16] and d > 0 required");
  if (uint64_t(tokens) * (hc + 1) * d > 0xFFFFFFFFull)
    throw usage_error("engram_gate_add: tokens·(hc+1)·d exceeds 2^32 − 1");
  if (tokens == 0) return;
  const detail::op_env e = detail::op_env_of(*p_);
  const uint64_t xbytes = uint64_t(tokens) * hc * d * 4, kvbytes = uint64_t(tokens) * (hc + 1) * d * 4,
                 qbytes = uint64_t(hc) * d * 4, ibytes = uint64_t(tokens) * 4, gbytes = uint64_t(tokens) * hc * 4;
  detail::need_view(X, xbytes, "engram_gate_add", "X");
  detail::need_view(kv, kvbytes, "engram_gate_add", "kv");
  detail::need_view(qk, qbytes, "engram_gate_add", "qk");
  if (image) detail::need_view(image, ibytes, "engram_gate_add", "image");
  if (gates) detail::need_view(gates, gbytes, "engram_gate_add", "gates");
  const detail::bound xb = e.bind(X, xbytes), kb = e.bind(kv, kvbytes), qb = e.bind(qk, qbytes),
                      ib = e.bind(image, ibytes), gb = e.bind(gates, gbytes);
  const uint32_t pc[12] = {tokens,          hc,          d,           xb.residual / 4, kb.residual / 4,
                           qb.residual / 4, ib.residual / 4, gb.residual / 4, image ? 1u : 0u, gates ? 1u : 0u,
                           std::bit_cast<uint32_t>(eps), std::bit_cast<uint32_t>(clamp)};
  const detail::binding b[5] = {xb.b, kb.b, qb.b, ib.b, gb.b};
  uint32_t gx, gy;
  e.grid(uint64_t(tokens) * hc, gx, gy);
  detail::dispatch(c.impl(), e.pipe("engram_gate.comp", "", detail::op_env::wg, 5, sizeof pc), b, pc, sizeof pc, gx,
                   gy);
}

}  // namespace cmfx::gpu
