#pragma once
// A one-line progress bar on stderr: redrawn in place on a terminal, a line every 10% otherwise.
#include <unistd.h>

#include <cstdint>
#include <cstdio>
#include <string>

namespace cmfx::driver {

class progress_bar {
 public:
  explicit progress_bar(std::string label) : label_(std::move(label)), tty_(::isatty(2) != 0) {}
  void update(uint64_t done, uint64_t total, double seconds) {
    const double frac = total ? double(done) / double(total) : 1.0;
    const double gbps = seconds > 0 ? double(done) / seconds / 1e9 : 0.0;
    if (tty_) {
      const int width = 30, fill = int(frac * width);
      std::fprintf(stderr, "\r%s [%s%s] %5.1f%%  %.2f GB/s", label_.c_str(), std::string(size_t(fill), '#').c_str(),
                   std::string(size_t(width - fill), '.').c_str(), frac * 100.0, gbps);
    } else if (int(frac * 10) > last_decile_) {
      last_decile_ = int(frac * 10);
      std::fprintf(stderr, "%s %5.1f%%  %.2f GB/s\n", label_.c_str(), frac * 100.0, gbps);
    }
    std::fflush(stderr);
  }
  void finish() {
    if (tty_) std::fputc('\n', stderr);
  }

 private:
  std::string label_;
  bool tty_;
  int last_decile_ = -1;
};

inline std::string human_bytes(uint64_t b) {
  const char* units[] = {"B", "KiB", "MiB", "GiB", "TiB"};
  double v = double(b);
  int u = 0;
  while (v >= 1024.0 && u < 4) {
    v /= 1024.0;
    ++u;
  }
  char buf[32];
  std::snprintf(buf, sizeof buf, u ? "%.2f %s" : "%.0f %s", v, units[u]);
  return buf;
}

}  // namespace cmfx::driver
