#include "cmfx/io/cmf_reader.hpp"
#include "listing.hpp"

namespace cmfx::driver {

model_listing list_cmf(const std::string& path) {
  const auto f = cmf_file::open(path);
  model_listing l;
  l.path = path;
  l.container = "cmf";
  l.files = {path};
  l.file_bytes = f.file_size();
  l.architecture = f.arch_name();
  l.config = f.header().at("arch");
  for (const char* k : {"quant_type", "tokenizer_config", "provenance", "shard", "dsv4"})
    if (f.header().contains(k)) l.extra[k] = f.header()[k];
  const auto& e = f.envelope();
  l.extra["cmf_version"] = e.version;
  l.extra["required_features"] = e.features;
  l.extra["data_offset"] = e.data.off;
  l.extra["data_bytes"] = e.data.len;
  l.extra["vocab_bytes"] = e.vocab.len;
  l.extra["masks_bytes"] = e.masks.len;
  l.tensors.reserve(f.tensors().size());
  for (const auto& t : f.tensors()) l.tensors.push_back({std::string(t.name), std::string(t.dtype_name()), t.dims(), t.nbytes});
  return l;
}

}  // namespace cmfx::driver
