#pragma once
// Container-neutral tensor lookup for the model binder: a CMF file or a release-layout checkpoint, both asked by the
// official release name (after convert.py). Each hit is a zero-copy view with its weight format and logical shape.
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "cmfx/formats/format.hpp"
#include "dsv4_config.hpp"

namespace cmfx::driver {

struct dsv4_tensor {
  std::string name;             // the name as stored in the file
  std::string dtype;            // the file's dtype name (messages)
  std::vector<uint64_t> dims;   // logical shape (FP4 experts: [out, in], not the packed [out, in/2])
  matrix_view v;                // rows = dims[0], cols = the rest
  std::optional<format> fmt;    // nullopt: not a weight format (integer tables, refused dtypes)
  const uint8_t* raw = nullptr; // payload (integer tables)
  int int_bytes = 0;            // 4 or 8 for I32 / I64 payloads, else 0
};

class dsv4_source {
 public:
  virtual ~dsv4_source() = default;
  /// The tensor with this release name (or one of its aliases), or nullopt.
  virtual std::optional<dsv4_tensor> find(const std::string& release_name) const = 0;
  /// The name(s) looked up for a release name (error messages).
  virtual std::string spelled(const std::string& release_name) const = 0;
  /// "cmf" or "release".
  virtual std::string kind() const = 0;
  /// Hyper-parameters stated by the container (header / config.json).
  virtual dsv4_config config() const = 0;
  /// The container's own config: the CMF header JSON, or the release config.json (V4.1 reads its config from it).
  virtual const nlohmann::json& raw_config() const = 0;
};

/// Opens `path`: a CMF file (by magic), or a release directory / *.index.json / *.safetensors.
std::shared_ptr<dsv4_source> dsv4_open_source(const std::string& path);

}  // namespace cmfx::driver
