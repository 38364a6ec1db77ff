// libFuzzer target for the CMF reader: parse, then touch everything a caller may touch (hash every payload,
// decode the first row of every computable tensor, read the optional sections). Only input_error and
// usage_error may escape the reader; anything else (a crash, an ASan/UBSan report) is a finding.
#include <cstdint>
#include <vector>

#include "cmfx/formats/format_list.hpp"
#include "cmfx/io/cmf_reader.hpp"
#include "cmfx/io/cmf_verify.hpp"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  try {
    const auto f = cmfx::cmf_file::parse({data, size}, "fuzz.cmf");
    cmfx::verify_options o;
    o.threads = 1;
    volatile uint64_t sink = cmfx::verify(f, o).problems.size();
    sink = sink + f.vocab().size() + f.masks().size() + f.index_section().size();
    std::vector<float> row;
    for (const auto& t : f.tensors()) {
      try {
        const cmfx::matrix_view v = t.view();
        if (v.rows == 0 || v.cols == 0 || v.cols > (1u << 16)) continue;
        row.assign(v.cols, 0.0f);
        cmfx::visit_format(*t.weight_format(), [&]<class F>() {
          if (F::shape_ok(v.rows, v.cols)) F::decode_row(v, v.rows - 1, row.data());
        });
        sink = sink + uint64_t(row[0] != 0.0f);
      } catch (const cmfx::usage_error&) {
      }
    }
  } catch (const cmfx::input_error&) {
  }
  return 0;
}
