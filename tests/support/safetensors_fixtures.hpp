#pragma once
// Fixtures of the safetensors tests: entry builders, byte patching, expected-error helpers.
#include "cmfx/io/safetensors.hpp"
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <random>
#include <string>
#include <vector>
#include "cmfx/io/safetensors_writer.hpp"
#include "support/hex.hpp"

namespace cmfx::test::stfix {

namespace fs = std::filesystem;
using cmfx::input_error;
using cmfx::safetensors_file;
using cmfx::safetensors_model;
using cmfx::st_dtype;
using cmfx::st_tensor;
using cmfx::st_write_entry;
using ::testing::HasSubstr;

inline const std::string kFile = "hostile.safetensors";

inline std::vector<uint8_t> random_bytes(size_t n, std::mt19937_64& rng) {
  std::vector<uint8_t> b(n);
  for (auto& x : b) x = static_cast<uint8_t>(rng());
  return b;
}

inline uint64_t elements(const std::vector<uint64_t>& shape) {
  uint64_t n = 1;
  for (uint64_t d : shape) n *= d;
  return n;
}

inline st_write_entry make_entry(const std::string& name, st_dtype dt, std::vector<uint64_t> shape, std::mt19937_64& rng) {
  const size_t n = static_cast<size_t>(elements(shape) * cmfx::st_dtype_size(dt));
  return st_write_entry{name, dt, std::move(shape), random_bytes(n, rng)};
}

/// A file from a raw header text (no padding) and `data`.
inline std::vector<uint8_t> raw_file(const std::string& header, const std::vector<uint8_t>& data = {}) {
  std::vector<uint8_t> f;
  const uint64_t n = header.size();
  for (int i = 0; i < 8; ++i) f.push_back(static_cast<uint8_t>(n >> (8 * i)));
  f.insert(f.end(), header.begin(), header.end());
  f.insert(f.end(), data.begin(), data.end());
  return f;
}
inline std::vector<uint8_t> raw_file(const std::string& header, size_t data_bytes) {
  return raw_file(header, std::vector<uint8_t>(data_bytes, 0xAB));
}

/// 8 + the position of the n-th (0-based) occurrence of `token` in `header`: where a header error must point.
inline uint64_t at(const std::string& header, const std::string& token, int nth = 0) {
  size_t p = header.find(token);
  for (int i = 0; i < nth && p != std::string::npos; ++i) p = header.find(token, p + 1);
  EXPECT_NE(p, std::string::npos) << token << " not in " << header;
  return 8 + p;
}

/// parse() must throw input_error naming kFile, at `offset`, with `reason` in the message.
inline ::testing::AssertionResult rejects(const std::vector<uint8_t>& file, uint64_t offset, const std::string& reason) {
  try {
    safetensors_file::parse(file, kFile);
  } catch (const input_error& e) {
    const std::string msg = e.what();
    const std::string want = kFile + ": offset " + std::to_string(offset) + ": ";
    if (msg.find(want) == std::string::npos || e.offset() != offset || e.file() != kFile)
      return ::testing::AssertionFailure() << "expected \"" << want << "\", got: " << msg;
    if (msg.find(reason) == std::string::npos)
      return ::testing::AssertionFailure() << "expected reason \"" << reason << "\", got: " << msg;
    return ::testing::AssertionSuccess();
  }
  return ::testing::AssertionFailure() << "parse accepted the input";
}

/// A tensor entry of a hand-written header.
inline std::string ent(const std::string& name, const std::string& dtype, const std::string& shape, uint64_t b, uint64_t e) {
  return "\"" + name + "\":{\"dtype\":\"" + dtype + "\",\"shape\":" + shape + ",\"data_offsets\":[" + std::to_string(b) +
         "," + std::to_string(e) + "]}";
}

/// A fresh directory under the system temp dir, removed at scope exit.
class temp_dir {
 public:
  temp_dir() {
    path_ = fs::temp_directory_path() / ("cmfx_st_test_" + cmfx::test::hex64(cmfx::test::fresh_seed()));
    fs::create_directories(path_);
  }
  ~temp_dir() {
    std::error_code ec;
    fs::remove_all(path_, ec);
  }
  temp_dir(const temp_dir&) = delete;
  temp_dir& operator=(const temp_dir&) = delete;
  std::string str() const { return path_.string(); }
  std::string file(const std::string& name) const { return (path_ / name).string(); }

 private:
  fs::path path_;
};

inline void expect_same(const st_tensor& t, const st_write_entry& w) {
  EXPECT_EQ(t.name, w.name);
  EXPECT_EQ(t.dtype, w.dtype) << w.name;
  EXPECT_EQ(t.shape, w.shape) << w.name;
  EXPECT_EQ(t.elements(), elements(w.shape)) << w.name;
  ASSERT_EQ(t.nbytes, w.bytes.size()) << w.name;
  if (t.nbytes) {
    EXPECT_EQ(std::memcmp(t.data, w.bytes.data(), w.bytes.size()), 0) << w.name;
  }
}

/// A small valid file with metadata and three tensors, used by the truncation and corruption sweeps.
inline std::vector<uint8_t> small_valid_file(std::mt19937_64& rng) {
  std::vector<st_write_entry> ts;
  ts.push_back(make_entry("a.weight", st_dtype::F32, {2, 3}, rng));
  ts.push_back(make_entry("b", st_dtype::BF16, {}, rng));
  ts.push_back(make_entry("c.scale", st_dtype::F8_E8M0, {4}, rng));
  return cmfx::safetensors_bytes(ts, {{"format", "pt"}});
}

}  // namespace cmfx::test::stfix
