// Compute pipelines: cached in memory by (shader, defines, specialization constants, subgroup size); SPIR-V
// cached on disk by the same key plus the glslang version and a hash of every shader file; the driver's
// VkPipelineCache cached on disk per device (vendor, device, driver version, pipelineCacheUUID).
#include <spirv-tools/libspirv.hpp>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>

#include "cmfx/core/hash64.hpp"
#include "vk_impl.hpp"

namespace cmfx::gpu::detail {

namespace {
std::string hex64(uint64_t v) {
  char b[17];
  std::snprintf(b, sizeof b, "%016llx", static_cast<unsigned long long>(v));
  return b;
}
uint64_t hash_str(const std::string& s) { return hash64(reinterpret_cast<const uint8_t*>(s.data()), s.size()); }

std::vector<char> read_all(const std::filesystem::path& p) {
  std::ifstream f(p, std::ios::binary);
  if (!f) return {};
  return std::vector<char>(std::istreambuf_iterator<char>(f), std::istreambuf_iterator<char>());
}

/// Write to a temporary name, then rename: a concurrent reader never sees half a file.
void write_all(const std::filesystem::path& p, const void* data, size_t n) {
  std::error_code ec;
  std::filesystem::create_directories(p.parent_path(), ec);
  const std::filesystem::path tmp = p.string() + ".tmp" + std::to_string(::getpid());
  {
    std::ofstream f(tmp, std::ios::binary | std::ios::trunc);
    if (!f) return;
    f.write(static_cast<const char*>(data), std::streamsize(n));
    if (!f) return;
  }
  std::filesystem::rename(tmp, p, ec);
  if (ec) std::filesystem::remove(tmp, ec);
}
}  // namespace

std::string pipeline_desc::key() const {
  std::string k = shader + "\n" + defines + "spec:";
  for (uint32_t s : spec) k += std::to_string(s) + ",";
  k += "\nsubgroup:" + std::to_string(subgroup) + " bindings:" + std::to_string(bindings) +
       " push:" + std::to_string(push_bytes);
  return k;
}

void device_impl::load_pipeline_cache() {
  std::vector<char> data;
  if (!opt.cache_dir.empty()) {
    std::string uuid;
    for (uint8_t b : info.pipeline_cache_uuid) uuid += hex64(b).substr(14);
    pcache_path = (std::filesystem::path(opt.cache_dir) /
                   ("pipelines-" + hex64(info.vendor_id).substr(8) + "-" + hex64(info.device_id).substr(8) + "-" +
                    hex64(info.driver_version).substr(8) + "-" + uuid + ".bin"))
                      .string();
    data = read_all(pcache_path);
  }
  try {
    pcache = vk::raii::PipelineCache(dev, vk::PipelineCacheCreateInfo({}, data.size(), data.data()));
  } catch (const vk::SystemError&) {  // a stale or foreign blob: start empty
    pcache = vk::raii::PipelineCache(dev, vk::PipelineCacheCreateInfo());
  }
}

void device_impl::save_pipeline_cache() noexcept {
  if (pcache_path.empty() || !*pcache) return;
  try {
    const std::vector<uint8_t> data = pcache.getData();
    write_all(pcache_path, data.data(), data.size());
  } catch (...) {  // a cache is an optimisation: never fail because of it
  }
}

/// The driver's statistics of every executable of pipeline p, "name value" comma separated (VK_KHR_pipeline_
/// executable_properties; device_options::pipeline_statistics).
std::string executable_statistics(const vk::raii::Device& dev, vk::Pipeline p) {
  std::string s;
  const auto props = dev.getPipelineExecutablePropertiesKHR(vk::PipelineInfoKHR(p));
  for (uint32_t i = 0; i < props.size(); ++i)
    for (const vk::PipelineExecutableStatisticKHR& st :
         dev.getPipelineExecutableStatisticsKHR(vk::PipelineExecutableInfoKHR(p, i))) {
      if (!s.empty()) s += ", ";
      s += std::string(st.name.data()) + " ";
      switch (st.format) {
        case vk::PipelineExecutableStatisticFormatKHR::eBool32: s += st.value.b32 ? "yes" : "no"; break;
        case vk::PipelineExecutableStatisticFormatKHR::eInt64: s += std::to_string(st.value.i64); break;
        case vk::PipelineExecutableStatisticFormatKHR::eUint64: s += std::to_string(st.value.u64); break;
        case vk::PipelineExecutableStatisticFormatKHR::eFloat64: s += std::to_string(st.value.f64); break;
        default: s += "?";
      }
    }
  return s;
}

std::vector<uint32_t> device_impl::spirv_for(const pipeline_desc& d) {
  if (!shader_hash_ready) {
    shader_hash = shader_tree_hash(opt.shader_dir);
    shader_hash_ready = true;
  }
  std::filesystem::path file;
  if (!opt.cache_dir.empty()) {
    const uint64_t h = hash_str(glslang_version() + (opt.optimize_spirv ? " spirv-opt" : "") +
                                (opt.nontemporal_weights ? " nontemporal\n" : "\n") + d.shader + "\n" + d.defines) ^
                       (shader_hash * 31);
    file = std::filesystem::path(opt.cache_dir) / "spirv" / (d.shader + "-" + hex64(h) + ".spv");
    const std::vector<char> bytes = read_all(file);
    if (bytes.size() >= 20 && bytes.size() % 4 == 0) {
      std::vector<uint32_t> spv(bytes.size() / 4);
      std::memcpy(spv.data(), bytes.data(), bytes.size());
      if (spv[0] == 0x07230203u) {
        ++counters.spirv_disk_hits;
        return spv;
      }
    }
  }
  const auto t0 = std::chrono::steady_clock::now();
  std::vector<uint32_t> spv = compile_glsl(opt.shader_dir, d.shader, d.defines, opt.optimize_spirv);
  if (opt.nontemporal_weights) {
    counters.nontemporal_loads += mark_nontemporal(spv, nontemporal_blocks());
    std::string log;  // the rewritten module must still be valid SPIR-V
    spvtools::SpirvTools tools(SPV_ENV_VULKAN_1_2);
    tools.SetMessageConsumer([&log](spv_message_level_t, const char*, const spv_position_t&, const char* m) {
      log += m;
      log += '\n';
    });
    if (!tools.Validate(spv)) throw gpu_error(d.shader + ": SPIR-V invalid after the nontemporal marks: " + log);
  }
  counters.compile_seconds += std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  ++counters.compiled;
  if (!file.empty()) write_all(file, spv.data(), spv.size() * 4);
  return spv;
}

const pipeline* device_impl::get(const pipeline_desc& d) {
  const std::string k = d.key();
  if (auto it = pipelines.find(k); it != pipelines.end()) return it->second.get();
  const std::vector<uint32_t> spv = spirv_for(d);
  auto p = std::make_unique<pipeline>();
  p->name = d.shader;
  p->bindings = d.bindings;
  p->push_bytes = d.push_bytes;
  const vk::raii::ShaderModule module(dev, vk::ShaderModuleCreateInfo({}, spv));
  std::vector<vk::DescriptorSetLayoutBinding> lb;
  for (uint32_t i = 0; i < d.bindings; ++i)
    lb.emplace_back(i, vk::DescriptorType::eStorageBuffer, 1, vk::ShaderStageFlagBits::eCompute);
  p->set_layout = vk::raii::DescriptorSetLayout(dev, vk::DescriptorSetLayoutCreateInfo({}, lb));
  const vk::PushConstantRange pr(vk::ShaderStageFlagBits::eCompute, 0, d.push_bytes);
  const vk::DescriptorSetLayout sl = *p->set_layout;
  vk::PipelineLayoutCreateInfo plci({}, sl, {});
  if (d.push_bytes) plci.setPushConstantRanges(pr);
  p->layout = vk::raii::PipelineLayout(dev, plci);
  std::vector<vk::SpecializationMapEntry> me;
  for (uint32_t i = 0; i < d.spec.size(); ++i) me.emplace_back(i, 4 * i, 4);
  const vk::SpecializationInfo si(uint32_t(me.size()), me.data(), d.spec.size() * 4, d.spec.data());
  vk::PipelineShaderStageCreateInfo stage({}, vk::ShaderStageFlagBits::eCompute, *module, "main",
                                          d.spec.empty() ? nullptr : &si);
  vk::PipelineShaderStageRequiredSubgroupSizeCreateInfo rs(d.subgroup);
  if (d.subgroup && info.subgroup_size_control && d.subgroup >= info.min_subgroup_size &&
      d.subgroup <= info.max_subgroup_size) {
    stage.pNext = &rs;
    stage.flags = vk::PipelineShaderStageCreateFlagBits::eRequireFullSubgroups;
  }
  const vk::PipelineCreateFlags pf = exec_stats ? vk::PipelineCreateFlagBits::eCaptureStatisticsKHR
                                                : vk::PipelineCreateFlags{};
  p->pipe = vk::raii::Pipeline(dev, pcache, vk::ComputePipelineCreateInfo(pf, stage, *p->layout));
  if (exec_stats) p->stats = executable_statistics(dev, *p->pipe);
  ++counters.pipelines;
  const pipeline* out = p.get();
  pipelines.emplace(k, std::move(p));
  return out;
}

const pipeline* get_pipeline(device_impl& d, const pipeline_desc& desc) {
  try {
    return d.get(desc);
  } catch (const vk::SystemError& e) {
    throw gpu_error("pipeline " + desc.shader + ": " + e.what());
  }
}

compile_counters counters(const device_impl& d) { return d.counters; }

}  // namespace cmfx::gpu::detail
