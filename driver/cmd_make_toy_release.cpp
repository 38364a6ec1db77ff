#include "cmfx/core/error.hpp"
#include "commands.hpp"
#include "toy_v4.hpp"

namespace cmfx::driver {
int write_toy_release(const make_toy_args&, const toy_v4_config&) {
  throw usage_error("make-toy --layout release is not wired yet");
}
}  // namespace cmfx::driver
