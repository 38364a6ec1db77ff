#pragma once
/// @file device.hpp
/// @brief The Vulkan device layer (link cmfx::vk). This header does not include vulkan.hpp: every Vulkan object
///        lives behind a pointer to an implementation compiled once in src/vk/.
///
/// One `device` = one physical device, one compute queue, one memory arena, the pipeline caches. Objects are not
/// thread-safe: use a device from one thread at a time. Buffers must not outlive their device.
///
///   gpu::device dev({.index = -1});            // best device: discrete GPU, then integrated, virtual, CPU
///   gpu::buffer b = dev.alloc(bytes);          // sub-allocated from large blocks (arena)
///   dev.upload(b, host_ptr, bytes);            // mapped directly when the memory is host-visible, else staged
///   gpu::commands c = dev.begin();             // record dispatches (gpu::kernels, kernels.hpp) ...
///   dev.submit(c);                             // ... run them and wait
#include <cstdint>
#include <memory>
#include <span>
#include <stdexcept>
#include <string>
#include <vector>

namespace cmfx::gpu {

/// Every failure of the GPU layer: no Vulkan loader, no suitable device, a missing feature, an allocation that
/// does not fit, a shader that does not compile (the message carries glslang's log).
class gpu_error : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

enum class device_kind : uint8_t { discrete, integrated, virtual_gpu, cpu, other };
std::string_view device_kind_name(device_kind k) noexcept;

/// How to pick and drive the device. Defaults suit production; the allow_* switches force the fallback
/// variants so that the parity suite can test them on a device that has the feature.
struct device_options {
  int index = -1;               ///< -1: best kind first; otherwise the index in list_devices()
  std::string cache_dir;        ///< SPIR-V and VkPipelineCache files; empty: no disk cache
  std::string shader_dir;       ///< read shaders/*.comp, *.glsl from here; empty: the copies built into cmfx_vk
  /// enable VK_LAYER_KHRONOS_validation (error if it is not installed); its errors and warnings go to stderr and
  /// the errors are counted (device::validation_errors)
  bool validation = false;
  bool allow_subgroup_ops = true;     ///< false: reductions through shared memory only
  bool allow_small_storage = true;    ///< false: no 8/16-bit storage access (32-bit word loads + bit extraction)
  /// f64 accumulators (RMSNorm, softmax, mHC coefficients, pooling, routing scores) where the device has f64: the
  /// CPU reference's precision, at 11 % of the V4 decode time on the H200 (docs/PERF.md, tenth session). Default:
  /// f32, within every parity bound (docs/VULKAN.md).
  bool float64 = false;
  bool allow_int_dot = true;          ///< false: never use packed integer dot products (int8-activation matvec)
  bool allow_shuffle = true;          ///< false: no subgroup shuffles (f64 subgroup sums through subgroupAdd)
  bool allow_coop_matrix = true;      ///< false: never enable VK_NV_cooperative_matrix (tensor-core GEMM tiles)
  /// true: staged uploads of ≥ 1 MiB import the source's pages (VK_EXT_external_memory_host, where the device has
  /// it) instead of copying them through the staging buffer. Off by default until it is timed and checked on a
  /// discrete GPU (checked on lavapipe with force_staging: CTest vk_parity_staging, `cmfx-parity --host-import`).
  bool allow_host_import = false;
  /// true: buffers in memory the host does not map even where it could (unified memory, lavapipe), so that
  /// uploads, downloads and alloc_upload take a discrete GPU's staged paths; tests only.
  bool force_staging = false;
  bool optimize_spirv = true;         ///< run spirv-opt's performance passes on every shader
  /// true: loads of the weight planes (and stream_read's source) carry SPIR-V's Nontemporal hint — they pass
  /// through the L2 once per token. Diagnostics: no effect measured on the H200 (docs/VULKAN.md "Bank conflicts in
  /// the indexer, a faster top-k, and what did not pay").
  bool nontemporal_weights = false;
  /// true: every pipeline is created with its compiler statistics captured (VK_KHR_pipeline_executable_properties,
  /// where the device has it: e.g. the NVIDIA driver's register count, shared memory, spills) for
  /// device::pipeline_statistics(). Diagnostics (`cmfx-bench-vk --pipeline-stats`).
  bool pipeline_statistics = false;
  /// true: recordings from device::begin_transfer() go to a queue of a transfer-only family (the copy engines of
  /// a discrete GPU, which a compute queue's copies do not reach) where the device has one and timeline
  /// semaphores; buffers are then shared by both families. false, or no such family: they go to the compute queue.
  /// Either way they are ordered against other recordings by commands::after alone. Off by default (buffers are
  /// shared by both families only then); the driver turns it on under --vram-budget for the expert cache's copies.
  bool transfer_queue = false;
  uint64_t max_binding_bytes = 0;     ///< cap on one storage-buffer binding (0: the device limit); tests only
  uint64_t block_bytes = 256ull << 20;  ///< arena block size (larger requests get a dedicated allocation)
};

/// Storage-buffer bindings one dispatch may take (the widest: mhc_block.comp's boundary with a fold and its own
/// coefficient output); a device with fewer per stage is unsuitable.
inline constexpr uint32_t max_dispatch_bindings = 14;

/// What the selected device is and can do (queried once).
struct device_info {
  uint32_t index = 0;  ///< in list_devices()
  std::string name, driver_name, driver_info;
  device_kind kind = device_kind::other;
  uint32_t api_version = 0, vendor_id = 0, device_id = 0, driver_version = 0;
  uint8_t pipeline_cache_uuid[16] = {};
  uint32_t subgroup_size = 0;              ///< as reported; lavapipe 8, NVIDIA 32 — never assumed
  uint32_t min_subgroup_size = 0, max_subgroup_size = 0;
  bool subgroup_arithmetic = false, subgroup_shuffle = false, subgroup_size_control = false;
  bool storage8 = false, storage16 = false, float64 = false, int64 = false;
  /// shaderFloat64 is there and enabled, whatever device_options::float64 says: single f64 operations (the route
  /// score's correctly rounded quotient) — `float64` above is the f64 accumulators' switch.
  bool float64_ops = false;
  bool int_dot = false;        ///< shaderIntegerDotProduct (packed 4x8-bit dot products in shaders)
  bool int_dot_fast = false;   ///< the packed 4x8 mixed-signedness dot product is hardware-accelerated
  bool float16 = false;        ///< shaderFloat16 (f16 arithmetic and f16 shared-memory tiles)
  /// VK_NV_cooperative_matrix with the subgroup-scope 16×16×16 shape of f16 A, B and f32 C, D (tensor cores):
  /// gemm.comp's cooperative-matrix tiles (kernels::set_gemm_precision).
  bool coop_matrix = false;
  /// coop_matrix, and the subgroup-scope 16×16×32 shape of s8 A, B and s32 C, D listed (int8 tensor cores; needs
  /// shaderInt8, i.e. storage8): moe_i8_tc.comp's expert products (matvec_tuning::moe_i8_tc).
  bool coop_i8 = false;
  /// Every subgroup-scope shape VK_NV_cooperative_matrix lists ("MxNxK A·B+C→D" with the component types, comma
  /// separated; empty without the extension): what other tensor-core kernels could use (e.g. int8 products).
  std::string coop_shapes;
  /// VK_EXT_external_memory_host: a staged upload of ≥ device_impl::import_min bytes copies straight from the
  /// source's pages (imported as a buffer, host_import_align-aligned) instead of through the staging buffer.
  bool host_import = false;
  uint64_t host_import_align = 0;
  bool timestamps = false;
  double timestamp_period_ns = 1.0;
  bool timeline = false;         ///< timeline semaphores (Vulkan 1.2's timelineSemaphore): commands::after
  int transfer_family = -1;      ///< a queue family with transfers but neither compute nor graphics (-1: none)
  bool transfer_queue = false;   ///< begin_transfer() records for that family's queue (device_options::transfer_queue)
  bool transfer_timestamps = false;  ///< commands::timestamp works in begin_transfer() recordings
  uint64_t max_allocation = 0, max_storage_range = 0, min_storage_align = 16, max_buffer_size = 0;
  uint32_t max_shared_memory = 0, max_workgroup_invocations = 0, max_groups_x = 0, max_groups_y = 0;
  uint32_t max_storage_buffers = 0;  ///< maxPerStageDescriptorStorageBuffers (≥ max_dispatch_bindings needed)
  uint64_t device_local_bytes = 0;  ///< size of the heap buffers are allocated from
  bool host_visible = false;        ///< that memory is mapped directly (unified memory, lavapipe)
  bool host_cached = false;  ///< alloc_readback's memory is host-cached system memory (not the device's own)
  std::string describe() const;     ///< one line: name, kind, API, subgroup, memory
};

/// Every physical device the loader reports (empty when there is none). Throws gpu_error when the Vulkan loader
/// itself cannot be opened.
std::vector<device_info> list_devices();

namespace detail {
struct device_impl;
struct commands_impl;
}  // namespace detail

/// A range of device memory owned by the caller (move-only). Released into the arena when destroyed.
class buffer {
 public:
  buffer() = default;
  buffer(buffer&& o) noexcept { swap(o); }
  buffer& operator=(buffer&& o) noexcept {
    buffer t(std::move(o));
    swap(t);
    return *this;
  }
  buffer(const buffer&) = delete;
  buffer& operator=(const buffer&) = delete;
  ~buffer();
  uint64_t size() const noexcept { return size_; }
  explicit operator bool() const noexcept { return dev_ != nullptr; }

