#pragma once
// Upload helpers shared by the V4 and V4.1 GPU graphs (dsv4_gpu_weights.cpp, dsv41_gpu_weights.cpp).
#include <cstdint>
#include <span>
#include <vector>

#include "cmfx/ops/rope.hpp"
#include "cmfx/vk/kernels.hpp"
#include "dsv4_weights.hpp"

namespace cmfx::driver {

inline uint64_t gpu_matrix_bytes(const gpu::gpu_matrix& m) { return m.data.size() + (m.scale ? m.scale.size() : 0); }
/// Bytes a batch-1 product reads: the payload (and scales) of the matrix.
inline uint64_t view_bytes(const matrix_view& v) { return v.data_bytes + v.scale_bytes; }

/// A matrix whose row blocks of `group_rows` rows run separately (kernels::matmul_rows, e.g. the grouped wo_a):
/// as stored, unless a group starts inside a scale tile of its format (FP8 tiles of 128 rows with a toy's
/// o_lora < 128) — then decoded to f32 (the same values).
gpu::gpu_matrix upload_row_groups(gpu::device& dev, const dsv4_matrix& m, uint64_t group_rows);

/// cos/sin [count, rope_dim] (f32) of positions 0, stride, 2·stride, … of rope table `rc` (stride 1: every
/// position < count; stride r: the compressed entries of ratio r, each at its window's first position).
gpu::buffer upload_rope_table(gpu::device& dev, const rope_config& rc, uint64_t count, uint64_t stride = 1);

/// A sequence's device state (the graphs' state_buffers()): copied into `snap` (allocated on first use, one buffer
/// each) or copied back — one submission each, waited for.
void gpu_state_save(gpu::device& dev, const std::vector<const gpu::buffer*>& state, std::vector<gpu::buffer>& snap);
void gpu_state_restore(gpu::device& dev, const std::vector<const gpu::buffer*>& state,
                       const std::vector<gpu::buffer>& snap);
/// Benchmarks: every float of the state uniform in [−1, 1) (xorshift64* from `seed`) — a seek's stand-in for the
/// tokens skipped: distinct index keys, so the indexer's top-k sees distinct scores as it does in a real sequence
/// (zeroed keys tie every score, the radix select's worst case).
void gpu_state_fill_random(gpu::device& dev, const std::vector<const gpu::buffer*>& state, uint64_t seed);

/// Traces: the n uint32 ids at v, negative (0xFFFFFFFF) ones dropped, sorted ascending.
std::vector<uint32_t> gpu_sorted_ids(gpu::device& dev, const gpu::view& v, uint64_t n);
/// The same for n ids already read back.
std::vector<uint32_t> sorted_ids(const uint32_t* p, uint64_t n);

/// A prefill chunk's embedding rows decoded on the host (where the device holds no embedding): [ids, copies, d],
/// each id's row repeated `copies` times (the hc streams).
std::vector<float> embed_rows_host(const dsv4_matrix& embed, std::span<const uint32_t> ids, uint64_t copies,
                                   uint64_t d);

}  // namespace cmfx::driver
