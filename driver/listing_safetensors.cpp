#include <filesystem>
#include <fstream>
#include <sstream>

#include "cmfx/core/error.hpp"
#include "cmfx/io/safetensors.hpp"
#include "listing.hpp"

namespace cmfx::driver {

namespace {
/// config.json next to the weights (the release keeps hyper-parameters there); empty object if absent.
nlohmann::json read_config(const std::filesystem::path& dir) {
  const auto p = dir / "config.json";
  if (!std::filesystem::exists(p)) return nlohmann::json::object();
  std::ifstream in(p);
  std::stringstream ss;
  ss << in.rdbuf();
  try {
    return nlohmann::json::parse(ss.str());
  } catch (const nlohmann::json::parse_error& e) {
    throw input_error(p.string(), e.byte ? e.byte - 1 : 0, std::string("config.json: ") + e.what());
  }
}
}  // namespace

model_listing list_safetensors(const std::string& path) {
  const auto m = safetensors_model::open(path);
  model_listing l;
  l.path = path;
  l.container = "safetensors";
  l.files = m.shard_files();
  for (const auto& f : l.files) l.file_bytes += std::filesystem::file_size(f);
  const std::filesystem::path dir =
      std::filesystem::is_directory(path) ? std::filesystem::path(path) : std::filesystem::path(path).parent_path();
  l.config = read_config(dir);
  if (l.config.contains("model_type") && l.config["model_type"].is_string())
    l.architecture = l.config["model_type"].get<std::string>();
  else if (l.config.contains("architectures") && l.config["architectures"].is_array() &&
           !l.config["architectures"].empty() && l.config["architectures"][0].is_string())
    l.architecture = l.config["architectures"][0].get<std::string>();
  else
    l.architecture = "unknown (no config.json)";
  for (const auto* t : m.tensors()) l.tensors.push_back({t->name, std::string(st_dtype_name(t->dtype)), t->shape, t->nbytes});
  l.extra["shards"] = l.files.size();
  return l;
}

}  // namespace cmfx::driver
