#include "tensor_binder.hpp"

#include <cmath>
#include <cstring>

#include "cmfx/core/error.hpp"
#include "cmfx/formats/format_list.hpp"
#include "cmfx/io/cmf_reader.hpp"

namespace cmfx::driver {

bool tensor_binder::has(const std::string& n) const { return src_.find(n).has_value(); }

dsv4_tensor tensor_binder::need(const std::string& n) const {
  auto t = src_.find(n);
  if (!t) throw usage_error(src_.kind() + " " + model_ + "model is missing tensor " + src_.spelled(n));
  return *t;
}

dsv4_tensor tensor_binder::need(const std::string& n, const dims_t& want) const {
  dsv4_tensor t = need(n);
  if (t.dims != want)
    throw usage_error("tensor '" + t.name + "' has shape " + shape_string(t.dims) + ", expected " + shape_string(want));
  return t;
}

dsv4_matrix tensor_binder::matrix(const std::string& n, uint64_t rows, uint64_t cols, bool qat_input) const {
  dsv4_tensor t = need(n, {rows, cols});
  if (!t.fmt) throw usage_error("tensor '" + t.name + "' has dtype " + t.dtype + ", which is not a weight format");
  return dsv4_matrix{t.v, *t.fmt, qat_input};
}

std::vector<float> tensor_binder::floats(const std::string& n, const dims_t& want) const {
  dsv4_tensor t = need(n, want);
  if (!t.fmt) throw usage_error("tensor '" + t.name + "' has dtype " + t.dtype + ", expected a float tensor");
  std::vector<float> out(t.v.rows * t.v.cols);
  visit_format(*t.fmt, [&]<class F>() {
    for (uint64_t r = 0; r < t.v.rows; ++r) F::decode_row(t.v, r, out.data() + r * t.v.cols);
  });
  return out;
}

std::vector<int32_t> tensor_binder::ids(const std::string& n, const dims_t& want, uint32_t bound) const {
  dsv4_tensor t = need(n, want);
  uint64_t count = 1;
  for (auto d : want) count *= d;
  std::vector<int32_t> out(count);
  for (uint64_t i = 0; i < count; ++i) {
    double v;
    if (t.int_bytes == 4) {
      int32_t x;
      std::memcpy(&x, t.raw + 4 * i, 4);
      v = x;
    } else if (t.int_bytes == 8) {
      int64_t x;
      std::memcpy(&x, t.raw + 8 * i, 8);
      v = double(x);
    } else {
      if (t.fmt != format::f32) throw usage_error("tensor '" + t.name + "' has dtype " + t.dtype + " (expected integers)");
      float x;
      std::memcpy(&x, t.raw + 4 * i, 4);
      v = x;
    }
    if (!(v >= 0 && v < bound && v == std::floor(v)))
      throw usage_error("tensor '" + t.name + "': entry " + std::to_string(i) + " = " + std::to_string(v) +
                        " is not an expert id below " + std::to_string(bound));
    out[i] = int32_t(v);
  }
  return out;
}

void tensor_binder::refuse(const std::string& n, const std::string& why) const {
  if (has(n)) throw usage_error("tensor " + src_.spelled(n) + " is present, but " + why);
}

expert_view bind_expert(const tensor_binder& b, const std::string& p, uint64_t inter, uint64_t dim) {
  const dsv4_matrix g = b.matrix(p + "w1.weight", inter, dim, true), u = b.matrix(p + "w3.weight", inter, dim, true),
                    d = b.matrix(p + "w2.weight", dim, inter, true);
  return expert_view{g.v, u.v, d.v, g.fmt, u.fmt, d.fmt};
}

}  // namespace cmfx::driver