 private:
  friend struct detail::device_impl;
  void swap(buffer& o) noexcept {
    std::swap(dev_, o.dev_);
    std::swap(block_, o.block_);
    std::swap(offset_, o.offset_);
    std::swap(size_, o.size_);
  }
  detail::device_impl* dev_ = nullptr;
  uint32_t block_ = 0;   // arena block
  uint64_t offset_ = 0;  // in the block
  uint64_t size_ = 0;
};

/// A byte range of a buffer handed to a kernel. A default-constructed view means "none".
struct view {
  const buffer* buf = nullptr;
  uint64_t offset = 0;
  uint64_t bytes = 0;
  view() = default;
  view(const buffer& b) : buf(&b), bytes(b.size()) {}  // NOLINT: implicit on purpose
  view(const buffer& b, uint64_t off, uint64_t n) : buf(&b), offset(off), bytes(n) {}
  explicit operator bool() const noexcept { return buf != nullptr; }
};

/// One host → device copy of device::upload_batch.
struct upload_piece {
  view dst;
  const void* src = nullptr;
  uint64_t bytes = 0;
};

/// The end of a submitted recording on its queue's timeline (commands::done, device::last_submitted), for
/// commands::after. Value 0: nothing to wait for.
struct sync_point {
  uint32_t queue = 0;  ///< 0: the compute queue, 1: the transfer queue (device_info::transfer_queue)
  uint64_t value = 0;
};

/// A recording of dispatches (one command buffer). Kernels put a compute→compute memory barrier before every
/// dispatch after the first, so recorded work runs in order.
class commands {
 public:
  commands(commands&&) noexcept;
  commands& operator=(commands&&) noexcept;
  ~commands();
  /// Records a timestamp after all previous work; returns its slot (timestamps must be supported).
  uint32_t timestamp();
  /// Seconds between two timestamps, valid after the device ran this recording.
  double seconds(uint32_t from, uint32_t to) const;
  /// Forget everything recorded (after submit) to record again with the same command buffer.
  void reset();
  uint32_t dispatch_count() const noexcept;
  /// Between begin_concurrent() and end_concurrent() dispatches are recorded without the execution/memory
  /// barrier that normally separates consecutive dispatches: the caller promises they neither read what another
  /// of them writes nor write the same memory (e.g. the independent projections of one activation vector). The
  /// first dispatch of the group still waits for everything recorded before it; the first dispatch after the
  /// group waits for the whole group.
  void begin_concurrent();
  void end_concurrent();
  bool in_concurrent() const noexcept;

