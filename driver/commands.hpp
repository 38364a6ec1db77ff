#pragma once
// Every subcommand of the `cmfx` binary: its options (with documented defaults) and its entry point.
// main.cpp declares the flags once with CLI11 and fills these structs; nothing reads the environment.
#include <cstdint>
#include <string>

namespace cmfx::driver {

struct info_args {
  std::string path;         // a .cmf file, a .safetensors file, or a checkpoint directory
  bool json = false;        // one JSON object on stdout instead of text
  bool list_tensors = false;  // text mode: also list every tensor
};
int run_info(const info_args& a);

struct verify_args {
  std::string path;
  unsigned threads = 0;  // 0 = all hardware threads
  bool quiet = false;    // no progress bar
};
int run_verify(const verify_args& a);

struct make_toy_args {
  std::string out = "toy-v4.cmf";
  std::string arch = "v4";       // v4 (V4-Flash-0731 layout); v41 arrives with the V4.1 issue
  std::string quant = "q4tp";    // q4tp | q2tp | q8 | f16: dtype of the 2-D weights (expert gate/up for q2tp)
  std::string layout = "cmf";    // cmf (cortiq names) | release (official safetensors names, FP8/FP4)
  uint64_t seed = 20260731;      // weights are a pure function of the seed
  bool stream = false;           // write with the streaming layout (leading gap) instead of in-memory
};
int run_make_toy(const make_toy_args& a);

}  // namespace cmfx::driver
