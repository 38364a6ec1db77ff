#pragma once
// Tensor names of DeepSeek-V4: the official release names (after the official convert.py) and cortiq's CMF
// names (cmf-format.md §4.1, infosave2007/cmf:crates/cortiq-cli/src/convert.rs `canon_name`).
#include <string>

namespace cmfx::driver {

/// CMF name of an official-release tensor name ("layers.3.ffn.experts.7.w1.weight" ->
/// "model.layers.3.mlp.experts.7.gate_proj.weight"). Names with no mapping are returned unchanged.
std::string dsv4_cmf_name(const std::string& release_name);

}  // namespace cmfx::driver
