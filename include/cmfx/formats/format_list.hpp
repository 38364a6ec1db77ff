#pragma once
/// @file format_list.hpp
/// @brief THE list of weight formats. Typed tests, benchmarks, CPU kernel instantiations and (later) GLSL
///        specialisations are all generated from `all_formats`; adding a format = one header + one line here.
#include "cmfx/core/type_list.hpp"
#include "cmfx/formats/dense.hpp"
#include "cmfx/formats/ladder.hpp"
#include "cmfx/formats/mx.hpp"
#include "cmfx/formats/q4.hpp"
#include "cmfx/formats/q8.hpp"

namespace cmfx {

using all_formats = type_list<fmt_f32, fmt_f16, fmt_bf16, fmt_q8_row, fmt_q8_2f, fmt_q4_block, fmt_q4t, fmt_q4tp,
                              fmt_q2tp, fmt_mxfp4, fmt_fp8_b128, fmt_fp8_b32>;

template <class... Fs>
constexpr bool all_weight_formats(type_list<Fs...>) {
  return (WeightFormat<Fs> && ...);
}
static_assert(all_weight_formats(all_formats{}), "every entry of all_formats must satisfy WeightFormat");

/// Name of a format value, from the list (no second table to keep in sync).
inline std::string_view format_name(format f) {
  std::string_view n = "?";
  for_each_type(all_formats{}, [&]<class F>() {
    if (F::id == f) n = F::name;
  });
  return n;
}

/// Calls fn.template operator()<F>() for the trait F whose id is f. Returns false if none matched.
template <class Fn>
bool visit_format(format f, Fn&& fn) {
  bool hit = false;
  for_each_type(all_formats{}, [&]<class F>() {
    if (!hit && F::id == f) {
      hit = true;
      fn.template operator()<F>();
    }
  });
  return hit;
}

}  // namespace cmfx
