#pragma once
// Toy model files and trace comparison shared by the whole-model parity cases (cases_model*.cpp).
#include <unistd.h>

#include <algorithm>
#include <cstdint>
#include <filesystem>
#include <string>
#include <vector>

#include "commands.hpp"

namespace cmfx::parity {

namespace fs = std::filesystem;

/// Toy model files made on demand in a per-process temporary directory (removed at the end).
struct toy_files {
  fs::path dir;
  toy_files() {
    dir = fs::temp_directory_path() / ("cmfx-parity-model-" + std::to_string(::getpid()));
    fs::create_directories(dir);
  }
  ~toy_files() {
    std::error_code ec;
    fs::remove_all(dir, ec);
  }
  std::string make(const std::string& layout, const std::string& quant, const std::string& arch = "v4") {
    const fs::path p = dir / ("toy-" + arch + "-" + layout + "-" + quant + (layout == "cmf" ? ".cmf" : ""));
    if (!fs::exists(p)) {
      cmfx::driver::make_toy_args a;
      a.arch = arch;
      a.out = p.string();
      a.layout = layout;
      a.quant = quant;
      cmfx::driver::run_make_toy(a);
    }
    return p.string();
  }
};

/// The first layer / position where two traces ([layer][token] → sorted ids) differ, or empty.
inline std::string first_diff(const std::vector<std::vector<std::vector<uint32_t>>>& a,
                       const std::vector<std::vector<std::vector<uint32_t>>>& b, const char* what) {
  for (size_t l = 0; l < std::min(a.size(), b.size()); ++l)
    for (size_t t = 0; t < std::min(a[l].size(), b[l].size()); ++t)
      if (a[l][t] != b[l][t])
        return std::string(what) + " differ at layer " + std::to_string(l) + ", position " + std::to_string(t);
  for (size_t l = 0; l < std::min(a.size(), b.size()); ++l)
    if (a[l].size() != b[l].size()) return std::string(what) + ": trace lengths differ at layer " + std::to_string(l);
  return {};
}

}  // namespace cmfx::parity
