#pragma once
// A container-neutral description of a model file, filled from CMF or safetensors, printed by `cmfx info`.
#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

namespace cmfx::driver {

struct tensor_entry {
  std::string name, dtype;
  std::vector<uint64_t> shape;
  uint64_t bytes = 0;
};

struct model_listing {
  std::string path;
  std::string container;     // "cmf" | "safetensors"
  std::string architecture;  // arch_name (CMF) or model_type / architectures[0] (config.json)
  uint64_t file_bytes = 0;   // all files together
  std::vector<std::string> files;
  std::vector<tensor_entry> tensors;
  nlohmann::json config = nlohmann::json::object();
  nlohmann::json extra = nlohmann::json::object();  // container details (envelope, metadata)
};

model_listing list_cmf(const std::string& path);
model_listing list_safetensors(const std::string& path);

}  // namespace cmfx::driver
