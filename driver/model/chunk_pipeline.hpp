#pragma once
// The prefill chunks' host work overlapped with the device (V4 and V4.1 GPU graphs). A chunk's host-made inputs —
// its ids, window and key lists, Engram rows — are written into one of two mapped upload areas and copied into the
// chunk's device buffers by the chunk's own recording (chunk_inputs), so nothing the device may still read is
// written by the host. The graph records chunk k + 1 while the device runs chunk k and submits it once chunk k is
// waited for (chunk_in_flight): chunk k + 1 writes the area chunk k − 1 read, which has run by then.
#include <cstdint>
#include <cstring>
#include <memory>
#include <optional>
#include <vector>

#include "cmfx/vk/device.hpp"
#include "gpu_graph.hpp"

namespace cmfx::driver {

class chunk_inputs {
 public:
  explicit chunk_inputs(gpu::device& dev) : dev_(dev) {}
  /// Starts a chunk's inputs in the other area (the one the chunk before the previous used).
  void begin();
  /// Room for `bytes` (≤ dst's size) that record() copies to dst; the host fills it before the recording runs.
  uint8_t* stage(const gpu::view& dst, uint64_t bytes);
  template <class T>
  T* stage_as(const gpu::view& dst, uint64_t count) {
    return reinterpret_cast<T*>(stage(dst, count * sizeof(T)));
  }
  template <class T>
  void put(const gpu::view& dst, const std::vector<T>& v) {
    if (!v.empty()) std::memcpy(stage(dst, v.size() * sizeof(T)), v.data(), v.size() * sizeof(T));
  }
  /// Records this chunk's copies (each waits for the work recorded and submitted before it: the chunk before may
  /// still read the destinations) — at the start of the chunk's recording.
  void record(gpu::commands& c) const;

 private:
  static constexpr uint64_t block_bytes = uint64_t(16) << 20;
  struct area {
    std::vector<std::unique_ptr<gpu::buffer>> blocks;
    size_t block = 0;
    uint64_t used = 0;
  };
  struct piece {
    const gpu::buffer* src;
    uint64_t offset, bytes;
    gpu::view dst;
  };
  gpu::device& dev_;
  area areas_[2];
  unsigned cur_ = 1;
  std::vector<piece> pieces_;
};

/// A submitted chunk not yet waited for.
class chunk_in_flight {
 public:
  /// Waits for the chunk in flight (if any) and adds its device time to `s`; then submits `c` without waiting,
  /// [t_first, t_last] its timestamps (timed: the device has them).
  void submit(gpu::device& dev, gpu::commands&& c, bool timed, uint32_t t_first, uint32_t t_last,
              gpu_prefill_stats& s);
  /// A chunk's recording: submit() when `pipelined` (c is moved from), else run and waited for (after the chunk in
  /// flight), its device time added to `s`.
  void run(gpu::device& dev, gpu::commands& c, bool pipelined, bool timed, uint32_t t_first, uint32_t t_last,
           gpu_prefill_stats& s);
  /// Waits for the chunk in flight, if any (and adds its device time to `s`). Every device use after a
  /// pipelined chunk — the logits' download, a decode step, an upload — comes after this.
  void finish(gpu::device& dev, gpu_prefill_stats& s);
  /// As finish, for an error path: waits without throwing (a failed wait leaves the device lost anyway).
  void drain(gpu::device& dev) noexcept;

 private:
  std::optional<gpu::commands> c_;
  bool timed_ = false;
  uint32_t t_first_ = 0, t_last_ = 0;
};

}  // namespace cmfx::driver
