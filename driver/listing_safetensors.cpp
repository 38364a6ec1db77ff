#include "listing.hpp"
#include "cmfx/core/error.hpp"

namespace cmfx::driver {
model_listing list_safetensors(const std::string& path) {
  throw usage_error(path + ": not a CMF file (safetensors listing is not wired yet)");
}
}  // namespace cmfx::driver
