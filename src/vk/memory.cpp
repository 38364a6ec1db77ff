// Device memory: a sub-allocating arena of large blocks (each one VkDeviceMemory + one VkBuffer over it),
// dedicated blocks for large requests (<= maxMemoryAllocationSize), direct mapping where the memory is
// host-visible (lavapipe, unified memory) and a staging buffer otherwise.
#include <algorithm>
#include <bit>
#include <cstring>

#include "vk_impl.hpp"

namespace cmfx::gpu {

namespace detail {

namespace {
constexpr vk::BufferUsageFlags buffer_usage =
    vk::BufferUsageFlagBits::eStorageBuffer | vk::BufferUsageFlagBits::eTransferSrc | vk::BufferUsageFlagBits::eTransferDst;

uint64_t round_up(uint64_t x, uint64_t a) { return (x + a - 1) / a * a; }

std::string mib(uint64_t b) { return std::to_string(b >> 20) + " MiB"; }
}  // namespace

void device_impl::choose_memory_types() {
  align = std::max<uint64_t>(256, info.min_storage_align);
  const vk::PhysicalDeviceMemoryProperties mp = phys.getMemoryProperties();
  // Which types may back our buffers (a probe buffer's requirements).
  const vk::raii::Buffer probe(dev, vk::BufferCreateInfo({}, 4096, buffer_usage));
  const uint32_t allowed = probe.getMemoryRequirements().memoryTypeBits;
  using F = vk::MemoryPropertyFlagBits;
  const vk::MemoryPropertyFlags hv = F::eHostVisible | F::eHostCoherent;
  const bool unified = (info.kind == device_kind::cpu || info.kind == device_kind::integrated) && !opt.force_staging;
  int best = -1, best_score = -1;
  for (uint32_t t = 0; t < mp.memoryTypeCount; ++t) {
    if (!(allowed & (1u << t))) continue;
    const vk::MemoryPropertyFlags fl = mp.memoryTypes[t].propertyFlags;
    const uint64_t heap = mp.memoryHeaps[mp.memoryTypes[t].heapIndex].size;
    int score = 0;
    if (fl & F::eDeviceLocal) score += 4;
    if (heap == info.device_local_bytes) score += 2;  // the largest device-local heap
    const bool visible = (fl & hv) == hv;
    // Unified memory: map it directly. Discrete: plain VRAM (BAR reads are uncached), uploads are staged.
    if (unified ? visible : !visible) score += 1;
    if (score > best_score) best = int(t), best_score = score;
  }
  if (best < 0) throw gpu_error("no memory type can hold storage buffers");
  mem_type = uint32_t(best);
  const vk::MemoryPropertyFlags chosen = mp.memoryTypes[mem_type].propertyFlags;
  info.host_visible = (chosen & hv) == hv && unified;
  staging_type = ~0u;
  for (uint32_t t = 0; t < mp.memoryTypeCount; ++t) {
    const vk::MemoryPropertyFlags fl = mp.memoryTypes[t].propertyFlags;
    if (!(allowed & (1u << t)) || (fl & hv) != hv) continue;
    if (staging_type == ~0u || ((fl & F::eHostCached) && !(mp.memoryTypes[staging_type].propertyFlags & F::eHostCached)))
      staging_type = t;
  }
  if (!info.host_visible && staging_type == ~0u) throw gpu_error("no host-visible memory type for staging copies");
  if (staging_type != ~0u) {
    const vk::MemoryPropertyFlags fl = mp.memoryTypes[staging_type].propertyFlags;
    // alloc_readback takes the device's own memory where every buffer is host-visible
    info.host_cached = !info.host_visible && (fl & F::eHostCached) && !(fl & F::eDeviceLocal);
  }
  // Streamed uploads (alloc_upload): host-visible system memory the host only writes — write-combined (not
  // host-cached) where there is such a type, so that the copy engine's reads need no snooping.
  upload_type = staging_type;
  for (uint32_t t = 0; t < mp.memoryTypeCount; ++t) {
    const vk::MemoryPropertyFlags fl = mp.memoryTypes[t].propertyFlags;
    if (!(allowed & (1u << t)) || (fl & hv) != hv || (fl & F::eDeviceLocal)) continue;
    if (!(fl & F::eHostCached)) {
      upload_type = t;
      break;
    }
  }
}

std::unique_ptr<block> device_impl::make_block(uint64_t size, uint32_t type, bool map) {
  auto b = std::make_unique<block>();
  b->size = size;
  try {
    vk::BufferCreateInfo bi({}, size, buffer_usage);
    // With a transfer queue both families use every block (no ownership transfers: commands::after orders them).
    const uint32_t fams[2] = {compute.family, transfer_lane ? transfer_lane->family : 0};
    if (transfer_lane) bi.setSharingMode(vk::SharingMode::eConcurrent).setQueueFamilyIndices(fams);
    b->buf = vk::raii::Buffer(dev, bi);
    const vk::MemoryRequirements req = b->buf.getMemoryRequirements();
    b->mem = vk::raii::DeviceMemory(dev, vk::MemoryAllocateInfo(req.size, type));
  } catch (const vk::SystemError& e) {
    uint64_t in_use = 0;
    for (const auto& x : blocks) in_use += x ? x->used : 0;
    throw gpu_error("device memory allocation of " + mib(size) + " failed (" + e.what() + "); in use " + mib(in_use));
  }
  b->buf.bindMemory(*b->mem, 0);
  if (map) b->mapped = static_cast<uint8_t*>(b->mem.mapMemory(0, size));
  b->free.emplace(0, size);
  return b;
}

buffer device_impl::alloc(uint64_t bytes) {
  const uint64_t size = round_up(std::max<uint64_t>(bytes, 1), align);
  const uint64_t limit = std::min(info.max_allocation, info.max_buffer_size);
  if (size > limit)
    throw gpu_error("allocation of " + std::to_string(bytes) + " bytes exceeds the device's largest allocation (" +
                    std::to_string(limit) + " bytes): split the tensor");
  const uint64_t block_bytes = std::min(std::max<uint64_t>(opt.block_bytes, align), limit);
  uint32_t slot = ~0u;
  uint64_t off = 0;
  if (size <= block_bytes / 2) {  // sub-allocate (first fit)
    for (uint32_t i = 0; i < blocks.size() && slot == ~0u; ++i) {
      block* b = blocks[i].get();
      if (!b || b->dedicated) continue;
      for (auto it = b->free.begin(); it != b->free.end(); ++it)
        if (it->second >= size) {
          slot = i;
          off = it->first;
          const uint64_t rest = it->second - size;
          b->free.erase(it);
          if (rest) b->free.emplace(off + size, rest);
          break;
        }
    }
  }
  if (slot == ~0u) {
    const bool dedicated = size > block_bytes / 2;
    auto nb = make_block(dedicated ? size : block_bytes, mem_type, info.host_visible);
    nb->dedicated = dedicated;
    nb->free.clear();
    if (!dedicated && block_bytes > size) nb->free.emplace(size, block_bytes - size);
    off = 0;
    auto empty = std::find(blocks.begin(), blocks.end(), nullptr);
    if (empty == blocks.end()) empty = blocks.insert(blocks.end(), nullptr);
    *empty = std::move(nb);
    slot = uint32_t(empty - blocks.begin());
  }
  blocks[slot]->used += size;
  buffer out;
  out.dev_ = this;
  out.block_ = slot;
  out.offset_ = off;
  out.size_ = bytes;
  return out;
}

buffer device_impl::adopt(std::unique_ptr<block> nb, uint64_t bytes) {
  nb->dedicated = true;
  nb->free.clear();
  nb->used = nb->size;
  auto empty = std::find(blocks.begin(), blocks.end(), nullptr);
  if (empty == blocks.end()) empty = blocks.insert(blocks.end(), nullptr);
  *empty = std::move(nb);
  buffer out;
  out.dev_ = this;
  out.block_ = uint32_t(empty - blocks.begin());
  out.offset_ = 0;
  out.size_ = bytes;
  return out;
}

uint64_t device_impl::import_copy(const upload_part& p) {
  if (!info.host_import || p.bytes < import_min) return 0;
  const uint64_t a = info.host_import_align;
  uint64_t done = 0;
  while (done < p.bytes) {
    const uint64_t n = std::min(import_max, p.bytes - done);
    // The whole pages around [src, src + n): the import's pointer and size are multiples of the alignment (the
    // pages exist: a mapping or heap allocation covers every page it touches).
    const auto addr = reinterpret_cast<uintptr_t>(p.src + done);
    const uintptr_t lo = addr / a * a;
    const uint64_t delta = addr - lo, size = round_up(delta + n, a);
    void* host = reinterpret_cast<void*>(lo);
    try {
      const auto handle = vk::ExternalMemoryHandleTypeFlagBits::eHostAllocationEXT;
      const vk::MemoryHostPointerPropertiesEXT hp = dev.getMemoryHostPointerPropertiesEXT(handle, host);
      const vk::ExternalMemoryBufferCreateInfo eb(handle);
      vk::BufferCreateInfo bi({}, size, vk::BufferUsageFlagBits::eTransferSrc);
      bi.pNext = &eb;
      vk::raii::Buffer buf(dev, bi);
      const uint32_t bits = hp.memoryTypeBits & buf.getMemoryRequirements().memoryTypeBits;
      if (!bits) break;
      vk::ImportMemoryHostPointerInfoEXT imp(handle, host);
      vk::MemoryAllocateInfo mi(size, uint32_t(std::countr_zero(bits)));
      mi.pNext = &imp;
      vk::raii::DeviceMemory mem(dev, mi);
      buf.bindMemory(*mem, 0);
      run_once([&](vk::raii::CommandBuffer& cb) {
        cb.copyBuffer(*buf, *p.dst->buf, vk::BufferCopy(delta, p.base + done, n));
      });
    } catch (const vk::SystemError&) {
      break;  // the device would not import these pages: the caller stages the rest
    }
    done += n;
    imported_bytes += n;
  }
  return done;
}

void device_impl::upload_pipelined(std::span<const upload_part> parts) {
  // Two halves of a write-combined staging block: the host fills one (several parts, each one copy region) while
  // the device copies the other.
  if (!upload_staging) upload_staging = make_block(2 * upload_half_bytes, upload_type, true);
  struct half {
    vk::raii::CommandBuffer cb{nullptr};
    vk::raii::Fence fence{nullptr};
    bool busy = false;
    uint64_t used = 0;
    std::vector<std::pair<block*, vk::BufferCopy>> regions;
  } halves[2];
  for (half& x : halves) {
    vk::raii::CommandBuffers cbs(dev,
                                 vk::CommandBufferAllocateInfo(*compute.pool, vk::CommandBufferLevel::ePrimary, 1));
    x.cb = std::move(cbs.front());
    x.fence = vk::raii::Fence(dev, vk::FenceCreateInfo());
  }
  auto finish = [&](half& x) {
    if (!x.busy) return;
    if (dev.waitForFences({*x.fence}, VK_TRUE, UINT64_MAX) != vk::Result::eSuccess) throw gpu_error("fence wait failed");
    dev.resetFences({*x.fence});
    x.busy = false;
  };
  uint32_t cur = 0;
  auto flush = [&]() {
    half& x = halves[cur];
    if (x.regions.empty()) return;
    x.cb.reset();
    x.cb.begin(vk::CommandBufferBeginInfo(vk::CommandBufferUsageFlagBits::eOneTimeSubmit));
    for (const auto& [blk, r] : x.regions) x.cb.copyBuffer(*upload_staging->buf, *blk->buf, r);
    x.cb.end();
    const vk::CommandBuffer cbh = *x.cb;
    compute.queue.submit(vk::SubmitInfo({}, {}, cbh), *x.fence);
    x.busy = true;
    x.regions.clear();
    x.used = 0;
    cur ^= 1u;
    finish(halves[cur]);  // the other half's previous copies have read it
  };
  try {
    for (const upload_part& p : parts) {
      // straight from the source's pages where the device imports them; the rest (if any) staged
      for (uint64_t done = import_copy(p); done < p.bytes;) {
        half& x = halves[cur];
        if (x.used == upload_half_bytes) {
          flush();
          continue;
        }
        const uint64_t n = std::min(upload_half_bytes - x.used, p.bytes - done);
        const uint64_t so = cur * upload_half_bytes + x.used;
        std::memcpy(upload_staging->mapped + so, p.src + done, n);
        x.regions.push_back({p.dst, vk::BufferCopy(so, p.base + done, n)});
        x.used += n;
        done += n;
      }
    }
    flush();
    finish(halves[0]);
    finish(halves[1]);
  } catch (...) {  // never free a command buffer the device may still run
    for (half& x : halves)
      if (x.busy) (void)dev.waitForFences({*x.fence}, VK_TRUE, UINT64_MAX);
    throw;
  }
}

void device_impl::upload_batch(std::span<const upload_piece> pieces) {
  for (const upload_piece& pc : pieces) {  // every piece checked before any byte moves
    const view& v = pc.dst;
    if (!v.buf || !*v.buf) throw gpu_error("upload: empty buffer");
    if (pc.bytes > v.bytes || v.offset + pc.bytes > v.buf->size()) throw gpu_error("upload: range outside the buffer");
  }
  std::vector<upload_part> parts;
  parts.reserve(pieces.size());
  for (const upload_piece& pc : pieces) {
    const view& v = pc.dst;
    if (pc.bytes == 0) continue;
    block& blk = block_of(*v.buf);
    const uint64_t base = offset_of(*v.buf) + v.offset;
    if (blk.mapped)
      std::memcpy(blk.mapped + base, pc.src, pc.bytes);
    else
      parts.push_back({&blk, base, static_cast<const uint8_t*>(pc.src), pc.bytes});
  }
  if (!parts.empty()) upload_pipelined(parts);
}

buffer device_impl::alloc_upload(uint64_t bytes) {
  if (info.host_visible) return alloc(bytes);  // every buffer is mapped already
  const uint64_t size = round_up(std::max<uint64_t>(bytes, 1), align);
  return adopt(make_block(size, upload_type, true), bytes);
}

buffer device_impl::alloc_readback(uint64_t bytes) {
  if (info.host_visible) return alloc(bytes);
  const uint64_t size = round_up(std::max<uint64_t>(bytes, 1), align);
  return adopt(make_block(size, staging_type, true), bytes);  // host-cached where there is such a type
}

void device_impl::release(buffer& b) noexcept {
  block* blk = b.block_ < blocks.size() ? blocks[b.block_].get() : nullptr;
  if (!blk) return;
  const uint64_t size = round_up(std::max<uint64_t>(b.size_, 1), align);
  blk->used -= size;
  if (blk->used == 0) {  // give whole blocks back: weights come and go in large pieces
    blocks[b.block_].reset();
    return;
  }
  auto [it, ok] = blk->free.emplace(b.offset_, size);
  if (auto nx = std::next(it); nx != blk->free.end() && it->first + it->second == nx->first) {
    it->second += nx->second;
    blk->free.erase(nx);
  }
  if (it != blk->free.begin()) {
    auto pv = std::prev(it);
    if (pv->first + pv->second == it->first) {
      pv->second += it->second;
      blk->free.erase(it);
    }
  }
}

void device_impl::copy(const view& v, void* host, uint64_t bytes, bool to_device) {
  if (!v.buf || !*v.buf) throw gpu_error("copy: empty buffer");
  if (bytes > v.bytes || v.offset + bytes > v.buf->size()) throw gpu_error("copy: range outside the buffer");
  block& blk = block_of(*v.buf);
  const uint64_t base = offset_of(*v.buf) + v.offset;
  if (blk.mapped) {
    if (to_device)
      std::memcpy(blk.mapped + base, host, bytes);
    else
      std::memcpy(host, blk.mapped + base, bytes);
    return;
  }
  auto* h = static_cast<uint8_t*>(host);
  if (to_device) {
    const upload_part one{&blk, base, h, bytes};
    upload_pipelined(std::span<const upload_part>(&one, 1));
    return;
  }
  if (!staging) staging = make_block(staging_bytes, staging_type, true);
  for (uint64_t done = 0; done < bytes;) {
    const uint64_t n = std::min(staging_bytes, bytes - done);
    if (to_device) std::memcpy(staging->mapped, h + done, n);
    run_once([&](vk::raii::CommandBuffer& cb) {
      if (to_device)
        cb.copyBuffer(*staging->buf, *blk.buf, vk::BufferCopy(0, base + done, n));
      else {
        cb.copyBuffer(*blk.buf, *staging->buf, vk::BufferCopy(base + done, 0, n));
        const vk::MemoryBarrier hb(vk::AccessFlagBits::eTransferWrite, vk::AccessFlagBits::eHostRead);
        cb.pipelineBarrier(vk::PipelineStageFlagBits::eTransfer, vk::PipelineStageFlagBits::eHost, {}, hb, {}, {});
      }
    });
    if (!to_device) std::memcpy(h + done, staging->mapped, n);
    done += n;
  }
}

bound bind_range(const device_info& info, const view& v, uint64_t off, uint64_t bytes) {
  if (!v.buf || !*v.buf) throw gpu_error("kernel argument: empty buffer");
  const uint64_t start = v.offset + off;
  if (start + bytes > v.buf->size()) throw gpu_error("kernel argument: range outside the buffer");
  const uint64_t a = std::max<uint64_t>(info.min_storage_align, 4);
  const uint64_t aligned = start / a * a;
  const uint64_t residual = start - aligned;
  // Allocations are rounded up to >= 256 bytes, so up to round_up(size, 256) is readable slack.
  const uint64_t cap = round_up(std::max<uint64_t>(v.buf->size(), 1), 256) - aligned;
  uint64_t range = std::min(round_up(residual + bytes, 4) + 16, cap);
  if (range > info.max_storage_range) range = round_up(residual + bytes, 4);
  if (range > info.max_storage_range)
    throw gpu_error("kernel argument of " + std::to_string(bytes) + " bytes exceeds maxStorageBufferRange (" +
                    std::to_string(info.max_storage_range) + ")");
  return bound{binding{v.buf, aligned, range}, uint32_t(residual)};
}

}  // namespace detail

buffer::~buffer() {
  if (dev_) dev_->release(*this);
}

buffer device::alloc(uint64_t bytes) {
  try {
    return p_->alloc(bytes);
  } catch (const vk::SystemError& e) {
    throw gpu_error(std::string("alloc: ") + e.what());
  }
}

buffer device::alloc_upload(uint64_t bytes) {
  try {
    return p_->alloc_upload(bytes);
  } catch (const vk::SystemError& e) {
    throw gpu_error(std::string("alloc_upload: ") + e.what());
  }
}

buffer device::alloc_readback(uint64_t bytes) {
  try {
    return p_->alloc_readback(bytes);
  } catch (const vk::SystemError& e) {
    throw gpu_error(std::string("alloc_readback: ") + e.what());
  }
}

uint8_t* device::mapped(const buffer& b) {
  if (!b) throw gpu_error("mapped: empty buffer");
  detail::block& blk = p_->block_of(b);
  if (!blk.mapped) throw gpu_error("mapped: this buffer is device memory the host cannot map (use alloc_upload)");
  return blk.mapped + p_->offset_of(b);
}

void device::upload_batch(std::span<const upload_piece> pieces) {
  try {
    p_->upload_batch(pieces);
  } catch (const vk::SystemError& e) {
    throw gpu_error(std::string("upload: ") + e.what());
  }
}

void device::upload(const view& dst, const void* src, uint64_t bytes) {
  try {
    p_->copy(dst, const_cast<void*>(src), bytes, true);
  } catch (const vk::SystemError& e) {
    throw gpu_error(std::string("upload: ") + e.what());
  }
}

void device::download(const view& src, void* dst, uint64_t bytes) {
  try {
    p_->copy(src, dst, bytes, false);
  } catch (const vk::SystemError& e) {
    throw gpu_error(std::string("download: ") + e.what());
  }
}

device::memory_stats device::memory() const noexcept {
  memory_stats s;
  s.imported_upload_bytes = p_->imported_bytes;
  for (const auto& b : p_->blocks)
    if (b) {
      s.reserved += b->size;
      s.in_use += b->used;
      ++s.blocks;
    }
  return s;
}

}  // namespace cmfx::gpu
