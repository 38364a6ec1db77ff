// A diagnostic outside the cmfx build (docs/VULKAN.md "What the H200's driver offers beyond what cmfx uses"): lists
// device 0's extensions of interest, its cooperative-vector type combinations (VK_NV_cooperative_vector) and queue
// families, times 256 MiB host -> device copies on the compute queue, on a transfer-only queue and on both, and —
// where VK_EXT_shader_float8 is exposed — checks an OpFConvert of every E4M3 byte (f8.comp, through glslang 11's
// spirv_type) against the decode; then imitates the expert cache's pack-and-copy pattern. The structures newer than
// Debian 12's Vulkan headers are declared here.
// Build and run (the probe reads f8_spv.h from the build directory):
//   glslangValidator -V --target-env vulkan1.3 scripts/vk_probe/f8.comp -o /tmp/f8.spv
//   (cd /tmp && xxd -i f8.spv > f8_spv.h) && g++ -O1 -std=c++20 -I/tmp scripts/vk_probe/vk_probe.cpp -o /tmp/vk_probe
//   -lvulkan /tmp/vk_probe
#include <vulkan/vulkan.h>

#include <barrier>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <functional>
#include <string>
#include <thread>
#include <vector>

#include "f8_spv.h"
#define CK(x)                                     \
  do {                                            \
    VkResult r_ = (x);                            \
    if (r_ != VK_SUCCESS) {                       \
      std::printf("FAIL %s = %d\n", #x, int(r_)); \
      return 1;                                   \
    }                                             \
  } while (0)
struct F8Feat {
  VkStructureType sType;
  void* pNext;
  VkBool32 shaderFloat8;
  VkBool32 shaderFloat8CooperativeMatrix;
};
static float e4m3(unsigned b) {
  unsigned s = b >> 7, e = (b >> 3) & 15, m = b & 7;
  if (e == 15 && m == 7) return NAN;
  float v = e == 0 ? std::ldexp(float(m), -9) : std::ldexp(1.0f + m / 8.0f, int(e) - 7);
  return s ? -v : v;
}

struct CVProps {
  VkStructureType sType;
  void* pNext;
  int inputType, inputInterpretation, matrixInterpretation, biasInterpretation, resultType;
  VkBool32 transpose;
};
typedef VkResult (*PFN_cv)(VkPhysicalDevice, uint32_t*, CVProps*);
static const char* ct(int v) {
  switch (v) {
    case 0:
      return "f16";
    case 1:
      return "f32";
    case 2:
      return "f64";
    case 3:
      return "s8";
    case 4:
      return "s16";
    case 5:
      return "s32";
    case 7:
      return "u8";
    case 8:
      return "u16";
    case 9:
      return "u32";
    case 1000141000:
      return "bf16";
    case 1000491000:
      return "s8packed";
    case 1000491001:
      return "u8packed";
    case 1000491002:
      return "e4m3";
    case 1000491003:
      return "e5m2";
    default:
      return "?";
  }
}
static void coopvec(VkInstance inst, VkPhysicalDevice pd) {
  auto f = reinterpret_cast<PFN_cv>(vkGetInstanceProcAddr(inst, "vkGetPhysicalDeviceCooperativeVectorPropertiesNV"));
  if (!f) {
    std::printf("no vkGetPhysicalDeviceCooperativeVectorPropertiesNV\n");
    return;
  }
  uint32_t n = 0;
  f(pd, &n, nullptr);
  std::vector<CVProps> v(n, CVProps{VkStructureType(1000491002), nullptr});
  f(pd, &n, v.data());
  for (auto& p : v)
    std::printf("  coopvec input %s as %s, matrix %s, bias %s, result %s%s\n", ct(p.inputType),
                ct(p.inputInterpretation), ct(p.matrixInterpretation), ct(p.biasInterpretation), ct(p.resultType),
                p.transpose ? ", transpose" : "");
  struct {
    VkStructureType sType;
    void* pNext;
    VkShaderStageFlags st;
    VkBool32 a, b;
    uint32_t maxc;
  } cp{VkStructureType(1000491001), nullptr};
  VkPhysicalDeviceProperties2 p2{VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_PROPERTIES_2, &cp};
  vkGetPhysicalDeviceProperties2(pd, &p2);
  std::printf("  coopvec stages 0x%x, max components %u\n", cp.st, cp.maxc);
}

// The first memory type among `bits` with every flag of `want` and none of `avoid` (memoryTypeCount: none).
static uint32_t memory_type(const VkPhysicalDeviceMemoryProperties& mp, uint32_t bits, VkMemoryPropertyFlags want,
                            VkMemoryPropertyFlags avoid) {
  uint32_t t = 0;
  for (; t < mp.memoryTypeCount; ++t)
    if ((bits >> t & 1) && (mp.memoryTypes[t].propertyFlags & want) == want &&
        !(mp.memoryTypes[t].propertyFlags & avoid))
      break;
  return t;
}
// The expert cache's pattern (driver/model/gpu_expert_cache.cpp fill): per expert, host threads copy its bytes from
// the weights into a write-combined ring, then one submission copies them to device memory while the host packs the
// next. Timed against its two halves alone: pack everything, then copy everything.
static void cache_pattern(VkDevice dev, VkPhysicalDeviceMemoryProperties& mp, uint32_t fam, VkQueue q) {
  const uint64_t EX = 9600ull << 10, N = 24, RING = EX * N;
  auto mk = [&](VkDeviceSize sz, VkMemoryPropertyFlags want, VkMemoryPropertyFlags avoid, VkBuffer& b,
                VkDeviceMemory& m) {
    VkBufferCreateInfo bi{VK_STRUCTURE_TYPE_BUFFER_CREATE_INFO, nullptr, 0, sz,
                          VK_BUFFER_USAGE_TRANSFER_SRC_BIT | VK_BUFFER_USAGE_TRANSFER_DST_BIT};
    if (vkCreateBuffer(dev, &bi, nullptr, &b)) return false;
    VkMemoryRequirements r;
    vkGetBufferMemoryRequirements(dev, b, &r);
    const uint32_t t = memory_type(mp, r.memoryTypeBits, want, avoid);
    if (t == mp.memoryTypeCount) return false;
    VkMemoryAllocateInfo ma{VK_STRUCTURE_TYPE_MEMORY_ALLOCATE_INFO, nullptr, r.size, t};
    return !vkAllocateMemory(dev, &ma, nullptr, &m) && !vkBindBufferMemory(dev, b, m, 0);
  };
  VkBuffer ring, slots;
  VkDeviceMemory mr, ms;
  if (!mk(RING, VK_MEMORY_PROPERTY_HOST_VISIBLE_BIT | VK_MEMORY_PROPERTY_HOST_COHERENT_BIT,
          VK_MEMORY_PROPERTY_HOST_CACHED_BIT | VK_MEMORY_PROPERTY_DEVICE_LOCAL_BIT, ring, mr) ||
      !mk(RING, VK_MEMORY_PROPERTY_DEVICE_LOCAL_BIT, VK_MEMORY_PROPERTY_HOST_VISIBLE_BIT, slots, ms)) {
    std::printf("  cache pattern: no memory\n");
    return;
  }
  void* pr;
  vkMapMemory(dev, mr, 0, RING, 0, &pr);
  uint8_t* ringp = static_cast<uint8_t*>(pr);
  std::vector<uint8_t> weights(4 * RING);  // 4x the ring: every expert from memory not recently touched
  for (uint64_t i = 0; i < weights.size(); i += 4096) weights[i] = uint8_t(i >> 12);
  const unsigned T = 16;
  // expert i of a round from weights into ring slot i by T threads (one slice each), then on_done(i) on thread 0
  auto pack_all = [&](uint64_t round, const std::function<void(uint64_t)>& on_done) {
    std::barrier sync(T);
    std::vector<std::thread> th;
    for (unsigned t = 0; t < T; ++t)
      th.emplace_back([&, t] {
        for (uint64_t i = 0; i < N; ++i) {
          const uint8_t* from = weights.data() + ((round * N + i) % (4 * N)) * EX;
          const uint64_t a = EX * t / T, b = EX * (t + 1) / T;
          std::memcpy(ringp + i * EX + a, from + a, b - a);
          sync.arrive_and_wait();
          if (t == 0) on_done(i);
        }
      });
    for (auto& x : th) x.join();
  };
  VkCommandPoolCreateInfo ci{VK_STRUCTURE_TYPE_COMMAND_POOL_CREATE_INFO, nullptr,
                             VK_COMMAND_POOL_CREATE_RESET_COMMAND_BUFFER_BIT, fam};
  VkCommandPool pool;
  vkCreateCommandPool(dev, &ci, nullptr, &pool);
  std::vector<VkCommandBuffer> cbs(N + 1);
  VkCommandBufferAllocateInfo ai{VK_STRUCTURE_TYPE_COMMAND_BUFFER_ALLOCATE_INFO, nullptr, pool,
                                 VK_COMMAND_BUFFER_LEVEL_PRIMARY, uint32_t(N + 1)};
  vkAllocateCommandBuffers(dev, &ai, cbs.data());
  VkFenceCreateInfo fi{VK_STRUCTURE_TYPE_FENCE_CREATE_INFO};
  VkFence f;
  vkCreateFence(dev, &fi, nullptr, &f);
  auto rec = [&](VkCommandBuffer cb, uint64_t i0, uint64_t i1) {
    vkResetCommandBuffer(cb, 0);
    VkCommandBufferBeginInfo bb{VK_STRUCTURE_TYPE_COMMAND_BUFFER_BEGIN_INFO};
    vkBeginCommandBuffer(cb, &bb);
    for (uint64_t i = i0; i < i1; ++i)  // three pieces per expert, as gate / up / down
      for (uint64_t p = 0; p < 3; ++p) {
        VkBufferCopy r{i * EX + p * EX / 3, i * EX + p * EX / 3, EX / 3};
        vkCmdCopyBuffer(cb, ring, slots, 1, &r);
      }
    vkEndCommandBuffer(cb);
  };
  auto submit = [&](VkCommandBuffer cb, VkFence fence) {
    VkSubmitInfo si{VK_STRUCTURE_TYPE_SUBMIT_INFO, nullptr, 0, nullptr, nullptr, 1, &cb};
    vkQueueSubmit(q, 1, &si, fence);
  };
  auto now = [] { return std::chrono::steady_clock::now(); };
  auto sec = [](auto a, auto b) { return std::chrono::duration<double>(b - a).count(); };
  double best_pipe = 1e9, best_pack = 1e9, best_copy = 1e9;
  for (uint64_t round = 0; round < 4; ++round) {
    for (uint64_t i = 0; i < N; ++i) rec(cbs[i], i, i + 1);
    auto t0 = now();
    pack_all(round, [&](uint64_t i) { submit(cbs[i], i + 1 == N ? f : VK_NULL_HANDLE); });
    vkWaitForFences(dev, 1, &f, VK_TRUE, ~0ull);
    vkResetFences(dev, 1, &f);
    best_pipe = std::min(best_pipe, sec(t0, now()));
    t0 = now();
    pack_all(round + 1, [](uint64_t) {});
    best_pack = std::min(best_pack, sec(t0, now()));
    rec(cbs[N], 0, N);
    t0 = now();
    submit(cbs[N], f);
    vkWaitForFences(dev, 1, &f, VK_TRUE, ~0ull);
    vkResetFences(dev, 1, &f);
    best_copy = std::min(best_copy, sec(t0, now()));
  }
  const double mb = double(N * EX) / 1e6;
  std::printf(
      "  cache pattern, %llu experts of 9.6 MB: pack + copy pipelined %.2f ms (%.1f GB/s); pack alone %.2f ms (%.1f "
      "GB/s, %u threads); copy alone %.2f ms (%.1f GB/s)\n",
      (unsigned long long)N, best_pipe * 1e3, mb / best_pipe / 1e3, best_pack * 1e3, mb / best_pack / 1e3, T,
      best_copy * 1e3, mb / best_copy / 1e3);
}
static void copy_probe(VkInstance, VkPhysicalDevice pd) {
  uint32_t nq = 0;
  vkGetPhysicalDeviceQueueFamilyProperties(pd, &nq, nullptr);
  std::vector<VkQueueFamilyProperties> qf(nq);
  vkGetPhysicalDeviceQueueFamilyProperties(pd, &nq, qf.data());
  int comp = -1, xfer = -1;
  for (uint32_t i = 0; i < nq; ++i) {
    std::printf("  queue family %u flags 0x%x count %u\n", i, qf[i].queueFlags, qf[i].queueCount);
    if (comp < 0 && (qf[i].queueFlags & VK_QUEUE_COMPUTE_BIT)) comp = int(i);
    if (xfer < 0 && (qf[i].queueFlags & VK_QUEUE_TRANSFER_BIT) &&
        !(qf[i].queueFlags & (VK_QUEUE_COMPUTE_BIT | VK_QUEUE_GRAPHICS_BIT)))
      xfer = int(i);
  }
  float prio[2] = {1, 1};
  VkDeviceQueueCreateInfo qci[2] = {{VK_STRUCTURE_TYPE_DEVICE_QUEUE_CREATE_INFO, nullptr, 0, uint32_t(comp), 1, prio},
                                    {VK_STRUCTURE_TYPE_DEVICE_QUEUE_CREATE_INFO, nullptr, 0, uint32_t(xfer), 1, prio}};
  VkDeviceCreateInfo dci{VK_STRUCTURE_TYPE_DEVICE_CREATE_INFO, nullptr, 0, xfer >= 0 ? 2u : 1u, qci};
  VkDevice dev;
  if (vkCreateDevice(pd, &dci, nullptr, &dev)) {
    std::printf("copy probe: no device\n");
    return;
  }
  VkPhysicalDeviceMemoryProperties mp;
  vkGetPhysicalDeviceMemoryProperties(pd, &mp);
  const VkDeviceSize SZ = 256ull << 20;
  auto mk = [&](VkMemoryPropertyFlags want, VkMemoryPropertyFlags avoid, VkBuffer& b, VkDeviceMemory& m) -> int {
    VkBufferCreateInfo bi{VK_STRUCTURE_TYPE_BUFFER_CREATE_INFO, nullptr, 0, SZ,
                          VK_BUFFER_USAGE_TRANSFER_SRC_BIT | VK_BUFFER_USAGE_TRANSFER_DST_BIT};
    if (xfer >= 0) {
      static uint32_t fams[2];
      fams[0] = uint32_t(comp);
      fams[1] = uint32_t(xfer);
      bi.sharingMode = VK_SHARING_MODE_CONCURRENT;
      bi.queueFamilyIndexCount = 2;
      bi.pQueueFamilyIndices = fams;
    }
    if (vkCreateBuffer(dev, &bi, nullptr, &b)) return -1;
    VkMemoryRequirements r;
    vkGetBufferMemoryRequirements(dev, b, &r);
    const uint32_t t = memory_type(mp, r.memoryTypeBits, want, avoid);
    if (t == mp.memoryTypeCount) return -1;
    VkMemoryAllocateInfo ma{VK_STRUCTURE_TYPE_MEMORY_ALLOCATE_INFO, nullptr, r.size, t};
    if (vkAllocateMemory(dev, &ma, nullptr, &m) || vkBindBufferMemory(dev, b, m, 0)) return -1;
    return int(t);
  };
  VkBuffer wc, cached, d0, d1;
  VkDeviceMemory mwc, mcached, md0, md1;
  int twc = mk(VK_MEMORY_PROPERTY_HOST_VISIBLE_BIT | VK_MEMORY_PROPERTY_HOST_COHERENT_BIT,
               VK_MEMORY_PROPERTY_HOST_CACHED_BIT | VK_MEMORY_PROPERTY_DEVICE_LOCAL_BIT, wc, mwc);
  int tca = mk(VK_MEMORY_PROPERTY_HOST_VISIBLE_BIT | VK_MEMORY_PROPERTY_HOST_CACHED_BIT,
               VK_MEMORY_PROPERTY_DEVICE_LOCAL_BIT, cached, mcached);
  int td0 = mk(VK_MEMORY_PROPERTY_DEVICE_LOCAL_BIT, VK_MEMORY_PROPERTY_HOST_VISIBLE_BIT, d0, md0);
  int td1 = mk(VK_MEMORY_PROPERTY_DEVICE_LOCAL_BIT, VK_MEMORY_PROPERTY_HOST_VISIBLE_BIT, d1, md1);
  std::printf("  copy probe memory types: write-combined %d, cached %d, device %d %d\n", twc, tca, td0, td1);
  if (twc < 0 || tca < 0 || td0 < 0 || td1 < 0) return;
  void* p;
  vkMapMemory(dev, mwc, 0, SZ, 0, &p);
  std::memset(p, 1, SZ);
  vkMapMemory(dev, mcached, 0, SZ, 0, &p);
  std::memset(p, 2, SZ);
  struct Q {
    VkQueue q;
    VkCommandPool pool;
    VkCommandBuffer cb;
    VkFence f;
  };
  auto mkq = [&](int fam) {
    Q q{};
    vkGetDeviceQueue(dev, uint32_t(fam), 0, &q.q);
    VkCommandPoolCreateInfo ci{VK_STRUCTURE_TYPE_COMMAND_POOL_CREATE_INFO, nullptr,
                               VK_COMMAND_POOL_CREATE_RESET_COMMAND_BUFFER_BIT, uint32_t(fam)};
    vkCreateCommandPool(dev, &ci, nullptr, &q.pool);
    VkCommandBufferAllocateInfo ai{VK_STRUCTURE_TYPE_COMMAND_BUFFER_ALLOCATE_INFO, nullptr, q.pool,
                                   VK_COMMAND_BUFFER_LEVEL_PRIMARY, 1};
    vkAllocateCommandBuffers(dev, &ai, &q.cb);
    VkFenceCreateInfo fi{VK_STRUCTURE_TYPE_FENCE_CREATE_INFO};
    vkCreateFence(dev, &fi, nullptr, &q.f);
    return q;
  };
  Q qc = mkq(comp), qx = xfer >= 0 ? mkq(xfer) : Q{};
  auto rec = [&](Q& q, VkBuffer src, VkBuffer dst, VkDeviceSize chunk) {
    vkResetCommandBuffer(q.cb, 0);
    VkCommandBufferBeginInfo bb{VK_STRUCTURE_TYPE_COMMAND_BUFFER_BEGIN_INFO};
    vkBeginCommandBuffer(q.cb, &bb);
    for (VkDeviceSize o = 0; o < SZ; o += chunk) {
      VkBufferCopy r{o, o, std::min(chunk, SZ - o)};
      vkCmdCopyBuffer(q.cb, src, dst, 1, &r);
    }
    vkEndCommandBuffer(q.cb);
  };
  auto go = [&](std::vector<Q*> qs) {
    auto t0 = std::chrono::steady_clock::now();
    for (Q* q : qs) {
      VkSubmitInfo si{VK_STRUCTURE_TYPE_SUBMIT_INFO, nullptr, 0, nullptr, nullptr, 1, &q->cb};
      vkQueueSubmit(q->q, 1, &si, q->f);
    }
    for (Q* q : qs) {
      vkWaitForFences(dev, 1, &q->f, VK_TRUE, ~0ull);
      vkResetFences(dev, 1, &q->f);
    }
    return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  };
  for (VkDeviceSize chunk : {VkDeviceSize(9600) << 10, VkDeviceSize(1) << 20}) {
    for (int src = 0; src < 2; ++src) {
      VkBuffer s = src ? cached : wc;
      double best[3] = {1e9, 1e9, 1e9};
      for (int rep = 0; rep < 4; ++rep) {
        rec(qc, s, d0, chunk);
        best[0] = std::min(best[0], go({&qc}));
        if (xfer >= 0) {
          rec(qx, s, d0, chunk);
          best[1] = std::min(best[1], go({&qx}));
          rec(qc, s, d0, chunk);
          rec(qx, s, d1, chunk);
          best[2] = std::min(best[2], go({&qc, &qx}));
        }
      }
      std::printf(
          "  copy 256 MiB host(%s) -> device in %llu KiB pieces: compute queue %.1f GB/s, transfer queue %.1f GB/s, "
          "both at once %.1f GB/s (of 2x)\n",
          src ? "cached" : "write-combined", (unsigned long long)(chunk >> 10), SZ / best[0] / 1e9,
          xfer >= 0 ? SZ / best[1] / 1e9 : 0.0, xfer >= 0 ? 2 * SZ / best[2] / 1e9 : 0.0);
    }
  }
  vkDeviceWaitIdle(dev);
  cache_pattern(dev, mp, uint32_t(comp), qc.q);
  vkDeviceWaitIdle(dev);
}
int main() {
  VkApplicationInfo ai{VK_STRUCTURE_TYPE_APPLICATION_INFO, nullptr, "probe", 1, nullptr, 0, VK_API_VERSION_1_3};
  VkInstanceCreateInfo ici{VK_STRUCTURE_TYPE_INSTANCE_CREATE_INFO, nullptr, 0, &ai};
  VkInstance inst;
  CK(vkCreateInstance(&ici, nullptr, &inst));
  uint32_t n = 0;
  vkEnumeratePhysicalDevices(inst, &n, nullptr);
  std::vector<VkPhysicalDevice> pds(n);
  vkEnumeratePhysicalDevices(inst, &n, pds.data());
  VkPhysicalDevice pd = pds.at(0);
  VkPhysicalDeviceProperties pp;
  vkGetPhysicalDeviceProperties(pd, &pp);
  std::printf("device %s, api %u.%u.%u, driver %u\n", pp.deviceName, VK_API_VERSION_MAJOR(pp.apiVersion),
              VK_API_VERSION_MINOR(pp.apiVersion), VK_API_VERSION_PATCH(pp.apiVersion), pp.driverVersion);
  uint32_t ne = 0;
  vkEnumerateDeviceExtensionProperties(pd, nullptr, &ne, nullptr);
  std::vector<VkExtensionProperties> ex(ne);
  vkEnumerateDeviceExtensionProperties(pd, nullptr, &ne, ex.data());
  bool has = false;
  for (auto& e : ex) {
    std::string s = e.extensionName;
    if (s.find("float8") != std::string::npos || s.find("bfloat") != std::string::npos ||
        s.find("cooperative") != std::string::npos || s.find("integer_dot") != std::string::npos ||
        s.find("shader_float") != std::string::npos || s.find("maintenance") != std::string::npos)
      std::printf("  ext %s v%u\n", e.extensionName, e.specVersion);
    if (s == "VK_EXT_shader_float8") has = true;
  }
  coopvec(inst, pd);
  copy_probe(inst, pd);
  if (!has) {
    std::printf("RESULT: no VK_EXT_shader_float8\n");
    return 0;
  }
  F8Feat f8{VkStructureType(1000567000), nullptr, 0, 0};
  VkPhysicalDeviceShaderFloat16Int8Features f16i8{VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_SHADER_FLOAT16_INT8_FEATURES, &f8};
  VkPhysicalDeviceFeatures2 f2{VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_FEATURES_2, &f16i8};
  vkGetPhysicalDeviceFeatures2(pd, &f2);
  std::printf("shaderFloat8 %u, coopmat %u, int8 %u, f16 %u\n", f8.shaderFloat8, f8.shaderFloat8CooperativeMatrix,
              f16i8.shaderInt8, f16i8.shaderFloat16);
  if (!f8.shaderFloat8) {
    std::printf("RESULT: shaderFloat8 not supported\n");
    return 0;
  }
  f8.shaderFloat8CooperativeMatrix = 0;
  uint32_t nq = 0;
  vkGetPhysicalDeviceQueueFamilyProperties(pd, &nq, nullptr);
  std::vector<VkQueueFamilyProperties> qf(nq);
  vkGetPhysicalDeviceQueueFamilyProperties(pd, &nq, qf.data());
  uint32_t fam = 0;
  while (!(qf[fam].queueFlags & VK_QUEUE_COMPUTE_BIT)) ++fam;
  for (uint32_t i = 0; i < nq; ++i)
    std::printf("  queue family %u flags 0x%x count %u\n", i, qf[i].queueFlags, qf[i].queueCount);
  float prio = 1;
  VkDeviceQueueCreateInfo qci{VK_STRUCTURE_TYPE_DEVICE_QUEUE_CREATE_INFO, nullptr, 0, fam, 1, &prio};
  const char* en[] = {"VK_EXT_shader_float8"};
  VkPhysicalDeviceFeatures2 want{VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_FEATURES_2, &f16i8};
  VkDeviceCreateInfo dci{VK_STRUCTURE_TYPE_DEVICE_CREATE_INFO, &want, 0, 1, &qci, 0, nullptr, 1, en, nullptr};
  VkDevice dev;
  CK(vkCreateDevice(pd, &dci, nullptr, &dev));
  VkQueue q;
  vkGetDeviceQueue(dev, fam, 0, &q);
  VkPhysicalDeviceMemoryProperties mp;
  vkGetPhysicalDeviceMemoryProperties(pd, &mp);
  auto mk = [&](VkDeviceSize sz, VkBuffer& b, VkDeviceMemory& m) -> bool {
    VkBufferCreateInfo bi{VK_STRUCTURE_TYPE_BUFFER_CREATE_INFO, nullptr, 0, sz, VK_BUFFER_USAGE_STORAGE_BUFFER_BIT};
    if (vkCreateBuffer(dev, &bi, nullptr, &b)) return false;
    VkMemoryRequirements r;
    vkGetBufferMemoryRequirements(dev, b, &r);
    uint32_t t = 0;
    for (; t < mp.memoryTypeCount; ++t)
      if ((r.memoryTypeBits >> t & 1) && (mp.memoryTypes[t].propertyFlags & 6) == 6) break;
    VkMemoryAllocateInfo ma{VK_STRUCTURE_TYPE_MEMORY_ALLOCATE_INFO, nullptr, r.size, t};
    return !vkAllocateMemory(dev, &ma, nullptr, &m) && !vkBindBufferMemory(dev, b, m, 0);
  };
  VkBuffer bi, bo;
  VkDeviceMemory mi, mo;
  if (!mk(256, bi, mi) || !mk(512 * 4, bo, mo)) {
    std::printf("FAIL buffers\n");
    return 1;
  }
  void* p;
  vkMapMemory(dev, mi, 0, 256, 0, &p);
  for (int i = 0; i < 256; ++i) static_cast<uint8_t*>(p)[i] = uint8_t(i);
  void* po;
  vkMapMemory(dev, mo, 0, 2048, 0, &po);
  std::memset(po, 0x7B, 2048);
  VkShaderModuleCreateInfo smi{VK_STRUCTURE_TYPE_SHADER_MODULE_CREATE_INFO, nullptr, 0, sizeof(f8_spv),
                               reinterpret_cast<const uint32_t*>(f8_spv)};
  VkShaderModule sm;
  CK(vkCreateShaderModule(dev, &smi, nullptr, &sm));
  VkDescriptorSetLayoutBinding lb[2] = {{0, VK_DESCRIPTOR_TYPE_STORAGE_BUFFER, 1, VK_SHADER_STAGE_COMPUTE_BIT},
                                        {1, VK_DESCRIPTOR_TYPE_STORAGE_BUFFER, 1, VK_SHADER_STAGE_COMPUTE_BIT}};
  VkDescriptorSetLayoutCreateInfo dli{VK_STRUCTURE_TYPE_DESCRIPTOR_SET_LAYOUT_CREATE_INFO, nullptr, 0, 2, lb};
  VkDescriptorSetLayout dl;
  CK(vkCreateDescriptorSetLayout(dev, &dli, nullptr, &dl));
  VkPipelineLayoutCreateInfo pli{VK_STRUCTURE_TYPE_PIPELINE_LAYOUT_CREATE_INFO, nullptr, 0, 1, &dl};
  VkPipelineLayout pl;
  CK(vkCreatePipelineLayout(dev, &pli, nullptr, &pl));
  VkComputePipelineCreateInfo cpi{VK_STRUCTURE_TYPE_COMPUTE_PIPELINE_CREATE_INFO};
  cpi.stage = {
      VK_STRUCTURE_TYPE_PIPELINE_SHADER_STAGE_CREATE_INFO, nullptr, 0, VK_SHADER_STAGE_COMPUTE_BIT, sm, "main"};
  cpi.layout = pl;
  VkPipeline pipe;
  CK(vkCreateComputePipelines(dev, VK_NULL_HANDLE, 1, &cpi, nullptr, &pipe));
  VkDescriptorPoolSize ps{VK_DESCRIPTOR_TYPE_STORAGE_BUFFER, 2};
  VkDescriptorPoolCreateInfo dpi{VK_STRUCTURE_TYPE_DESCRIPTOR_POOL_CREATE_INFO, nullptr, 0, 1, 1, &ps};
  VkDescriptorPool dp;
  CK(vkCreateDescriptorPool(dev, &dpi, nullptr, &dp));
  VkDescriptorSetAllocateInfo dai{VK_STRUCTURE_TYPE_DESCRIPTOR_SET_ALLOCATE_INFO, nullptr, dp, 1, &dl};
  VkDescriptorSet ds;
  CK(vkAllocateDescriptorSets(dev, &dai, &ds));
  VkDescriptorBufferInfo dbi[2] = {{bi, 0, 256}, {bo, 0, 2048}};
  VkWriteDescriptorSet w[2] = {{VK_STRUCTURE_TYPE_WRITE_DESCRIPTOR_SET, nullptr, ds, 0, 0, 1,
                                VK_DESCRIPTOR_TYPE_STORAGE_BUFFER, nullptr, &dbi[0]},
                               {VK_STRUCTURE_TYPE_WRITE_DESCRIPTOR_SET, nullptr, ds, 1, 0, 1,
                                VK_DESCRIPTOR_TYPE_STORAGE_BUFFER, nullptr, &dbi[1]}};
  vkUpdateDescriptorSets(dev, 2, w, 0, nullptr);
  VkCommandPoolCreateInfo cpci{VK_STRUCTURE_TYPE_COMMAND_POOL_CREATE_INFO, nullptr, 0, fam};
  VkCommandPool cp;
  CK(vkCreateCommandPool(dev, &cpci, nullptr, &cp));
  VkCommandBufferAllocateInfo cbai{VK_STRUCTURE_TYPE_COMMAND_BUFFER_ALLOCATE_INFO, nullptr, cp,
                                   VK_COMMAND_BUFFER_LEVEL_PRIMARY, 1};
  VkCommandBuffer cb;
  CK(vkAllocateCommandBuffers(dev, &cbai, &cb));
  VkCommandBufferBeginInfo bbi{VK_STRUCTURE_TYPE_COMMAND_BUFFER_BEGIN_INFO};
  vkBeginCommandBuffer(cb, &bbi);
  vkCmdBindPipeline(cb, VK_PIPELINE_BIND_POINT_COMPUTE, pipe);
  vkCmdBindDescriptorSets(cb, VK_PIPELINE_BIND_POINT_COMPUTE, pl, 0, 1, &ds, 0, nullptr);
  vkCmdDispatch(cb, 4, 1, 1);
  vkEndCommandBuffer(cb);
  VkSubmitInfo si{VK_STRUCTURE_TYPE_SUBMIT_INFO, nullptr, 0, nullptr, nullptr, 1, &cb};
  CK(vkQueueSubmit(q, 1, &si, VK_NULL_HANDLE));
  CK(vkQueueWaitIdle(q));
  const float* o = static_cast<const float*>(po);
  int bad[2] = {0, 0};
  for (int k = 0; k < 2; ++k)
    for (int i = 0; i < 256; ++i) {
      float want = e4m3(unsigned(i)), got = o[k * 256 + i];
      bool ok = std::isnan(want) ? std::isnan(got) : std::memcmp(&want, &got, 4) == 0;
      if (!ok && bad[k]++ < 4) std::printf("  %s code 0x%02x: got %g want %g\n", k ? "f32" : "f16", i, got, want);
    }
  std::printf("RESULT: float8 conversion ran; mismatches via f16 %d, direct f32 %d of 256\n", bad[0], bad[1]);
  return 0;
}
