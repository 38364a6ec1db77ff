#pragma once
/// @file cmf_verify.hpp
/// @brief Multi-threaded hash verification of a CMF file (cortiq `CmfModel::verify`, cmf-format.md §1.8):
///        header and directory hashes when stored (non-zero), `section_hashes` entries, then every tensor.
///
/// Tensors are split into word-aligned chunks that worker threads take from a shared counter; the XOR structure
/// of hash64 lets each chunk be hashed independently (hash64_partial) and folded with an atomic XOR.
#include <algorithm>
#include <atomic>
#include <chrono>
#include <functional>
#include <thread>

#include "cmfx/core/hash64.hpp"
#include "cmfx/io/cmf_reader.hpp"

namespace cmfx {

struct verify_options {
  unsigned threads = 0;                  // 0 = all hardware threads
  uint64_t chunk_bytes = 8ull << 20;     // work unit; a multiple of 8
  std::function<void(uint64_t done, uint64_t total)> progress;  // called from the calling thread, ~10 Hz
};

struct verify_report {
  std::vector<std::string> bad_tensors;  // names whose payload hash differs
  std::vector<std::string> problems;     // one line per problem, tensors included
  uint64_t bytes_hashed = 0;
  double seconds = 0;
  bool ok() const noexcept { return problems.empty(); }
};

inline std::string hex16(uint64_t v) {
  static const char* d = "0123456789abcdef";
  std::string s(16, '0');
  for (int i = 15; i >= 0; --i, v >>= 4) s[i] = d[v & 15];
  return s;
}

inline verify_report verify(const cmf_file& f, const verify_options& opt = {}) {
  verify_report rep;
  const auto t0 = std::chrono::steady_clock::now();
  auto check_section = [&](const char* what, std::span<const uint8_t> b, uint64_t stored) {
    if (stored == 0 || b.empty()) return;
    if (const uint64_t h = hash64(b); h != stored)
      rep.problems.push_back(std::string(what) + " hash mismatch: stored " + hex16(stored) + ", computed " + hex16(h));
  };
  check_section("header", f.header_bytes(), f.envelope().header_hash);
  check_section("directory", f.dir_bytes(), f.envelope().dir_hash);
  if (auto it = f.header().find("section_hashes"); it != f.header().end()) {
    const std::pair<const char*, std::span<const uint8_t>> secs[] = {
        {"masks", f.masks()}, {"vocab", f.vocab()}, {"index", f.index_section()}};
    for (const auto& [key, bytes] : secs) {
      auto h = it->find(key);
      if (h == it->end()) continue;
      if (!h->is_string() || h->get_ref<const std::string&>().size() != 16 ||
          h->get_ref<const std::string&>().find_first_not_of("0123456789abcdef") != std::string::npos) {
        rep.problems.push_back(std::string("section_hashes.") + key + " is not 16 lowercase hex digits");
        continue;
      }
      const uint64_t stored = std::stoull(h->get<std::string>(), nullptr, 16);
      if (bytes.empty())
        rep.problems.push_back(std::string("section_hashes.") + key + " is set but the section is absent");
      else if (const uint64_t got = hash64(bytes); got != stored)
        rep.problems.push_back(std::string(key) + " section hash mismatch: stored " + hex16(stored) + ", computed " +
                               hex16(got));
    }
  }

  // Work list: (tensor, first byte, length), each chunk a multiple of 8 bytes except a tensor's last.
  struct chunk {
    uint32_t tensor;
    uint64_t begin, len;
  };
  const auto& ts = f.tensors();
  const uint64_t cb = std::max<uint64_t>(8, opt.chunk_bytes / 8 * 8);
  std::vector<chunk> work;
  uint64_t total = 0;
  for (uint32_t i = 0; i < ts.size(); ++i) {
    total += ts[i].nbytes;
    for (uint64_t b = 0; b < ts[i].nbytes; b += cb) work.push_back({i, b, std::min(cb, ts[i].nbytes - b)});
  }
  std::vector<std::atomic<uint64_t>> acc(ts.size());
  for (auto& a : acc) a.store(0, std::memory_order_relaxed);
  std::atomic<size_t> next{0};
  std::atomic<uint64_t> done{0};
  unsigned n = opt.threads ? opt.threads : std::max(1u, std::thread::hardware_concurrency());
  n = static_cast<unsigned>(std::min<size_t>(n, std::max<size_t>(work.size(), 1)));
  auto worker = [&] {
    for (size_t k; (k = next.fetch_add(1, std::memory_order_relaxed)) < work.size();) {
      const chunk& c = work[k];
      const uint64_t h = hash64_partial(ts[c.tensor].data + c.begin, c.len, c.begin / 8);
      acc[c.tensor].fetch_xor(h, std::memory_order_relaxed);
      done.fetch_add(c.len, std::memory_order_relaxed);
    }
  };
  std::vector<std::thread> pool;
  if (opt.progress) {
    // n workers hash; the calling thread only reports progress.
    for (unsigned i = 0; i < n; ++i) pool.emplace_back(worker);
    while (done.load(std::memory_order_relaxed) < total) {
      opt.progress(done.load(std::memory_order_relaxed), total);
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
  } else {
    for (unsigned i = 1; i < n; ++i) pool.emplace_back(worker);
    worker();
  }
  for (auto& t : pool) t.join();
  if (opt.progress) opt.progress(total, total);

  for (uint32_t i = 0; i < ts.size(); ++i) {
    const uint64_t h = hash64_finish(acc[i].load(std::memory_order_relaxed), ts[i].nbytes);
    if (h != ts[i].hash) {
      rep.bad_tensors.emplace_back(ts[i].name);
      rep.problems.push_back("tensor '" + std::string(ts[i].name) + "': hash mismatch: stored " + hex16(ts[i].hash) +
                             ", computed " + hex16(h));
    }
  }
  rep.bytes_hashed = total;
  rep.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  return rep;
}

}  // namespace cmfx
