#pragma once
// The Vulkan-Hpp side of cmfx_vk: included only by device.cpp, queues.cpp, memory.cpp and pipelines.cpp (P12: every TU
// that includes vulkan_raii.hpp costs ~7 s to compile).
#include <vulkan/vulkan_raii.hpp>

#include <atomic>
#include <map>
#include <memory>
#include <span>
#include <string>
#include <unordered_map>
#include <vector>

#include "internal.hpp"

namespace cmfx::gpu::detail {

/// One VkDeviceMemory with one VkBuffer over all of it; buffers are [offset, size) ranges of a block.
struct block {
  vk::raii::DeviceMemory mem{nullptr};
  vk::raii::Buffer buf{nullptr};
  uint64_t size = 0, used = 0;
  uint8_t* mapped = nullptr;
  bool dedicated = false;
  std::map<uint64_t, uint64_t> free;  // offset → size, coalesced
};

struct pipeline {
  std::string name;
  vk::raii::DescriptorSetLayout set_layout{nullptr};
  vk::raii::PipelineLayout layout{nullptr};
  vk::raii::Pipeline pipe{nullptr};
  uint32_t bindings = 0, push_bytes = 0;
  std::string stats;  ///< the driver's statistics (device_options::pipeline_statistics)
};

/// A queue with its command pool, its timeline semaphore (signalled by each submit_async where the device has
/// timeline semaphores: sync_point) and the command buffers and fences of destroyed recordings (for begin).
struct lane {
  uint32_t index = 0;  ///< sync_point::queue
  uint32_t family = 0;
  bool dedicated_transfer = false;  ///< a transfer-only family (stage masks without the compute stage)
  vk::raii::Queue queue{nullptr};
  vk::raii::CommandPool pool{nullptr};
  vk::raii::Semaphore timeline{nullptr};
  uint64_t submitted = 0;  ///< the value the last submission signals
  std::vector<std::pair<vk::raii::CommandBuffer, vk::raii::Fence>> spare_cmds;
};

struct commands_impl {
  device_impl* dev = nullptr;
  lane* on = nullptr;            // the queue this recording is submitted to
  bool transfer = false;         // from begin_transfer
  uint64_t signalled = 0;        // the value of on->timeline the last submission signals (0: not submitted)
  std::vector<sync_point> waits;  // commands::after, until the next submission
  vk::raii::CommandBuffer cb{nullptr};
  vk::raii::Fence fence{nullptr};
  std::vector<std::pair<vk::raii::DescriptorPool, uint32_t>> pools;  // with their set counts
  uint32_t sets_in_pool = 0, pool_sets = 0;  // sets allocated from / held by the last pool
  vk::raii::QueryPool queries{nullptr};
  uint32_t query_capacity = 0, query_count = 0;
  bool queries_reset = false;
  std::vector<uint64_t> stamps;
  uint32_t dispatches = 0;
  bool recording = false, ran = false;
  bool concurrent = false;      // inside begin_concurrent() / end_concurrent()
  bool barrier_needed = false;  // the next dispatch must wait for earlier work
  bool work_since_xfer = false; // a dispatch was recorded since the last transfer barrier
  bool xfer_since_barrier = false;  // a transfer was recorded since the last barrier before a dispatch
  bool pending = false;         // submitted (submit_async), not yet waited for
  void ensure_recording();
  /// Back to the device's spare pools (reset: their sets are dead once the recording will not run again).
  void recycle_pools() noexcept;
  ~commands_impl();
};

struct device_impl {
  device_options opt;
  device_info info;
  vk::raii::Context ctx;
  vk::raii::Instance instance{nullptr};
  vk::raii::DebugUtilsMessengerEXT messenger{nullptr};  // device_options::validation
  std::atomic<uint64_t> validation_errors{0};
  vk::raii::PhysicalDevice phys{nullptr};
  vk::raii::Device dev{nullptr};
  lane compute;                     // the compute queue (also every staged upload and download)
  std::unique_ptr<lane> transfer_lane;  // a transfer-only family's queue (device_options::transfer_queue)
  lane& xfer() noexcept { return transfer_lane ? *transfer_lane : compute; }
  lane& lane_of(uint32_t queue);    // sync_point::queue → its lane (gpu_error when there is none)
  vk::raii::PipelineCache pcache{nullptr};
  std::string pcache_path;
  bool exec_stats = false;  ///< pipelines capture the driver's statistics (device_options::pipeline_statistics)

