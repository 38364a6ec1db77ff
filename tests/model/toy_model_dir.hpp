#pragma once
// A directory of one test process's toy models under CMFX_MODEL_TMP (the model tests' scratch root), each made on
// first use by `cmfx make-toy`'s code (run_make_toy) and all removed when the process exits.
#include <unistd.h>

#include <filesystem>
#include <string>
#include <system_error>

#include "commands.hpp"

namespace cmfx::test {

class toy_model_dir {
 public:
  /// tag: the directory's prefix (one per test file); arch: make_toy_args::arch ("v4" | "v41").
  toy_model_dir(const std::string& tag, std::string arch)
      : root_(std::filesystem::path(CMFX_MODEL_TMP) / (tag + "-" + std::to_string(::getpid()))), arch_(std::move(arch)) {
    std::filesystem::create_directories(root_);
  }
  ~toy_model_dir() {
    std::error_code ec;
    std::filesystem::remove_all(root_, ec);
  }
  toy_model_dir(const toy_model_dir&) = delete;
  toy_model_dir& operator=(const toy_model_dir&) = delete;

  const std::filesystem::path& root() const noexcept { return root_; }

  /// The toy `name` in this directory, made once: layout and quant as make_toy_args ("" = its default), and an
  /// optional tokenizer.json.
  std::string make(const std::string& name, const std::string& layout, const std::string& quant,
                   const std::string& tokenizer = "") const {
    const std::filesystem::path p = root_ / name;
    if (!std::filesystem::exists(p)) {
      driver::make_toy_args a;
      a.arch = arch_;
      a.out = p.string();
      if (!layout.empty()) a.layout = layout;
      a.quant = quant;
      a.tokenizer = tokenizer;
      driver::run_make_toy(a);
    }
    return p.string();
  }

 private:
  std::filesystem::path root_;
  std::string arch_;
};

}  // namespace cmfx::test
