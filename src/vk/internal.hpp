#pragma once
// Internal interface of cmfx_vk between the kernels (kernels*.cpp, no Vulkan headers) and the device layer
// (device.cpp, pipelines.cpp: the only translation units that include vulkan_raii.hpp, P12).
#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "cmfx/vk/device.hpp"

namespace cmfx::gpu::detail {

/// Everything that identifies a compute pipeline. Two equal descs give the same cached pipeline.
struct pipeline_desc {
  std::string shader;          ///< file in shaders/, e.g. "matvec.comp"
  std::string defines;         ///< preamble: "#define NAME VALUE\n" lines
  std::vector<uint32_t> spec;  ///< specialization constants, constant_id = position
  uint32_t bindings = 0;       ///< storage buffers at bindings 0 .. bindings-1 (set 0)
  uint32_t push_bytes = 0;     ///< push-constant block size
  uint32_t subgroup = 0;       ///< required subgroup size (0: the device's choice)
  std::string key() const;
};

struct pipeline;  // owned by device_impl, valid as long as the device

/// One storage-buffer binding: `offset` is aligned to minStorageBufferOffsetAlignment; the kernel adds the
/// residual bytes itself (push constants).
struct binding {
  const buffer* buf = nullptr;
  uint64_t offset = 0;
  uint64_t range = 0;
};

/// A binding of bytes [off, off + bytes) of a view, and the residual byte offset the shader must add.
struct bound {
  binding b;
  uint32_t residual = 0;
};

/// Binds [v.offset + off, + bytes) of v's buffer. The range gets 16 bytes of slack (funnel loads may read one
/// word past the last byte) where the buffer has them.
bound bind_range(const device_info& info, const view& v, uint64_t off, uint64_t bytes);

const pipeline* get_pipeline(device_impl& d, const pipeline_desc& desc);
void dispatch(commands_impl& c, const pipeline* p, std::span<const binding> b, const void* push,
              uint32_t push_bytes, uint32_t gx, uint32_t gy = 1, uint32_t gz = 1);
device_impl& owner(commands_impl& c);

struct compile_counters {
  uint32_t pipelines = 0, compiled = 0, spirv_disk_hits = 0;
  double compile_seconds = 0;
  uint64_t nontemporal_loads = 0;  // loads marked by device_options::nontemporal_weights
};
compile_counters counters(const device_impl& d);

// ---- shader sources and the GLSL compiler (shader_compiler.cpp: glslang only, no Vulkan)
/// Text of shaders/<name>: from options().shader_dir when set, else the copy embedded at build time.
std::string shader_text(const std::string& shader_dir, const std::string& name);
/// Hash of every shader file (embedded or in shader_dir): part of the SPIR-V cache key.
uint64_t shader_tree_hash(const std::string& shader_dir);
/// GLSL → SPIR-V 1.5 for Vulkan 1.2 (P5), then spirv-opt's performance passes when `optimize`. Throws
/// gpu_error with glslang's log and the preamble.
std::vector<uint32_t> compile_glsl(const std::string& shader_dir, const std::string& name,
                                   const std::string& preamble, bool optimize);
/// "glslang 12.0.0" — part of the SPIR-V cache key.
std::string glslang_version();
/// Loads through storage-buffer blocks whose type is named in block_names get SPIR-V's Nontemporal memory operand
/// (spirv_nontemporal.cpp). Returns the loads marked (0 and spv unchanged when it is not a SPIR-V module).
size_t mark_nontemporal(std::vector<uint32_t>& spv, const std::vector<std::string>& block_names);
/// The blocks device_options::nontemporal_weights marks: the weight planes of common/formats.glsl and
/// stream_read.comp's source.
const std::vector<std::string>& nontemporal_blocks();

}  // namespace cmfx::gpu::detail