  /// Transfers recorded in order with the dispatches (each waits for all earlier work; later dispatches wait for
  /// it). Transfers recorded back to back are not ordered among themselves: they must write distinct memory.
  /// update: `bytes` (a multiple of 4, at most update_max) of host data carried inside the command buffer
  /// (vkCmdUpdateBuffer) — per-token parameters without a separate upload; dst offset a multiple of 4.
  static constexpr uint64_t update_max = 65536;
  void update(const view& dst, const void* data, uint64_t bytes);
  /// dst[0, bytes) = src[0, bytes) (device-to-device copy; no overlap).
  void copy(const view& src, const view& dst, uint64_t bytes);
  /// Every 32-bit word of dst[0, bytes) = word (bytes a multiple of 4).
  void fill(const view& dst, uint64_t bytes, uint32_t word);
  /// A full barrier: everything recorded after it waits for every dispatch and transfer before it — including
  /// those of recordings submitted earlier to the device (submission order), so a recording that starts with
  /// barrier() may follow another one with submit_async.
  void barrier();
  /// This recording starts only after `p` (a recording submitted before it, to either queue) has run, whose
  /// writes it then sees: a timeline-semaphore wait at its submission (device_info::timeline; gpu_error without).
  /// What orders recordings of different queues — barrier() orders only those of one queue. Waits are kept until
  /// the next submission.
  void after(sync_point p);
  /// The point this recording's last submission signals (gpu_error before it is submitted).
  sync_point done() const;
  /// A recording from device::begin_transfer(): transfers only.
  bool transfer() const noexcept;
  detail::commands_impl& impl() noexcept { return *p_; }

