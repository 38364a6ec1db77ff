// Small kernels of a prefill chunk (several positions per recording; driver/model/dsv4_gpu_chunk.cpp):
// add_tiled (shaders/add_tiled.comp) and pick_keys (shaders/pick_keys.comp).
#include "kernels_ops.hpp"

namespace cmfx::gpu {

void kernels::add_tiled(commands& c, view x, uint32_t period, uint32_t first, view y, uint32_t rows, uint32_t n) {
  if (rows == 0 || n == 0) return;
  if (period == 0) throw usage_error("add_tiled: period must be > 0");
  const detail::op_env e = detail::op_env_of(*p_);
  const uint64_t total = uint64_t(rows) * n;
  if (total > 0xFFFFFFFFull) throw usage_error("add_tiled: too many values");
  detail::need_view(x, uint64_t(period) * n * 4, "add_tiled", "x");
  detail::need_view(y, total * 4, "add_tiled", "y");
  const detail::bound xb = e.bind(x, uint64_t(period) * n * 4), yb = e.bind(y, total * 4);
  const uint32_t pc[6] = {rows, n, period, first % period, xb.residual / 4, yb.residual / 4};
  const detail::binding b[2] = {xb.b, yb.b};
  uint32_t gx, gy;
  e.grid((total + detail::op_env::wg - 1) / detail::op_env::wg, gx, gy);
  detail::dispatch(c.impl(), e.pipe("add_tiled.comp", "", detail::op_env::wg, 2, sizeof pc), b, pc, sizeof pc, gx, gy);
}

void kernels::pick_keys(commands& c, view picks, view counts, uint32_t rows, uint32_t k, view idx, uint32_t stride,
                        uint32_t offset) {
  if (rows == 0 || k == 0) return;
  if (offset + k > stride) throw usage_error("pick_keys: offset + k exceeds the key-list stride");
  const detail::op_env e = detail::op_env_of(*p_);
  const uint64_t total = uint64_t(rows) * k, ibytes = (uint64_t(rows - 1) * stride + offset + k) * 4;
  detail::need_view(picks, total * 4, "pick_keys", "picks");
  detail::need_view(counts, uint64_t(rows) * 4, "pick_keys", "counts");
  detail::need_view(idx, ibytes, "pick_keys", "idx");
  const detail::bound pb = e.bind(picks, total * 4), cb = e.bind(counts, uint64_t(rows) * 4), ib = e.bind(idx, ibytes);
  const uint32_t pc[8] = {rows, k, stride, offset, pb.residual / 4, cb.residual / 4, ib.residual / 4, 0};
  const detail::binding b[3] = {pb.b, cb.b, ib.b};
  uint32_t gx, gy;
  e.grid((total + detail::op_env::wg - 1) / detail::op_env::wg, gx, gy);
  detail::dispatch(c.impl(), e.pipe("pick_keys.comp", "", detail::op_env::wg, 3, sizeof pc), b, pc, sizeof pc, gx, gy);
}

}  // namespace cmfx::gpu
