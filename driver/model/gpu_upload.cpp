#include "gpu_upload.hpp"

#include <algorithm>
#include <cstring>
#include <vector>

#include "cmfx/formats/format_list.hpp"
#include "cmfx/vk/device.hpp"

namespace cmfx::driver {

gpu::gpu_matrix upload_row_groups(gpu::device& dev, const dsv4_matrix& m, uint64_t group_rows) {
  uint32_t tile_rows = 1;
  visit_format(m.fmt, [&]<class F>() { tile_rows = F::block_rows; });
  if (group_rows % tile_rows == 0) return gpu::upload_matrix(dev, m.fmt, m.v);
  std::vector<float> dec(m.rows() * m.cols());
  visit_format(m.fmt, [&]<class F>() {
    for (uint64_t r = 0; r < m.rows(); ++r) F::decode_row(m.v, r, dec.data() + r * m.cols());
  });
  const matrix_view v{reinterpret_cast<const uint8_t*>(dec.data()), dec.size() * 4, nullptr, 0, scale_encoding::none,
                      m.rows(), m.cols()};
  return gpu::upload_matrix(dev, format::f32, v);
}

gpu::buffer upload_rope_table(gpu::device& dev, const rope_config& rc, uint64_t count, uint64_t stride) {
  const rope_table rt(rc);
  std::vector<double> cs(rc.dim);
  std::vector<float> tab(count * rc.dim);
  for (uint64_t p = 0; p < count; ++p) {
    rt.rotation(int64_t(p * stride), cs);
    for (uint32_t i = 0; i < rc.dim; ++i) tab[p * rc.dim + i] = float(cs[i]);
  }
  gpu::buffer b = dev.alloc(tab.size() * 4);
  dev.upload(b, tab);
  return b;
}

void gpu_state_save(gpu::device& dev, const std::vector<const gpu::buffer*>& state, std::vector<gpu::buffer>& snap) {
  if (snap.empty())
    for (const gpu::buffer* b : state) snap.push_back(dev.alloc(b->size()));
  gpu::commands c = dev.begin();
  c.barrier();
  for (size_t i = 0; i < state.size(); ++i) c.copy(*state[i], snap[i], state[i]->size());
  dev.submit(c);
}

void gpu_state_restore(gpu::device& dev, const std::vector<const gpu::buffer*>& state,
                       const std::vector<gpu::buffer>& snap) {
  gpu::commands c = dev.begin();
  c.barrier();
  for (size_t i = 0; i < state.size(); ++i) c.copy(snap.at(i), *state[i], state[i]->size());
  dev.submit(c);
}

void gpu_state_fill_random(gpu::device& dev, const std::vector<const gpu::buffer*>& state, uint64_t seed) {
  constexpr uint64_t block_floats = uint64_t(1) << 20;  // uploaded 4 MiB at a time
  std::vector<float> blk(block_floats);
  uint64_t x = seed * 0x9E3779B97F4A7C15ull + 1;
  for (const gpu::buffer* b : state) {
    const uint64_t n = b->size() / 4;
    for (uint64_t o = 0; o < n; o += block_floats) {
      const uint64_t m = std::min(block_floats, n - o);
      for (uint64_t i = 0; i < m; ++i) {  // xorshift64*: uniform in [−1, 1) from the top 24 bits
        x ^= x >> 12, x ^= x << 25, x ^= x >> 27;
        blk[i] = float(int32_t((x * 0x2545F4914F6CDD1Dull) >> 40) - (1 << 23)) * (1.0f / float(1 << 23));
      }
      dev.upload(gpu::view(*b, o * 4, m * 4), blk.data(), m * 4);
    }
  }
}

std::vector<uint32_t> gpu_sorted_ids(gpu::device& dev, const gpu::view& v, uint64_t n) {
  std::vector<uint32_t> raw(n);
  dev.download(v, raw.data(), n * 4);
  return sorted_ids(raw.data(), n);
}

std::vector<uint32_t> sorted_ids(const uint32_t* p, uint64_t n) {
  std::vector<uint32_t> out;
  for (uint64_t i = 0; i < n; ++i)
    if (p[i] != 0xFFFFFFFFu) out.push_back(p[i]);
  std::sort(out.begin(), out.end());
  return out;
}

std::vector<float> embed_rows_host(const dsv4_matrix& embed, std::span<const uint32_t> ids, uint64_t copies,
                                   uint64_t d) {
  std::vector<float> xe(ids.size() * copies * d);
  std::vector<float> row(d);
  for (size_t t = 0; t < ids.size(); ++t) {
    visit_format(embed.fmt, [&]<class F>() { F::decode_row(embed.v, ids[t], row.data()); });
    for (uint64_t j = 0; j < copies; ++j) std::memcpy(xe.data() + (t * copies + j) * d, row.data(), d * 4);
  }
  return xe;
}

}  // namespace cmfx::driver
