#pragma once
// What the GPU graphs' expert cache does with a selected expert that is not resident (--cold-experts;
// gpu_expert_cache.hpp has the rule).
#include <string>

#include "cmfx/core/error.hpp"

namespace cmfx::driver {

enum class cold_experts {
  copy,  ///< copy it into the least recently used slot (default; output bit-identical to the resident graph's)
  cpu,   ///< copy it only when it is hotter than the coldest slot, else compute it on the host's CPU
  /// copy or cpu, whichever measured the faster tokens: windows of both in turn, then the faster for a while
  /// (output then depends on timing, at the CPU kernels' rounding)
  automatic,
};

/// "copy" / "cpu" / "auto" → the mode; usage_error naming `flag` otherwise.
inline cold_experts parse_cold_experts(const std::string& v, const std::string& flag = "--cold-experts") {
  if (v == "copy") return cold_experts::copy;
  if (v == "cpu") return cold_experts::cpu;
  if (v == "auto") return cold_experts::automatic;
  throw usage_error(flag + ": '" + v + "' is not one of copy, cpu, auto");
}

}  // namespace cmfx::driver
