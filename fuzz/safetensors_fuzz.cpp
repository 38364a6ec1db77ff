// libFuzzer target for cmfx::safetensors_file::parse (include/cmfx/io/safetensors.hpp) and the sharded checkpoint's
// index parser (safetensors_parse.hpp index_parser).
// Any input must either parse into tensors that lie inside the input, or throw cmfx::input_error. Accepted inputs
// are re-serialised with the writer and parsed again; the two parses must agree (names, dtypes, shapes, bytes,
// metadata).
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <set>
#include <string>
#include <string_view>
#include <span>
#include <vector>

#include "cmfx/core/error.hpp"
#include "cmfx/io/safetensors.hpp"
#include "cmfx/io/safetensors_parse.hpp"
#include "cmfx/io/safetensors_writer.hpp"

namespace {

void check(bool ok) {
  if (!ok) std::abort();
}

// The same bytes as a model.safetensors.index.json: either entries whose shards are plain file names (never a
// path out of the checkpoint directory) with distinct tensor names, or an input_error.
void check_index(const uint8_t* data, size_t size) {
  try {
    cmfx::detail::st::index_parser ip("fuzz.index.json", 0, reinterpret_cast<const char*>(data), size);
    ip.run();
    check(!ip.entries.empty());
    std::set<std::string> names;
    for (const auto& e : ip.entries) {
      check(!e.name.empty() && names.insert(e.name).second && e.key_pos < size);
      check(!e.shard.empty() && e.shard != "." && e.shard != ".." &&
            e.shard.find_first_of(std::string_view("/\\\0", 3)) == std::string::npos);
    }
  } catch (const cmfx::input_error&) {
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  check_index(data, size);
  std::vector<cmfx::st_write_entry> again;
  std::map<std::string, std::string> meta;
  try {
    const cmfx::safetensors_file f = cmfx::safetensors_file::parse(std::span<const uint8_t>(data, size), "fuzz");
    uint64_t sum = 0, total = 0;
    for (const cmfx::st_tensor& t : f.tensors()) {
      check(t.data >= data && t.nbytes <= size && t.data + t.nbytes <= data + size);
      check(t.file_offset == static_cast<uint64_t>(t.data - data));
      check(t.nbytes == t.elements() * cmfx::st_dtype_size(t.dtype));
      for (uint64_t i = 0; i < t.nbytes; ++i) sum += t.data[i];  // touch every byte (ASan checks the bounds)
      check(f.find(t.name) == &t);
      total += t.nbytes;
      again.push_back({t.name, t.dtype, t.shape, std::vector<uint8_t>(t.data, t.data + t.nbytes)});
    }
    check(8 + f.header_bytes() + total == size);
    check(sum <= total * 255);
    meta = f.metadata();
  } catch (const cmfx::input_error&) {
    return 0;
  }

  // Round trip through the writer: an accepted file is always writable and reads back the same.
  const std::vector<uint8_t> bytes = cmfx::safetensors_bytes(again, meta);
  const cmfx::safetensors_file g = cmfx::safetensors_file::parse(bytes, "fuzz-rewritten");
  check(g.tensors().size() == again.size());
  check(g.metadata() == meta);
  for (size_t i = 0; i < again.size(); ++i) {
    const cmfx::st_tensor& t = g.tensors()[i];
    check(t.name == again[i].name && t.dtype == again[i].dtype && t.shape == again[i].shape);
    check(t.nbytes == again[i].bytes.size());
    check(t.nbytes == 0 || std::memcmp(t.data, again[i].bytes.data(), t.nbytes) == 0);
  }
  return 0;
}
