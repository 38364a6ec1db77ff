#pragma once
// Error metrics shared by the numeric tests: NMSE and max-abs against a float64 reference.
#include <algorithm>
#include <cmath>
#include <cstddef>

namespace cmfx::test {

struct error_stats {
  double nmse = 0, max_abs = 0, ref_max = 0;
  size_t nonfinite = 0;
};

template <class Got, class Want>
error_stats compare(const Got* got, const Want* want, size_t n) {
  error_stats e;
  double err = 0, ref = 0;
  for (size_t i = 0; i < n; ++i) {
    const double g = double(got[i]), w = double(want[i]);
    if (!std::isfinite(g)) {
      ++e.nonfinite;
      continue;
    }
    err += (g - w) * (g - w);
    ref += w * w;
    e.max_abs = std::max(e.max_abs, std::fabs(g - w));
    e.ref_max = std::max(e.ref_max, std::fabs(w));
  }
  e.nmse = ref > 0 ? err / ref : err;
  return e;
}

inline double nmse(const float* got, const double* want, size_t n) { return compare(got, want, n).nmse; }

}  // namespace cmfx::test
