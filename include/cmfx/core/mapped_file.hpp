#pragma once
/// @file mapped_file.hpp
/// @brief A read-only memory map of a whole file (POSIX), the base of every zero-copy tensor view.
#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdint>
#include <cstring>
#include <span>
#include <string>

#include "cmfx/core/error.hpp"

namespace cmfx {

class mapped_file {
 public:
  mapped_file() = default;
  explicit mapped_file(const std::string& path) : path_(path) {
    int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
    if (fd < 0) throw input_error(path, 0, std::string("cannot open: ") + std::strerror(errno));
    struct stat st {};
    if (::fstat(fd, &st) != 0) {
      int e = errno;
      ::close(fd);
      throw input_error(path, 0, std::string("cannot stat: ") + std::strerror(e));
    }
    if (!S_ISREG(st.st_mode)) {
      ::close(fd);
      throw input_error(path, 0, "not a regular file");
    }
    size_ = static_cast<uint64_t>(st.st_size);
    if (size_ > 0) {
      void* p = ::mmap(nullptr, size_, PROT_READ, MAP_SHARED, fd, 0);
      if (p == MAP_FAILED) {
        int e = errno;
        ::close(fd);
        throw input_error(path, 0, std::string("cannot mmap: ") + std::strerror(e));
      }
      data_ = static_cast<const uint8_t*>(p);
    }
    ::close(fd);
  }
  mapped_file(const mapped_file&) = delete;
  mapped_file& operator=(const mapped_file&) = delete;
  mapped_file(mapped_file&& o) noexcept { swap(o); }
  mapped_file& operator=(mapped_file&& o) noexcept {
    if (this != &o) {
      release();
      swap(o);
    }
    return *this;
  }
  ~mapped_file() { release(); }

  const uint8_t* data() const noexcept { return data_; }
  uint64_t size() const noexcept { return size_; }
  std::span<const uint8_t> bytes() const noexcept { return {data_, static_cast<size_t>(size_)}; }
  const std::string& path() const noexcept { return path_; }

  /// Hints the kernel that [off, off+len) will be read sequentially soon.
  void advise_sequential(uint64_t off, uint64_t len) const noexcept {
    if (!data_ || len == 0) return;
    const uint64_t page = static_cast<uint64_t>(::sysconf(_SC_PAGESIZE));
    const uint64_t start = off / page * page;
    void* p = const_cast<uint8_t*>(data_) + start;
    ::madvise(p, off + len - start, MADV_SEQUENTIAL);
    ::madvise(p, off + len - start, MADV_WILLNEED);
  }

 private:
  void swap(mapped_file& o) noexcept {
    std::swap(path_, o.path_);
    std::swap(data_, o.data_);
    std::swap(size_, o.size_);
  }
  void release() noexcept {
    if (data_) ::munmap(const_cast<uint8_t*>(data_), size_);
    data_ = nullptr;
    size_ = 0;
  }
  std::string path_;
  const uint8_t* data_ = nullptr;
  uint64_t size_ = 0;
};

}  // namespace cmfx
