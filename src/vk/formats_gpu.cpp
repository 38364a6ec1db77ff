// The GLSL preamble of a weight format, generated from its C++ trait (include/cmfx/formats/): one source of
// truth for block sizes, byte widths, code bits, rungs, parameter bytes, nibble order, value offsets and the
// decoded value of every E2M1 / E4M3 code. Also the plane byte ranges of a row slice.
#include <cstdio>
#include <sstream>
#include <type_traits>

#include "cmfx/core/error.hpp"
#include "cmfx/formats/format_list.hpp"
#include "formats_gpu.hpp"

namespace cmfx::gpu {

namespace {

struct defines {
  std::ostringstream s;
  void def(const std::string& name, uint64_t v) { s << "#define " << name << ' ' << v << '\n'; }
  void def_i(const std::string& name, int64_t v) { s << "#define " << name << ' ' << v << '\n'; }
  void def_f(const std::string& name, float v) {
    char b[48];
    std::snprintf(b, sizeof b, "%.9g", double(v));
    std::string t = b;
    if (t.find_first_of(".e") == std::string::npos) t += ".0";
    s << "#define " << name << ' ' << t << '\n';
  }
};

std::string upper(std::string_view n) {
  std::string u(n);
  for (char& ch : u) ch = char(ch >= 'a' && ch <= 'z' ? ch - 'a' + 'A' : ch);
  return u;
}

template <class F>
constexpr uint32_t chunk_of() {
  return F::elem_bits >= 8 ? 128 / F::elem_bits : F::block_elems;
}

template <class F>
void emit(defines& d, scale_encoding enc) {
  d.def("FMT_" + upper(F::name), 1);
  d.def("FMT_ID", uint64_t(F::id));
  d.def("FMT_BLOCK_ELEMS", F::block_elems);
  d.def("FMT_BLOCK_ROWS", F::block_rows);
  d.def("FMT_BLOCK_BYTES", F::block_bytes);
  d.def("FMT_ELEM_BITS", F::elem_bits);
  d.def("CHUNK", chunk_of<F>());
  // Scalar element types every decoder may use (f16 scales, UE8M0 scales, bf16).
  d.def("HALF_EXP_BITS", uint64_t(half::exp_bits));
  d.def("HALF_MAN_BITS", uint64_t(half::man_bits));
  d.def_i("HALF_BIAS", half::bias);
  d.def("BF16_TOTAL_BITS", uint64_t(bfloat16::total_bits));
  static_assert(ue8m0::special == nan_inf::fn && ue8m0::man_bits == 0, "UE8M0: NaN is the all-ones code");
  d.def("UE8M0_NAN_CODE", ue8m0::exp_max_code);
  d.def_i("UE8M0_BIAS", ue8m0::bias);
  if constexpr (requires { F::row_scale_bytes; }) {
    d.def("Q8_ROW_SCALE_BYTES", F::row_scale_bytes);
    if constexpr (requires { F::col_scale_bytes; }) d.def("Q8_COL_SCALE_BYTES", F::col_scale_bytes);
  }
  if constexpr (requires { F::tiled; }) {
    d.def("Q4_GROUP", F::block_elems);
    d.def("Q4_GROUP_BYTES", F::group_bytes);
    d.def("Q4_TILE_BYTES", F::block_bytes);
    d.def("Q4_GROUP_SCALE_BYTES", F::group_scale_bytes);
    d.def_f("Q4_OFFSET", F::value_offset);
    d.def("Q4_TILED", F::tiled ? 1 : 0);
    d.def("Q4_LOW_FIRST", F::low_bits_first ? 1 : 0);
  }
  if constexpr (requires { F::code0_zero; }) {
    d.def("LADDER_GROUP", ladder::group_elems);
    d.def("LADDER_RUNGS", ladder::rungs);
    d.def("LADDER_CODE_BITS", ladder::code_bits);
    d.def("LADDER_PARAM_BYTES", ladder::param_bytes);
    d.def("LADDER_VALUE_BYTES", F::value_bytes);
    d.def("LADDER_ELEM_BITS", F::elem_bits);
    d.def_f("LADDER_OFFSET", F::value_offset);
    // formats.glsl decode8_h builds code − offset as (512 + code) − (512 + offset) in f16 (ulp 0.5 at 512)
    static_assert(F::value_offset * 2.0f == float(int(F::value_offset * 2.0f)) && F::value_offset >= 0.0f &&
                      F::value_offset < 512.0f && (1u << F::elem_bits) <= 512u,
                  "ladder f16 decode: the offset must be a multiple of 0.5 and the codes below 512");
    d.def("LADDER_CODE0_ZERO", F::code0_zero ? 1 : 0);
    d.def("LADDER_LOW_FIRST", F::low_bits_first ? 1 : 0);
  }
  if constexpr (requires { typename F::scale_elem; }) {
    static_assert(std::is_same_v<typename F::scale_elem, ue8m0>);
    d.def("SCALE_F32", enc == scale_encoding::f32 ? 1 : 0);
    if constexpr (std::is_same_v<typename F::elem, e2m1>) {
      d.def("MX_BLOCK", F::block_elems);
      d.def("MX_BLOCK_BYTES", F::block_bytes);
      d.def("MX_LOW_FIRST", F::low_bits_first ? 1 : 0);
    } else {
      static_assert(std::is_same_v<typename F::elem, e4m3>);
      d.def("FP8_TILE", F::block_elems);
    }
  }
}

}  // namespace

std::string format_defines(format f, scale_encoding enc) {
  defines d;
  if (!visit_format(f, [&]<class F>() { emit<F>(d, enc); })) throw usage_error("format_defines: unknown format");
  return d.s.str();
}

std::string act_target_defines(format f) {
  defines d;
  const bool ok = visit_format(f, [&]<class F>() {
    if constexpr (requires { F::code0_zero; }) {  // the ladders (q4tp, q2tp): planes of EPB elements per byte
      d.def("ACT_T_MX", 0);
      d.def("ACT_T_EPB", 8 / F::elem_bits);
      d.def("ACT_T_LOW_FIRST", F::low_bits_first ? 1 : 0);
      d.def_i("ACT_T_OFF2", int64_t(2.0f * F::value_offset));  // a multiple of 0.5 (emit's static_assert)
    } else if constexpr (F::id == format::mxfp4) {
      d.def("ACT_T_MX", 1);  // natural order, signed values (no offset)
      d.def_i("ACT_T_OFF2", 0);
    } else {
      throw usage_error("act_target_defines: int8 activations are defined for q4tp, q2tp and MXFP4, not " +
                        std::string(F::name));
    }
  });
  if (!ok) throw usage_error("act_target_defines: unknown format");
  return d.s.str();
}

namespace detail {

namespace {
constexpr uint32_t tab_exp2 = 0, tab_e2m1 = 65536, tab_e4m3 = tab_e2m1 + e2m1::code_count;
template <class Elem>
void append_codes(std::vector<float>& t) {
  for (uint32_t c = 0; c < Elem::code_count; ++c) t.push_back(Elem::decode(typename Elem::storage(c)));
}
}  // namespace

std::vector<float> host_tables() {
  std::vector<float> t(ladder::exp2f_of_f16(), ladder::exp2f_of_f16() + 65536);
  append_codes<e2m1>(t);
  append_codes<e4m3>(t);
  return t;
}

std::string tab_defines() {
  return "#define TAB_EXP2 " + std::to_string(tab_exp2) + "\n#define TAB_E2M1 " + std::to_string(tab_e2m1) +
         "\n#define TAB_E4M3 " + std::to_string(tab_e4m3) + "\n";
}

format_gpu gpu_traits(format f) {
  format_gpu g;
  visit_format(f, [&]<class F>() {
    g.chunk = chunk_of<F>();
    g.main_align = f == format::q4t ? 1 : (f == format::q2tp ? 8 : 16);
  });
  return g;
}

slice slice_of(const gpu_matrix& w, uint64_t r0, uint64_t r1) {
  slice s;
  const uint64_t R = w.rows, C = w.cols, n = r1 - r0;
  const uint64_t sb = w.scale_enc == scale_encoding::f32 ? 4 : 1;
  visit_format(w.fmt, [&]<class F>() {
    if constexpr (requires { F::code0_zero; }) {  // q4tp, q2tp
      const ladder::planes p(R, C, F::value_bytes);
      s.off[0] = r0 * p.gpr * F::value_bytes, s.bytes[0] = n * p.gpr * F::value_bytes;
      s.off[1] = p.params + ladder::param_bytes * r0, s.bytes[1] = ladder::param_bytes * n;
      s.off[2] = p.codes + r0 * p.stride, s.bytes[2] = n * p.stride;
      s.aux0 = uint32_t(p.gpr), s.aux1 = uint32_t(p.stride);
    } else if constexpr (requires { F::tiled; }) {  // q4_block, q4t: flat groups over the tensor
      const uint64_t g0 = r0 * C / F::block_elems, g1 = ceil_div(r1 * C, F::block_elems);
      const uint64_t G = ceil_div(R * C, F::block_elems);
      s.e_off = uint32_t(r0 * C - g0 * F::block_elems);
      if (F::tiled) {
        s.off[0] = F::block_bytes * g0, s.bytes[0] = F::block_bytes * (g1 - g0);
      } else {
        s.off[0] = F::group_bytes * g0, s.bytes[0] = F::group_bytes * (g1 - g0);
        s.off[1] = F::group_bytes * G + F::group_scale_bytes * g0, s.bytes[1] = F::group_scale_bytes * (g1 - g0);
      }
    } else if constexpr (requires { F::row_scale_bytes; }) {  // q8_row, q8_2f
      s.off[0] = r0 * C, s.bytes[0] = n * C;
      s.off[1] = R * C + F::row_scale_bytes * r0, s.bytes[1] = F::row_scale_bytes * n;
      if constexpr (requires { F::col_scale_bytes; })
        s.off[2] = R * C + F::row_scale_bytes * R, s.bytes[2] = F::col_scale_bytes * C;
    } else if constexpr (requires { typename F::scale_elem; }) {  // mxfp4, fp8 tiles: scales in w.scale
      s.off[0] = r0 * C * F::elem_bits / 8, s.bytes[0] = n * C * F::elem_bits / 8;
      s.in_scale[1] = true;
      if (F::block_rows == 1) {  // one scale per block of a row
        const uint64_t spr = C / F::block_elems;
        s.off[1] = r0 * spr * sb, s.bytes[1] = n * spr * sb;
        s.aux0 = uint32_t(spr);
      } else {  // tiles: all scales (tiny), addressed by the global row
        s.off[1] = 0, s.bytes[1] = F::scale_bytes(R, C) * sb;
        s.aux0 = uint32_t(ceil_div(C, F::block_elems));
      }
    } else {  // dense
      s.off[0] = r0 * C * F::block_bytes, s.bytes[0] = n * C * F::block_bytes;
    }
  });
  return s;
}

uint64_t row_bytes(const gpu_matrix& w) {
  const slice one = slice_of(w, 0, 1);
  uint64_t m = 0;
  for (int i = 0; i < 3; ++i)
    if (!(w.fmt == format::q8_2f && i == 2) && !(one.in_scale[i] && w.fmt != format::mxfp4)) m = std::max(m, one.bytes[i]);
  return m + 64;  // + a group straddling the slice edge (flat q4)
}

uint64_t fixed_bytes(const gpu_matrix& w) {
  const slice one = slice_of(w, 0, 1);
  if (w.fmt == format::q8_2f) return one.bytes[2];
  if (w.fmt == format::fp8_b128 || w.fmt == format::fp8_b32) return one.bytes[1];
  return 0;
}

}  // namespace detail
}  // namespace cmfx::gpu