 private:
  friend class device;
  explicit commands(std::unique_ptr<detail::commands_impl> p);
  std::unique_ptr<detail::commands_impl> p_;
};

class device {
 public:
  explicit device(const device_options& o = {});
  ~device();
  device(const device&) = delete;
  device& operator=(const device&) = delete;

  const device_info& info() const noexcept;
  const device_options& options() const noexcept;

  /// Device memory of `bytes` (rounded up to 256). Throws gpu_error when it exceeds maxMemoryAllocationSize.
  buffer alloc(uint64_t bytes);
  /// Host-visible memory the host writes through mapped() and recordings read (commands::copy from it): the
  /// source of streamed uploads (write-combined system memory on a discrete device, where the copy engine reads it
  /// over the bus; the device's own memory where every buffer is host-visible).
  buffer alloc_upload(uint64_t bytes);
  /// Host-visible memory recordings write (commands::copy into it) and the host reads through mapped() after the
  /// recording ran: host-cached system memory where there is such a type (reading write-combined memory from the
  /// CPU is uncached, ~100 µs for 20 KB on the H200 host), the device's own memory where every buffer is
  /// host-visible.
  buffer alloc_readback(uint64_t bytes);
  /// The host address of a buffer from alloc_upload / alloc_readback (or of any buffer on a host-visible device);
  /// gpu_error for device memory the host cannot map.
  uint8_t* mapped(const buffer& b);
  /// Host → device / device → host copies of `bytes` at the view's offset (bytes <= the view's size).
  void upload(const view& dst, const void* src, uint64_t bytes);
  void download(const view& src, void* dst, uint64_t bytes);
  template <class T>
  void upload(const view& dst, const std::vector<T>& v) { upload(dst, v.data(), v.size() * sizeof(T)); }
  /// Many host → device copies at once (on a discrete device packed into the shared staging submissions instead
  /// of one submission and wait each): what stacking many small planes needs.
  void upload_batch(std::span<const upload_piece> pieces);

  commands begin();
  /// A recording of transfers only (copy, fill, update, barrier, timestamp where transfer_timestamps; a dispatch
  /// throws) for the transfer queue (device_info::transfer_queue; else the compute queue). It runs beside the
  /// compute queue's recordings: order it with commands::after in both directions.
  commands begin_transfer();
  /// The point of the last recording submitted to a queue (0: compute, 1: transfer; the compute queue's where
  /// there is no transfer queue): after(last_submitted(q)) waits for everything submitted to q so far.
  sync_point last_submitted(uint32_t queue) const noexcept;
  /// Runs a recording and waits for it. Submitting it again (without reset) runs the same work once more:
  /// benchmarks repeat a recording without paying for recording it again.
  void submit(commands& c);
  /// Starts a recording without waiting (recordings of one queue run in submission order); wait(c) blocks until
  /// it has run and fetches its timestamps. The host may record other work meanwhile.
  void submit_async(commands& c);
  void wait(commands& c);
  /// Whether a submitted recording has run (its fence, without blocking); true when it is not pending. wait(c)
  /// still fetches its timestamps. A host that spins on this instead of blocking in wait() sees the end of a
  /// short part sooner (the driver's blocking wait may sleep).
  bool ready(commands& c);

  struct memory_stats {
    uint64_t reserved = 0, in_use = 0;
    uint32_t blocks = 0;
    uint64_t imported_upload_bytes = 0;  ///< bytes uploaded straight from imported host pages (since creation)
  };
  memory_stats memory() const noexcept;
  /// One line per pipeline created so far, with the driver's statistics ("shader: name value, ..."), where
  /// device_options::pipeline_statistics is set and the device has VK_KHR_pipeline_executable_properties; else
  /// empty.
  std::vector<std::string> pipeline_statistics() const;
  /// Errors the validation layer reported since creation (device_options::validation; else 0).
  uint64_t validation_errors() const noexcept;
  /// Writes the VkPipelineCache to the cache directory now (also done by the destructor).
  void save_pipeline_cache();

  detail::device_impl& impl() noexcept { return *p_; }

 private:
  std::unique_ptr<detail::device_impl> p_;
};

}  // namespace cmfx::gpu
