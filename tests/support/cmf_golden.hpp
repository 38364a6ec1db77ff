#pragma once
// The verified minimal CMF file of cmf-format.md §1.12, built with cmf_writer.
#include <string>
#include <vector>

#include "cmfx/io/cmf_writer.hpp"
#include "support/hex.hpp"

namespace cmfx::test {

inline const std::string kGoldenHeader =
    R"({"format":"cmf","version":2,"arch":{"arch_name":"tiny-test","hidden_size":64,"intermediate_size":64,)"
    R"("num_layers":1,"num_attention_heads":1,"num_kv_heads":1,"head_dim":64,"vocab_size":2,)"
    R"("layer_types":["FullAttention"],"rms_norm_eps":1e-6,"max_position_embeddings":64},"quant_type":"Q4_BLOCK"})";

inline const char* kGoldenQ4tpPayload =
    "a8eceebd7935224286caeede9b572322 53b8fdffce6924003185dbffef9c4602 2163b8edffcd7924113286dbfedf9b46 "
    "122164b8edffbd6924114286dbfedf9b 3ac8cb30 dec6cc30 c103 e003";

inline std::vector<uint8_t> golden_cmf() {
  cmf_writer w(kGoldenHeader);
  std::vector<uint8_t> ones(128);
  for (size_t i = 0; i < ones.size(); i += 2) {
    ones[i] = 0x00;
    ones[i + 1] = 0x3c;
  }
  w.add("model.norm.weight", cmf_dtype::f16, {64}, ones);
  w.add("w", cmf_dtype::q4tp, {2, 64}, from_hex(kGoldenQ4tpPayload));
  return w.to_bytes();
}

}  // namespace cmfx::test
