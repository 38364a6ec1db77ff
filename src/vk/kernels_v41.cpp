// Host side of the V4.1-specific kernels (issue #9): the candidate-block selection of the CSA2 indexer
// (dsv41_candidate_blocks, driver/model/dsv41_attention.cpp) as block_max (shaders/block_max.comp) → topk
// (kernels.cpp) → mask_scores (shaders/mask_scores.comp). The V4.1 FP4 KV fake-quant is fake_quant with
// fq_format::e2m1_e4m3 (kernels_quant.cpp).
#include <algorithm>

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

}  // namespace cmfx::gpu
