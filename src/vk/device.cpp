// Instance, physical-device selection, logical device and compute queue, command recording, dispatch and
// timestamps (Vulkan-Hpp RAII, toolchain.md §5).
#include <algorithm>
#include <cstdio>
#include <sstream>

#include "cmfx/core/error.hpp"
#include "vk_impl.hpp"

namespace cmfx::gpu {

std::string_view device_kind_name(device_kind k) noexcept {
  switch (k) {
    case device_kind::discrete: return "discrete GPU";
    case device_kind::integrated: return "integrated GPU";
    case device_kind::virtual_gpu: return "virtual GPU";
    case device_kind::cpu: return "CPU";
    default: return "other";
  }
}

std::string device_info::describe() const {
  std::ostringstream s;
  s << "#" << index << " " << name << " (" << device_kind_name(kind) << ", " << driver_name << ", Vulkan "
    << VK_API_VERSION_MAJOR(api_version) << "." << VK_API_VERSION_MINOR(api_version) << "."
    << VK_API_VERSION_PATCH(api_version) << "), subgroup " << subgroup_size
    << (subgroup_arithmetic ? " +arith" : "") << (subgroup_shuffle ? " +shuffle" : "")
    << (subgroup_size_control ? " +size-control" : "")
    << ", storage8 " << storage8 << ", storage16 " << storage16 << ", f64 " << float64 << ", int-dot "
    << (int_dot ? (int_dot_fast ? "accelerated" : "emulated") : "no") << ", f16 " << float16
    << ", coop-matrix " << (coop_matrix ? (coop_i8 ? "16x16x16 f16, 16x16x32 s8" : "16x16x16 f16") : "no")
    << ", host import " << (host_import ? "yes" : "no") << ", transfer queue "
    << (transfer_queue ? "family " + std::to_string(transfer_family) : transfer_family >= 0 ? "off" : "none")
    << ", memory "
    << (device_local_bytes >> 20) << " MiB" << (host_visible ? " host-visible" : "") << ", max binding "
    << (max_storage_range >> 20) << " MiB";
  return s.str();
}

namespace detail {
namespace {

/// The feature/property structures cmfx reads, chained by hand (the 1.3 structures only on 1.3 devices).
struct feature_chain {
  vk::PhysicalDeviceFeatures2 f2;
  vk::PhysicalDeviceVulkan11Features f11;
  vk::PhysicalDeviceVulkan12Features f12;
  vk::PhysicalDeviceVulkan13Features f13;
  void link(bool v13) {
    f2.pNext = &f11;
    f11.pNext = &f12;
    f12.pNext = v13 ? &f13 : nullptr;
    f13.pNext = nullptr;
  }
};

device_kind kind_of(vk::PhysicalDeviceType t) {
  switch (t) {
    case vk::PhysicalDeviceType::eDiscreteGpu: return device_kind::discrete;
    case vk::PhysicalDeviceType::eIntegratedGpu: return device_kind::integrated;
    case vk::PhysicalDeviceType::eVirtualGpu: return device_kind::virtual_gpu;
    case vk::PhysicalDeviceType::eCpu: return device_kind::cpu;
    default: return device_kind::other;
  }
}

int compute_family(const vk::raii::PhysicalDevice& pd) {
  const auto fams = pd.getQueueFamilyProperties();
  for (uint32_t i = 0; i < fams.size(); ++i)
    if (fams[i].queueFlags & vk::QueueFlagBits::eCompute) return int(i);
  return -1;
}

/// A family with transfers but neither compute nor graphics: one with nothing else (but sparse binding) first —
/// a video family may list transfers too.
int transfer_only_family(const vk::raii::PhysicalDevice& pd) {
  using Q = vk::QueueFlagBits;
  const auto fams = pd.getQueueFamilyProperties();
  int pick = -1;
  for (uint32_t i = 0; i < fams.size(); ++i) {
    const vk::QueueFlags f = fams[i].queueFlags;
    if (!(f & Q::eTransfer) || (f & (Q::eCompute | Q::eGraphics)) || fams[i].queueCount == 0) continue;
    if (!(f & ~vk::QueueFlags(Q::eTransfer | Q::eSparseBinding))) return int(i);
    if (pick < 0) pick = int(i);
  }
  return pick;
}

bool has_extension(const vk::raii::PhysicalDevice& pd, const char* name) {
  for (const auto& e : pd.enumerateDeviceExtensionProperties())
    if (std::string(e.extensionName.data()) == name) return true;
  return false;
}

/// VK_NV_cooperative_matrix present, its feature on, and the subgroup-scope M×N×K shape of A·B (component type
/// ab) + C → D (cd) listed.
bool coop_matrix_shape(const vk::raii::PhysicalDevice& pd, uint32_t M, uint32_t N, uint32_t K, vk::ComponentTypeNV ab,
                       vk::ComponentTypeNV cd) {
  if (!has_extension(pd, VK_NV_COOPERATIVE_MATRIX_EXTENSION_NAME)) return false;
  vk::PhysicalDeviceFeatures2 f2;
  vk::PhysicalDeviceCooperativeMatrixFeaturesNV cm;
  f2.pNext = &cm;
  pd.getDispatcher()->vkGetPhysicalDeviceFeatures2(*pd, reinterpret_cast<VkPhysicalDeviceFeatures2*>(&f2));
  if (!cm.cooperativeMatrix) return false;
  for (const vk::CooperativeMatrixPropertiesNV& p : pd.getCooperativeMatrixPropertiesNV())
    if (p.MSize == M && p.NSize == N && p.KSize == K && p.AType == ab && p.BType == ab && p.CType == cd &&
        p.DType == cd && p.scope == vk::ScopeNV::eSubgroup)
      return true;
  return false;
}
/// The shape gemm.comp uses: M = N = K = 16, A and B f16, C and D f32.
bool coop_matrix_16x16x16(const vk::raii::PhysicalDevice& pd) {
  return coop_matrix_shape(pd, 16, 16, 16, vk::ComponentTypeNV::eFloat16, vk::ComponentTypeNV::eFloat32);
}

std::string component_name(vk::ComponentTypeNV t) {
  switch (t) {
    case vk::ComponentTypeNV::eFloat16: return "f16";
    case vk::ComponentTypeNV::eFloat32: return "f32";
    case vk::ComponentTypeNV::eFloat64: return "f64";
    case vk::ComponentTypeNV::eSint8: return "s8";
    case vk::ComponentTypeNV::eSint16: return "s16";
    case vk::ComponentTypeNV::eSint32: return "s32";
    case vk::ComponentTypeNV::eSint64: return "s64";
    case vk::ComponentTypeNV::eUint8: return "u8";
    case vk::ComponentTypeNV::eUint16: return "u16";
    case vk::ComponentTypeNV::eUint32: return "u32";
    case vk::ComponentTypeNV::eUint64: return "u64";
    default: return "t" + std::to_string(int(t));
  }
}

/// VK_NV_cooperative_matrix's subgroup-scope shapes, "MxNxK A·B+C→D" comma separated (device_info::coop_shapes).
std::string coop_matrix_shapes(const vk::raii::PhysicalDevice& pd) {
  if (!has_extension(pd, VK_NV_COOPERATIVE_MATRIX_EXTENSION_NAME)) return {};
  std::string out;
  for (const vk::CooperativeMatrixPropertiesNV& p : pd.getCooperativeMatrixPropertiesNV()) {
    if (p.scope != vk::ScopeNV::eSubgroup) continue;
    if (!out.empty()) out += ", ";
    out += std::to_string(p.MSize) + "x" + std::to_string(p.NSize) + "x" + std::to_string(p.KSize) + " " +
           component_name(p.AType) + "·" + component_name(p.BType) + "+" + component_name(p.CType) + "→" +
           component_name(p.DType);
  }
  return out;
}

device_info query_info(const vk::raii::PhysicalDevice& pd, uint32_t index) {
  device_info in;
  in.index = index;
  const vk::PhysicalDeviceProperties p = pd.getProperties();
  in.name = p.deviceName.data();
  in.kind = kind_of(p.deviceType);
  in.api_version = p.apiVersion;
  in.vendor_id = p.vendorID;
  in.device_id = p.deviceID;
  in.driver_version = p.driverVersion;
  std::copy(p.pipelineCacheUUID.begin(), p.pipelineCacheUUID.end(), in.pipeline_cache_uuid);
  in.max_allocation = 1ull << 30;  // Vulkan 1.1 guarantees at least 1 GiB
  in.max_storage_range = p.limits.maxStorageBufferRange;
  in.min_storage_align = p.limits.minStorageBufferOffsetAlignment;
  in.max_shared_memory = p.limits.maxComputeSharedMemorySize;
  in.max_workgroup_invocations = p.limits.maxComputeWorkGroupInvocations;
  in.max_storage_buffers = p.limits.maxPerStageDescriptorStorageBuffers;
  in.max_groups_x = p.limits.maxComputeWorkGroupCount[0];
  in.max_groups_y = p.limits.maxComputeWorkGroupCount[1];
  in.timestamp_period_ns = p.limits.timestampPeriod;
  const bool v12 = p.apiVersion >= VK_API_VERSION_1_2, v13 = p.apiVersion >= VK_API_VERSION_1_3;
  const int fam = compute_family(pd);
  if (fam >= 0) in.timestamps = pd.getQueueFamilyProperties()[size_t(fam)].timestampValidBits > 0;
  if (v12) {
    vk::PhysicalDeviceProperties2 p2;
    vk::PhysicalDeviceVulkan11Properties p11;
    vk::PhysicalDeviceVulkan12Properties p12;
    vk::PhysicalDeviceVulkan13Properties p13;
    vk::PhysicalDeviceMaintenance3Properties m3;
    p2.pNext = &p11;
    p11.pNext = &p12;
    p12.pNext = &m3;
    m3.pNext = v13 ? &p13 : nullptr;
    pd.getDispatcher()->vkGetPhysicalDeviceProperties2(*pd, reinterpret_cast<VkPhysicalDeviceProperties2*>(&p2));
    in.driver_name = p12.driverName.data();
    in.driver_info = p12.driverInfo.data();
    in.subgroup_size = p11.subgroupSize;
    in.min_subgroup_size = in.max_subgroup_size = p11.subgroupSize;
    const bool in_compute = bool(p11.subgroupSupportedStages & vk::ShaderStageFlagBits::eCompute);
    in.subgroup_arithmetic = in_compute && bool(p11.subgroupSupportedOperations & vk::SubgroupFeatureFlagBits::eArithmetic);
    in.subgroup_shuffle = in_compute && bool(p11.subgroupSupportedOperations & vk::SubgroupFeatureFlagBits::eShuffle);
    in.max_allocation = m3.maxMemoryAllocationSize;
    feature_chain f;
    f.link(v13);
    pd.getDispatcher()->vkGetPhysicalDeviceFeatures2(*pd, reinterpret_cast<VkPhysicalDeviceFeatures2*>(&f.f2));
    in.storage8 = f.f12.storageBuffer8BitAccess && f.f12.shaderInt8;
    in.storage16 = f.f11.storageBuffer16BitAccess && f.f2.features.shaderInt16;
    in.float64 = in.float64_ops = f.f2.features.shaderFloat64;
    in.int64 = f.f2.features.shaderInt64;
    if (v13 && f.f13.subgroupSizeControl && f.f13.computeFullSubgroups &&
        (p13.requiredSubgroupSizeStages & vk::ShaderStageFlagBits::eCompute)) {
      in.subgroup_size_control = true;
      in.min_subgroup_size = p13.minSubgroupSize;
      in.max_subgroup_size = p13.maxSubgroupSize;
    }
    if (v13) in.max_buffer_size = p13.maxBufferSize;
    if (v13 && f.f13.shaderIntegerDotProduct) {
      in.int_dot = true;
      in.int_dot_fast = p13.integerDotProduct4x8BitPackedMixedSignednessAccelerated;
    }
    in.float16 = f.f12.shaderFloat16;
    in.timeline = f.f12.timelineSemaphore;
    in.transfer_family = transfer_only_family(pd);
    // a transfer queue cannot reset a query pool: the host does (hostQueryReset)
    in.transfer_timestamps = in.transfer_family >= 0 && f.f12.hostQueryReset &&
                             pd.getQueueFamilyProperties()[size_t(in.transfer_family)].timestampValidBits > 0;
    in.coop_matrix = in.float16 && coop_matrix_16x16x16(pd);
    in.coop_i8 = in.coop_matrix && in.storage8 &&
                 coop_matrix_shape(pd, 16, 16, 32, vk::ComponentTypeNV::eSint8, vk::ComponentTypeNV::eSint32);
    in.coop_shapes = coop_matrix_shapes(pd);
    if (has_extension(pd, VK_EXT_EXTERNAL_MEMORY_HOST_EXTENSION_NAME)) {
      vk::PhysicalDeviceExternalMemoryHostPropertiesEXT hp;
      vk::PhysicalDeviceProperties2 hp2;
      hp2.pNext = &hp;
      pd.getDispatcher()->vkGetPhysicalDeviceProperties2(*pd, reinterpret_cast<VkPhysicalDeviceProperties2*>(&hp2));
      in.host_import_align = hp.minImportedHostPointerAlignment;
      in.host_import = in.host_import_align > 0 && (in.host_import_align & (in.host_import_align - 1)) == 0;
    }
  }
  if (in.max_buffer_size == 0) in.max_buffer_size = in.max_allocation;
  const vk::PhysicalDeviceMemoryProperties mp = pd.getMemoryProperties();
  for (uint32_t h = 0; h < mp.memoryHeapCount; ++h)
    if (mp.memoryHeaps[h].flags & vk::MemoryHeapFlagBits::eDeviceLocal)
      in.device_local_bytes = std::max<uint64_t>(in.device_local_bytes, mp.memoryHeaps[h].size);
  return in;
}

vk::raii::Instance make_instance(vk::raii::Context& ctx, bool validation) {
  const char* layer = "VK_LAYER_KHRONOS_validation";
  std::vector<const char*> layers;
  if (validation) {
    bool found = false;
    for (const auto& l : ctx.enumerateInstanceLayerProperties()) found |= std::string(l.layerName.data()) == layer;
    if (!found) throw gpu_error("validation requested but VK_LAYER_KHRONOS_validation is not installed "
                                "(Debian: vulkan-validationlayers)");
    layers.push_back(layer);
  }
  // the layer's messages go to device_impl's messenger (counted: device::validation_errors)
  std::vector<const char*> exts;
  if (validation) exts.push_back(VK_EXT_DEBUG_UTILS_EXTENSION_NAME);
  const vk::ApplicationInfo app("cmfx", 1, "cmfx", 1, VK_API_VERSION_1_3);
  try {
    return vk::raii::Instance(ctx, vk::InstanceCreateInfo({}, &app, layers, exts));
  } catch (const vk::IncompatibleDriverError& e) {
    throw gpu_error(std::string("no Vulkan driver could be loaded (") + e.what() +
                    "): install one, e.g. Debian's mesa-vulkan-drivers for lavapipe, or check the ICD files");
  }
}

int rank(device_kind k) {
  switch (k) {
    case device_kind::discrete: return 0;
    case device_kind::integrated: return 1;
    case device_kind::virtual_gpu: return 2;
    case device_kind::cpu: return 3;
    default: return 4;
  }
}

/// Why a device cannot run cmfx, or "" when it can.
std::string unsuitable(const device_info& in, const vk::raii::PhysicalDevice& pd) {
  if (in.api_version < VK_API_VERSION_1_2)
    return "Vulkan " + std::to_string(VK_API_VERSION_MAJOR(in.api_version)) + "." +
           std::to_string(VK_API_VERSION_MINOR(in.api_version)) + " (cmfx needs 1.2: SPIR-V 1.5 shaders)";
  if (compute_family(pd) < 0) return "no compute queue";
  if (in.max_workgroup_invocations < 256) return "maxComputeWorkGroupInvocations < 256";
  if (in.max_storage_buffers < max_dispatch_bindings)
    return "maxPerStageDescriptorStorageBuffers < " + std::to_string(max_dispatch_bindings);
  if (in.max_shared_memory < 16384) return "maxComputeSharedMemorySize < 16 KiB";
  if (in.subgroup_size == 0 || (in.subgroup_size & (in.subgroup_size - 1)) || in.subgroup_size > 128)
    return "subgroup size " + std::to_string(in.subgroup_size) + " (a power of two <= 128 is needed)";
  return {};
}

VKAPI_ATTR VkBool32 VKAPI_CALL on_validation(VkDebugUtilsMessageSeverityFlagBitsEXT severity,
                                             VkDebugUtilsMessageTypeFlagsEXT, const VkDebugUtilsMessengerCallbackDataEXT* m,
                                             void* user) {
  const bool error = severity & VK_DEBUG_UTILS_MESSAGE_SEVERITY_ERROR_BIT_EXT;
  if (error) static_cast<device_impl*>(user)->validation_errors.fetch_add(1);
  std::fprintf(stderr, "validation %s: %s\n", error ? "error" : "warning", m && m->pMessage ? m->pMessage : "?");
  return VK_FALSE;
}

}  // namespace

device_impl::device_impl(const device_options& o) : opt(o) {
  instance = make_instance(ctx, opt.validation);
  if (opt.validation) {
    using S = vk::DebugUtilsMessageSeverityFlagBitsEXT;
    using T = vk::DebugUtilsMessageTypeFlagBitsEXT;
    messenger = vk::raii::DebugUtilsMessengerEXT(
        instance, vk::DebugUtilsMessengerCreateInfoEXT({}, S::eError | S::eWarning,
                                                       T::eGeneral | T::eValidation | T::ePerformance,
                                                       &on_validation, this));
  }
  vk::raii::PhysicalDevices pds(instance);
  if (pds.empty())
    throw gpu_error("no Vulkan device found: install a driver (for a CPU device, Debian's mesa-vulkan-drivers "
                    "provides lavapipe)");
  std::vector<device_info> infos;
  for (uint32_t i = 0; i < pds.size(); ++i) infos.push_back(query_info(pds[i], i));
  int pick = -1;
  if (opt.index >= 0) {
    if (size_t(opt.index) >= pds.size())
      throw gpu_error("device index " + std::to_string(opt.index) + " out of range: " + std::to_string(pds.size()) +
                      " device(s)");
    const std::string why = unsuitable(infos[size_t(opt.index)], pds[size_t(opt.index)]);
    if (!why.empty()) throw gpu_error("device " + infos[size_t(opt.index)].describe() + " cannot run cmfx: " + why);
    pick = opt.index;
  } else {
    std::string reasons;
    for (uint32_t i = 0; i < pds.size(); ++i) {
      const std::string why = unsuitable(infos[i], pds[i]);
      if (!why.empty()) {
        reasons += "\n  " + infos[i].name + ": " + why;
        continue;
      }
      if (pick < 0 || rank(infos[i].kind) < rank(infos[size_t(pick)].kind)) pick = int(i);
    }
    if (pick < 0) throw gpu_error("no Vulkan device can run cmfx:" + reasons);
  }
  phys = std::move(pds[size_t(pick)]);
  info = infos[size_t(pick)];
  if (!opt.allow_small_storage) info.storage8 = info.storage16 = false;
  if (!opt.float64) info.float64 = false;
  if (!opt.allow_int_dot) info.int_dot = info.int_dot_fast = false;
  if (!opt.allow_subgroup_ops) info.subgroup_arithmetic = info.subgroup_shuffle = false;
  if (!opt.allow_shuffle) info.subgroup_shuffle = false;
  if (!opt.allow_coop_matrix) info.coop_matrix = false;
  if (!info.coop_matrix || !info.storage8) info.coop_i8 = false;
  if (!opt.allow_host_import) info.host_import = false;
  if (opt.max_binding_bytes) info.max_storage_range = std::min(info.max_storage_range, opt.max_binding_bytes);

  // Enable exactly what the shaders may use.
  const bool v13 = info.api_version >= VK_API_VERSION_1_3;
  feature_chain en;
  en.link(v13);
  en.f2.features.shaderFloat64 = info.float64_ops;
  en.f2.features.shaderInt64 = info.int64;  // the device sampler's RNG and fixed-point masses
  en.f2.features.shaderInt16 = info.storage16;
  en.f11.storageBuffer16BitAccess = info.storage16;
  en.f12.storageBuffer8BitAccess = info.storage8;
  en.f12.shaderInt8 = info.storage8;
  en.f13.subgroupSizeControl = info.subgroup_size_control;
  en.f13.computeFullSubgroups = info.subgroup_size_control;
  en.f13.shaderIntegerDotProduct = info.int_dot;
  en.f12.shaderFloat16 = info.float16;
  en.f12.timelineSemaphore = info.timeline;
  info.transfer_queue = opt.transfer_queue && info.timeline && info.transfer_family >= 0;
  en.f12.hostQueryReset = info.transfer_queue && info.transfer_timestamps;
  // without a transfer queue, begin_transfer() records for the compute queue (whose timestamps it then has)
  if (!info.transfer_queue) info.transfer_timestamps = info.timestamps;
  vk::PhysicalDeviceCooperativeMatrixFeaturesNV cm;
  std::vector<const char*> exts;
  if (info.coop_matrix) {
    cm.cooperativeMatrix = VK_TRUE;
    cm.pNext = en.f2.pNext;
    en.f2.pNext = &cm;
    exts.push_back(VK_NV_COOPERATIVE_MATRIX_EXTENSION_NAME);
  }
  if (info.host_import) exts.push_back(VK_EXT_EXTERNAL_MEMORY_HOST_EXTENSION_NAME);
  vk::PhysicalDevicePipelineExecutablePropertiesFeaturesKHR pe;
  exec_stats = opt.pipeline_statistics && has_extension(phys, VK_KHR_PIPELINE_EXECUTABLE_PROPERTIES_EXTENSION_NAME);
  if (exec_stats) {
    pe.pipelineExecutableInfo = VK_TRUE;
    pe.pNext = en.f2.pNext;
    en.f2.pNext = &pe;
    exts.push_back(VK_KHR_PIPELINE_EXECUTABLE_PROPERTIES_EXTENSION_NAME);
  }
  compute.family = uint32_t(compute_family(phys));
  const float prio = 1.0f;
  std::vector<vk::DeviceQueueCreateInfo> qcis{vk::DeviceQueueCreateInfo({}, compute.family, 1, &prio)};
  if (info.transfer_queue) {
    transfer_lane = std::make_unique<lane>();
    transfer_lane->index = 1;
    transfer_lane->family = uint32_t(info.transfer_family);
    transfer_lane->dedicated_transfer = true;
    qcis.emplace_back(vk::DeviceQueueCreateFlags{}, transfer_lane->family, 1, &prio);
  }
  vk::DeviceCreateInfo dci({}, qcis, {}, exts);
  dci.pNext = &en.f2;
  dev = vk::raii::Device(phys, dci);
  for (lane* l : {&compute, transfer_lane.get()}) {
    if (!l) continue;
    l->queue = vk::raii::Queue(dev, l->family, 0);
    l->pool = vk::raii::CommandPool(
        dev, vk::CommandPoolCreateInfo(vk::CommandPoolCreateFlagBits::eResetCommandBuffer, l->family));
    if (info.timeline) {
      vk::SemaphoreTypeCreateInfo ti(vk::SemaphoreType::eTimeline, 0);
      l->timeline = vk::raii::Semaphore(dev, vk::SemaphoreCreateInfo({}, &ti));
    }
  }
  choose_memory_types();
  load_pipeline_cache();
}

device_impl::~device_impl() {
  save_pipeline_cache();
  if (*dev) dev.waitIdle();
}

void commands_impl::ensure_recording() {
  if (recording) return;
  if (ran) throw gpu_error("commands already submitted: call reset() before recording again");
  cb.begin(vk::CommandBufferBeginInfo());  // not one-time: a finished recording may be submitted again
  recording = true;
}

device_impl& owner(commands_impl& c) { return *c.dev; }

void dispatch(commands_impl& c, const pipeline* p, std::span<const binding> b, const void* push, uint32_t push_bytes,
              uint32_t gx, uint32_t gy, uint32_t gz) {
  device_impl& d = *c.dev;
  if (b.size() != p->bindings || push_bytes != p->push_bytes)
    throw gpu_error("dispatch of " + p->name + ": binding or push-constant count mismatch");
  if (gx == 0 || gy == 0 || gz == 0) return;
  if (gx > d.info.max_groups_x || gy > d.info.max_groups_y)
    throw gpu_error("dispatch of " + p->name + ": " + std::to_string(gx) + "x" + std::to_string(gy) +
                    " workgroups exceed the device limit");
  if (c.transfer) throw gpu_error("dispatch of " + p->name + " in a transfer recording (device::begin_transfer)");
  c.ensure_recording();
  if (c.barrier_needed) {
    // The transfer stage is a source only when a transfer was recorded since the last barrier: a decode step's
    // chain of dependent dispatches then waits on the compute stage alone.
    const bool xfer = c.xfer_since_barrier;
    const vk::MemoryBarrier mb(vk::AccessFlagBits::eShaderWrite | (xfer ? vk::AccessFlagBits::eTransferWrite : vk::AccessFlags{}),
                               vk::AccessFlagBits::eShaderRead | vk::AccessFlagBits::eShaderWrite);
    c.cb.pipelineBarrier(vk::PipelineStageFlagBits::eComputeShader |
                             (xfer ? vk::PipelineStageFlagBits::eTransfer : vk::PipelineStageFlags{}),
                         vk::PipelineStageFlagBits::eComputeShader, {}, mb, {}, {});
    c.xfer_since_barrier = false;
  }
  // Descriptor pools grow geometrically (64, 128, 256, then 512 sets each): a short recording (one layer's part of
  // a token with the expert cache) must not pay for creating a pool sized for a whole token (measured on the H200:
  // 44 pools of 512 sets cost ≈ 25 ms per token).
  constexpr uint32_t first_pool_sets = 64, max_pool_sets = 512, max_bindings = max_dispatch_bindings;
  if (b.size() > max_bindings)
    throw gpu_error("dispatch of " + p->name + ": more than " + std::to_string(max_bindings) + " bindings");
  if (c.pools.empty() || c.sets_in_pool == c.pool_sets) {
    const uint32_t want = c.pools.empty() ? first_pool_sets : std::min(max_pool_sets, c.pool_sets * 2);
    // The smallest spare pool of at least that size, else a new one.
    auto best = d.spare_pools.end();
    for (auto it = d.spare_pools.begin(); it != d.spare_pools.end(); ++it)
      if (it->second >= want && (best == d.spare_pools.end() || it->second < best->second)) best = it;
    if (best != d.spare_pools.end()) {
      c.pools.push_back(std::move(*best));
      d.spare_pools.erase(best);
    } else {
      const vk::DescriptorPoolSize ps(vk::DescriptorType::eStorageBuffer, want * max_bindings);
      c.pools.emplace_back(vk::raii::DescriptorPool(d.dev, vk::DescriptorPoolCreateInfo({}, want, ps)), want);
    }
    c.pool_sets = c.pools.back().second;
    c.sets_in_pool = 0;
  }
  const VkDescriptorSetLayout layout = *p->set_layout;
  const VkDescriptorSetAllocateInfo ai{VK_STRUCTURE_TYPE_DESCRIPTOR_SET_ALLOCATE_INFO, nullptr, *c.pools.back().first, 1,
                                       &layout};
  VkDescriptorSet set = VK_NULL_HANDLE;
  const auto* disp = d.dev.getDispatcher();
  if (disp->vkAllocateDescriptorSets(*d.dev, &ai, &set) != VK_SUCCESS) throw gpu_error("descriptor set allocation failed");
  ++c.sets_in_pool;
  VkDescriptorBufferInfo bi[max_bindings];
  VkWriteDescriptorSet w[max_bindings];
  for (uint32_t i = 0; i < b.size(); ++i) {
    if (!b[i].buf || !*b[i].buf) throw gpu_error("dispatch of " + p->name + ": binding " + std::to_string(i) + " empty");
    const block& blk = d.block_of(*b[i].buf);
    bi[i] = VkDescriptorBufferInfo{*blk.buf, d.offset_of(*b[i].buf) + b[i].offset, b[i].range};
    w[i] = VkWriteDescriptorSet{VK_STRUCTURE_TYPE_WRITE_DESCRIPTOR_SET, nullptr, set, i, 0, 1,
                                VK_DESCRIPTOR_TYPE_STORAGE_BUFFER, nullptr, &bi[i], nullptr};
  }
  disp->vkUpdateDescriptorSets(*d.dev, uint32_t(b.size()), w, 0, nullptr);
  c.cb.bindPipeline(vk::PipelineBindPoint::eCompute, *p->pipe);
  c.cb.bindDescriptorSets(vk::PipelineBindPoint::eCompute, *p->layout, 0, vk::DescriptorSet(set), {});
  if (push_bytes)
    c.cb.pushConstants<uint8_t>(*p->layout, vk::ShaderStageFlagBits::eCompute, 0,
                                vk::ArrayProxy<const uint8_t>(push_bytes, static_cast<const uint8_t*>(push)));
  c.cb.dispatch(gx, gy, gz);
  ++c.dispatches;
  c.barrier_needed = !c.concurrent;
  c.work_since_xfer = true;
}

}  // namespace detail

// ------------------------------------------------------------------ public classes

using detail::guarded;

namespace {
/// The stages a recording's work runs in: a transfer recording's (begin_transfer) may go to a transfer-only queue,
/// which has no compute stage.
vk::PipelineStageFlags work_stages(const detail::commands_impl& c) {
  using S = vk::PipelineStageFlagBits;
  return c.transfer ? vk::PipelineStageFlags(S::eTransfer) : S::eComputeShader | S::eTransfer;
}
}  // namespace

std::vector<device_info> list_devices() {
  return guarded("list_devices", [] {
    std::unique_ptr<vk::raii::Context> ctx;
    try {
      ctx = std::make_unique<vk::raii::Context>();
    } catch (const std::exception& e) {
      throw gpu_error(std::string("cannot load the Vulkan loader (libvulkan.so.1): ") + e.what());
    }
    vk::raii::Instance inst = detail::make_instance(*ctx, false);
    vk::raii::PhysicalDevices pds(inst);
    std::vector<device_info> out;
    for (uint32_t i = 0; i < pds.size(); ++i) out.push_back(detail::query_info(pds[i], i));
    return out;
  });
}

device::device(const device_options& o) {
  guarded("Vulkan device", [&] {
    try {
      p_ = std::make_unique<detail::device_impl>(o);
    } catch (const vk::SystemError&) {
      throw;
    } catch (const gpu_error&) {
      throw;
    } catch (const std::runtime_error& e) {  // vk::raii::Context: the loader could not be opened
      throw gpu_error(std::string("cannot initialise Vulkan: ") + e.what());
    }
  });
}
device::~device() = default;
const device_info& device::info() const noexcept { return p_->info; }
const device_options& device::options() const noexcept { return p_->opt; }

std::vector<std::string> device::pipeline_statistics() const {
  std::vector<std::string> out;
  for (const auto& [key, p] : p_->pipelines)
    if (!p->stats.empty()) out.push_back(p->name + ": " + p->stats);
  return out;
}
void device::save_pipeline_cache() { p_->save_pipeline_cache(); }

commands::commands(std::unique_ptr<detail::commands_impl> p) : p_(std::move(p)) {}
commands::commands(commands&&) noexcept = default;
commands& commands::operator=(commands&&) noexcept = default;
detail::commands_impl::~commands_impl() {
  if (!dev || !*cb) return;
  if (pending) {  // every way of destroying a recording waits for it first (~commands does; a move-assignment not)
    try {
      if (dev->dev.waitForFences({*fence}, VK_TRUE, UINT64_MAX) != vk::Result::eSuccess) return;
    } catch (...) {
      return;  // not known to be finished: neither its pools nor its command buffer may be reused
    }
    pending = false;
    ran = true;
  }
  recycle_pools();
  try {
    cb.reset();
    if (ran) dev->dev.resetFences({*fence});
    on->spare_cmds.emplace_back(std::move(cb), std::move(fence));
    if (*queries) dev->spare_queries.push_back(std::move(queries));
  } catch (...) {
  }
}

void detail::commands_impl::recycle_pools() noexcept {
  if (!dev) return;
  try {
    for (auto& [pool, sets] : pools) {
      pool.reset();
      dev->spare_pools.emplace_back(std::move(pool), sets);
    }
  } catch (...) {
  }
  pools.clear();
}

commands::~commands() {
  if (p_ && p_->pending) {  // never free a command buffer the device may still run
    try {
      if (p_->dev->dev.waitForFences({*p_->fence}, VK_TRUE, UINT64_MAX) == vk::Result::eSuccess) {
        p_->pending = false;  // finished: its command buffer and fence may be recycled
        p_->ran = true;
      }
    } catch (...) {
    }
  }
}
uint32_t commands::dispatch_count() const noexcept { return p_->dispatches; }
void commands::begin_concurrent() { p_->concurrent = true; }
bool commands::in_concurrent() const noexcept { return p_->concurrent; }
void commands::end_concurrent() {
  p_->concurrent = false;
  if (p_->dispatches > 0) p_->barrier_needed = true;
}

namespace {
/// The buffer and absolute offset of [v.offset + 0, + bytes), checked.
std::pair<vk::Buffer, uint64_t> xfer_range(detail::commands_impl& c, const view& v, uint64_t bytes, const char* op) {
  if (!v || !*v.buf) throw usage_error(std::string(op) + ": no destination/source view");
  if (bytes > v.bytes)
    throw usage_error(std::string(op) + ": " + std::to_string(bytes) + " bytes exceed the view's " +
                      std::to_string(v.bytes));
  const detail::block& blk = c.dev->block_of(*v.buf);
  return {*blk.buf, c.dev->offset_of(*v.buf) + v.offset};
}
/// Every transfer waits for the dispatches and transfers before it; the next dispatch waits for it.
void before_xfer(detail::commands_impl& c) {
  c.ensure_recording();
  if (c.work_since_xfer || c.dispatches) {
    const vk::MemoryBarrier mb(vk::AccessFlagBits::eShaderWrite | vk::AccessFlagBits::eShaderRead |
                                   vk::AccessFlagBits::eTransferWrite,
                               vk::AccessFlagBits::eTransferWrite | vk::AccessFlagBits::eTransferRead);
    c.cb.pipelineBarrier(vk::PipelineStageFlagBits::eComputeShader | vk::PipelineStageFlagBits::eTransfer,
                         vk::PipelineStageFlagBits::eTransfer, {}, mb, {}, {});
    c.work_since_xfer = false;
  }
}
void after_xfer(detail::commands_impl& c) { c.barrier_needed = c.xfer_since_barrier = true; }
}  // namespace

void commands::update(const view& dst, const void* data, uint64_t bytes) {
  if (bytes == 0) return;
  if (bytes % 4 || bytes > update_max || dst.offset % 4)
    throw usage_error("commands::update: " + std::to_string(bytes) +
                      " bytes (must be a multiple of 4, at most 65536, at a 4-byte aligned offset)");
  guarded("update", [&] {
    auto [b, off] = xfer_range(*p_, dst, bytes, "commands::update");
    before_xfer(*p_);
    p_->cb.updateBuffer(b, off, vk::ArrayProxy<const uint8_t>(uint32_t(bytes), static_cast<const uint8_t*>(data)));
    after_xfer(*p_);
  });
}

void commands::copy(const view& src, const view& dst, uint64_t bytes) {
  if (bytes == 0) return;
  guarded("copy", [&] {
    auto [sb, so] = xfer_range(*p_, src, bytes, "commands::copy");
    auto [db, dof] = xfer_range(*p_, dst, bytes, "commands::copy");
    before_xfer(*p_);
    p_->cb.copyBuffer(sb, db, vk::BufferCopy(so, dof, bytes));
    after_xfer(*p_);
  });
}

void commands::fill(const view& dst, uint64_t bytes, uint32_t word) {
  if (bytes == 0) return;
  if (bytes % 4 || dst.offset % 4) throw usage_error("commands::fill: size and offset must be multiples of 4");
  guarded("fill", [&] {
    auto [b, off] = xfer_range(*p_, dst, bytes, "commands::fill");
    before_xfer(*p_);
    p_->cb.fillBuffer(b, off, bytes, word);
    after_xfer(*p_);
  });
}

void commands::barrier() {
  guarded("barrier", [&] {
    p_->ensure_recording();
    using A = vk::AccessFlagBits;
    const vk::AccessFlags xa = A::eTransferWrite | A::eTransferRead;
    const vk::AccessFlags a = p_->transfer ? xa : xa | A::eShaderWrite | A::eShaderRead;
    const vk::PipelineStageFlags st = work_stages(*p_);
    p_->cb.pipelineBarrier(st, st, {}, vk::MemoryBarrier(a, a), {}, {});
    p_->work_since_xfer = false;
    p_->barrier_needed = p_->xfer_since_barrier = false;
  });
}

commands device::begin() {
  return guarded("begin", [&] { return commands(detail::new_recording(*p_, p_->compute, false)); });
}

uint32_t commands::timestamp() {
  detail::commands_impl& c = *p_;
  if (!(c.transfer ? c.dev->info.transfer_timestamps : c.dev->info.timestamps))
    throw gpu_error(std::string("timestamps are not supported on the ") + (c.transfer ? "transfer" : "compute") +
                    " queue of this device");
  return guarded("timestamp", [&] {
    c.ensure_recording();
    if (!*c.queries) {
      c.query_capacity = detail::device_impl::query_pool_size;
      if (!c.dev->spare_queries.empty()) {  // a destroyed recording's pool (reset below, in this recording)
        c.queries = std::move(c.dev->spare_queries.back());
        c.dev->spare_queries.pop_back();
      } else {
        c.queries = vk::raii::QueryPool(c.dev->dev,
                                        vk::QueryPoolCreateInfo({}, vk::QueryType::eTimestamp, c.query_capacity));
      }
    }
    if (!c.queries_reset) {
      if (c.on->dedicated_transfer)
        c.queries.reset(0, c.query_capacity);  // on the host (a transfer queue cannot; unused: new or spare)
      else
        c.cb.resetQueryPool(*c.queries, 0, c.query_capacity);
      c.queries_reset = true;
    }
    if (c.query_count == c.query_capacity) throw gpu_error("more than 1024 timestamps in one recording");
    c.cb.writeTimestamp(vk::PipelineStageFlagBits::eBottomOfPipe, *c.queries, c.query_count);
    return c.query_count++;
  });
}

double commands::seconds(uint32_t from, uint32_t to) const {
  const detail::commands_impl& c = *p_;
  if (!c.ran || from >= c.stamps.size() || to >= c.stamps.size()) throw gpu_error("timestamp not available");
  return double(c.stamps[to] - c.stamps[from]) * c.dev->info.timestamp_period_ns * 1e-9;
}

void commands::reset() {
  detail::commands_impl& c = *p_;
  if (c.pending) throw gpu_error("commands::reset: the recording is still running (device::wait first)");
  guarded("reset", [&] {
    if (c.recording) c.cb.end();
    c.cb.reset();
    if (c.ran) c.dev->dev.resetFences({*c.fence});
    c.recycle_pools();  // the next dispatch starts from a (small) spare pool
    c.sets_in_pool = 0;
    c.query_count = 0;
    c.queries_reset = false;
    c.stamps.clear();
    c.dispatches = 0;
    c.waits.clear();
    c.signalled = 0;
    c.recording = c.ran = false;
    c.concurrent = c.barrier_needed = c.work_since_xfer = c.xfer_since_barrier = false;
  });
}

void device::submit(commands& cmds) {
  submit_async(cmds);
  wait(cmds);
}

void device::submit_async(commands& cmds) {
  detail::commands_impl& c = cmds.impl();
  guarded("submit", [&] {
    if (c.pending) throw gpu_error("submit: the recording is still running (wait for it first)");
    if (c.ran) {  // the same recording once more (its timestamps are reset inside it, or here on the host)
      p_->dev.resetFences({*c.fence});
      if (c.on->dedicated_transfer && c.query_count) c.queries.reset(0, c.query_capacity);
    } else {
      c.ensure_recording();
      // Device writes visible to the host after the fence wait (downloads, mapped read-back buffers).
      using S = vk::PipelineStageFlagBits;
      const vk::AccessFlags src = c.transfer ? vk::AccessFlags(vk::AccessFlagBits::eTransferWrite)
                                             : vk::AccessFlagBits::eShaderWrite | vk::AccessFlagBits::eTransferWrite;
      const vk::MemoryBarrier hb(src, vk::AccessFlagBits::eHostRead);
      c.cb.pipelineBarrier(work_stages(c), S::eHost, {}, hb, {}, {});
      c.cb.end();
      c.recording = false;
    }
    detail::submit_to_lane(*p_, c);
    c.pending = true;
  });
}

bool device::ready(commands& cmds) {
  detail::commands_impl& c = cmds.impl();
  if (!c.pending) return true;
  bool done = false;
  guarded("ready", [&] {
    const vk::Result r = c.fence.getStatus();
    if (r != vk::Result::eSuccess && r != vk::Result::eNotReady) throw gpu_error("fence status failed");
    done = r == vk::Result::eSuccess;
  });
  return done;
}

void device::wait(commands& cmds) {
  detail::commands_impl& c = cmds.impl();
  if (!c.pending) return;
  guarded("wait", [&] {
    if (p_->dev.waitForFences({*c.fence}, VK_TRUE, UINT64_MAX) != vk::Result::eSuccess)
      throw gpu_error("fence wait failed");
    c.pending = false;
    c.ran = true;
    c.stamps.clear();
    if (c.query_count) {
      auto [res, v] = c.queries.getResults<uint64_t>(0, c.query_count, sizeof(uint64_t) * c.query_count,
                                                     sizeof(uint64_t),
                                                     vk::QueryResultFlagBits::e64 | vk::QueryResultFlagBits::eWait);
      if (res != vk::Result::eSuccess) throw gpu_error("timestamp query results not available");
      c.stamps = std::move(v);
    }
  });
}

}  // namespace cmfx::gpu
