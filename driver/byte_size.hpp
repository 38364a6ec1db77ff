#pragma once
// A byte count on the command line (--vram-budget): a number with an optional binary suffix K, M, G, T (KiB …
// TiB; "GiB" / "GB" spellings accepted, both meaning 2^30), e.g. 96G, 40.5GiB, 1073741824.
#include <cmath>
#include <cstdint>
#include <string>

#include "cmfx/core/error.hpp"

namespace cmfx::driver {

inline uint64_t parse_byte_size(const std::string& s, const char* flag) {
  auto bad = [&]() { return usage_error(std::string(flag) + ": '" + s + "' is not a size (e.g. 96G, 40GiB, 512M)"); };
  size_t used = 0;
  double v = 0;
  try {
    v = std::stod(s, &used);
  } catch (const std::exception&) {
    throw bad();
  }
  std::string unit = s.substr(used);
  for (char& ch : unit) ch = char(std::toupper(static_cast<unsigned char>(ch)));
  if (unit.size() > 1 && unit.back() == 'B') unit.pop_back();   // GB, GiB → G, Gi
  if (unit.size() > 1 && unit.back() == 'I') unit.pop_back();   // Gi → G
  double mul = 1;
  if (unit == "K") mul = 0x1p10;
  else if (unit == "M") mul = 0x1p20;
  else if (unit == "G") mul = 0x1p30;
  else if (unit == "T") mul = 0x1p40;
  else if (!unit.empty() && unit != "B") throw bad();
  const double bytes = v * mul;
  if (!std::isfinite(bytes) || bytes < 0 || bytes >= 0x1p63) throw bad();
  return uint64_t(bytes);
}

}  // namespace cmfx::driver
