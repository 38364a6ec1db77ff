#pragma once
/// @file error.hpp
/// @brief The one exception type for bad input: it names the file and the byte offset where parsing failed.
#include <cstdint>
#include <stdexcept>
#include <string>

namespace cmfx {

/// Thrown by every parser (CMF, safetensors, JSON configs, tokenizer files) on bad input.
/// what() reads "<file>: offset <N>: <reason>" so a user can find the byte that was rejected.
class input_error : public std::runtime_error {
 public:
  input_error(std::string file, uint64_t offset, const std::string& reason)
      : std::runtime_error(file + ": offset " + std::to_string(offset) + ": " + reason),
        file_(std::move(file)),
        offset_(offset) {}
  const std::string& file() const noexcept { return file_; }
  uint64_t offset() const noexcept { return offset_; }

 private:
  std::string file_;
  uint64_t offset_;
};

/// Thrown when a request is well formed but cannot be served (an unsupported dtype, a missing tensor).
class usage_error : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

}  // namespace cmfx
