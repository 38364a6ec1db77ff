#include "chunk_pipeline.hpp"

#include <algorithm>
#include <stdexcept>

namespace cmfx::driver {

void chunk_inputs::begin() {
  cur_ ^= 1u;
  areas_[cur_].block = 0;
  areas_[cur_].used = 0;
  pieces_.clear();
}

uint8_t* chunk_inputs::stage(const gpu::view& dst, uint64_t bytes) {
  if (bytes > dst.bytes) throw std::logic_error("chunk_inputs::stage: more bytes than the destination holds");
  const uint64_t need = (bytes + 255) & ~uint64_t(255);
  area& a = areas_[cur_];
  while (a.block < a.blocks.size() && a.used + need > a.blocks[a.block]->size()) ++a.block, a.used = 0;
  if (a.block == a.blocks.size())
    a.blocks.push_back(std::make_unique<gpu::buffer>(dev_.alloc_upload(std::max(block_bytes, need))));
  const gpu::buffer& b = *a.blocks[a.block];
  pieces_.push_back({&b, a.used, bytes, dst});
  uint8_t* p = dev_.mapped(b) + a.used;
  a.used += need;
  return p;
}

void chunk_inputs::record(gpu::commands& c) const {
  for (const piece& p : pieces_) c.copy(gpu::view(*p.src, p.offset, p.bytes), p.dst, p.bytes);
}

void chunk_in_flight::submit(gpu::device& dev, gpu::commands&& c, bool timed, uint32_t t_first, uint32_t t_last,
                             gpu_prefill_stats& s) {
  finish(dev, s);
  dev.submit_async(c);
  c_.emplace(std::move(c));
  timed_ = timed, t_first_ = t_first, t_last_ = t_last;
}

void chunk_in_flight::run(gpu::device& dev, gpu::commands& c, bool pipelined, bool timed, uint32_t t_first,
                          uint32_t t_last, gpu_prefill_stats& s) {
  if (pipelined) return submit(dev, std::move(c), timed, t_first, t_last, s);
  finish(dev, s);
  dev.submit(c);
  if (timed) s.device_s += c.seconds(t_first, t_last);
}

void chunk_in_flight::finish(gpu::device& dev, gpu_prefill_stats& s) {
  if (!c_) return;
  std::optional<gpu::commands> c = std::move(c_);
  c_.reset();
  dev.wait(*c);
  if (timed_) s.device_s += c->seconds(t_first_, t_last_);
}

void chunk_in_flight::drain(gpu::device& dev) noexcept {
  if (!c_) return;
  try {
    dev.wait(*c_);
  } catch (...) {  // the device is lost: nothing more to wait for
  }
  c_.reset();
}

}  // namespace cmfx::driver