  // memory (memory.cpp)
  uint32_t mem_type = 0, staging_type = 0, upload_type = 0;
  uint64_t align = 256;
  std::vector<std::unique_ptr<block>> blocks;  // null slots are released blocks
  std::unique_ptr<block> staging;         // downloads (host-cached)
  std::unique_ptr<block> upload_staging;  // uploads: two halves, write-combined (upload_pipelined)
  static constexpr uint64_t upload_half_bytes = 32ull << 20;
  // Descriptor pools of finished recordings, reset, for the next ones (creating a pool costs ≈ 0.5 ms on the
  // H200's driver: a token's recordings would pay it dozens of times).
  std::vector<std::pair<vk::raii::DescriptorPool, uint32_t>> spare_pools;
  // Timestamp query pools (query_pool_size queries each) of destroyed recordings: a recording resets its pool before
  // its first timestamp, so the expert cache's many stamped copies create none after the first few.
  std::vector<vk::raii::QueryPool> spare_queries;
  static constexpr uint32_t query_pool_size = 1024;
  static constexpr uint64_t staging_bytes = 64ull << 20;

  // pipelines (pipelines.cpp)
  std::unordered_map<std::string, std::unique_ptr<pipeline>> pipelines;
  compile_counters counters;
  uint64_t shader_hash = 0;
  bool shader_hash_ready = false;

  explicit device_impl(const device_options& o);
  ~device_impl();

  void choose_memory_types();
  std::unique_ptr<block> make_block(uint64_t size, uint32_t type, bool map);
  buffer alloc(uint64_t bytes);
  buffer alloc_upload(uint64_t bytes);
  buffer alloc_readback(uint64_t bytes);
  /// Puts block b in a free slot of `blocks` and returns a buffer of `bytes` at its start.
  buffer adopt(std::unique_ptr<block> b, uint64_t bytes);
  void release(buffer& b) noexcept;
  block& block_of(const buffer& b) const { return *blocks.at(b.block_); }
  uint64_t offset_of(const buffer& b) const noexcept { return b.offset_; }
  void copy(const view& v, void* host, uint64_t bytes, bool to_device);
  /// Host → device through the two halves of upload_staging, the next memcpy overlapping the previous copy.
  struct upload_part {
    block* dst;
    uint64_t base;
    const uint8_t* src;
    uint64_t bytes;
  };
  void upload_pipelined(std::span<const upload_part> parts);
  /// Staged uploads of at least this many bytes try VK_EXT_external_memory_host first (import_copy).
  static constexpr uint64_t import_min = 1ull << 20;
  static constexpr uint64_t import_max = 256ull << 20;  ///< bytes imported (pinned) at once
  uint64_t imported_bytes = 0;
  /// Copies p from its own pages (imported as a transfer-source buffer, import_max bytes at a time) into its
  /// destination and waits; returns the bytes copied — a prefix of p, 0 where the device has no import or refuses
  /// these pages (e.g. ones a driver cannot pin): the caller stages the rest.
  uint64_t import_copy(const upload_part& p);
  void upload_batch(std::span<const upload_piece> pieces);
  /// Records fn into a one-off command buffer, submits it and waits.
  template <class Fn>
  void run_once(Fn&& fn);

  void load_pipeline_cache();
  void save_pipeline_cache() noexcept;
  const pipeline* get(const pipeline_desc& d);
  std::vector<uint32_t> spirv_for(const pipeline_desc& d);
};

/// Runs fn, turning Vulkan-Hpp's exceptions into gpu_error prefixed with `what`.
template <class Fn>
auto guarded(const char* what, Fn&& fn) -> decltype(fn()) {
  try {
    return fn();
  } catch (const gpu_error&) {
    throw;
  } catch (const vk::SystemError& e) {
    throw gpu_error(std::string(what) + ": " + e.what());
  }
}

/// A recording for lane l (queues.cpp): a destroyed recording's command buffer and fence where l has one.
std::unique_ptr<commands_impl> new_recording(device_impl& d, lane& l, bool transfer);
/// Submits c's ended command buffer to its lane: with timeline semaphores it waits for c.waits and signals the
/// lane's next value (c.signalled); c.waits is cleared.
void submit_to_lane(device_impl& d, commands_impl& c);

template <class Fn>
void device_impl::run_once(Fn&& fn) {
  vk::raii::CommandBuffers cbs(dev,
                               vk::CommandBufferAllocateInfo(*compute.pool, vk::CommandBufferLevel::ePrimary, 1));
  vk::raii::CommandBuffer& cb = cbs.front();
  cb.begin(vk::CommandBufferBeginInfo(vk::CommandBufferUsageFlagBits::eOneTimeSubmit));
  fn(cb);
  cb.end();
  vk::raii::Fence f(dev, vk::FenceCreateInfo());
  const vk::CommandBuffer h = *cb;
  compute.queue.submit(vk::SubmitInfo({}, {}, h), *f);
  if (dev.waitForFences({*f}, VK_TRUE, UINT64_MAX) != vk::Result::eSuccess) throw gpu_error("fence wait failed");
}

}  // namespace cmfx::gpu::detail
