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
  bool state = false;         // also print the per-sequence state size of a DeepSeek-V4 model
  uint64_t ctx = 4096;        // context length for --state
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
  std::string quant;             // CMF: q4tp (default) | q2tp | q8 | f16 | f32; release: native (default) | f32
  std::string layout = "cmf";    // cmf (cortiq names) | release (official safetensors names, FP8/FP4)
  uint64_t seed = 20260731;      // weights are a pure function of the seed
  bool stream = false;           // write with the streaming layout (leading gap) instead of in-memory
};
int run_make_toy(const make_toy_args& a);

struct model_run_options {
  unsigned threads = 0;  // 0 = all hardware threads
};

struct ppl_args {
  std::string model;     // CMF file or release-layout directory
  std::string ids_file;  // token ids, whitespace separated
  uint64_t chunk = 512;  // tokens per forward call (bounds the [chunk, vocab] logits); 0 = all at once
  bool qat = false;      // QAT fake-quant steps on
  model_run_options model_opts;
};
/// Prints progress on stderr and, as the last stdout line, `ppl <value> tokens <n>` (n = predicted tokens).
int run_ppl(const ppl_args& a);

struct run_args {
  std::string model;
  std::string raw_ids;  // "0 5 9 ..."
  uint64_t n = 16;      // tokens to generate
  bool qat = false;
  bool no_stop = false;  // keep going past EOS
  model_run_options model_opts;
};
/// Greedy decoding; prints the generated ids and the prefill / decode speed.
int run_run(const run_args& a);

}  // namespace cmfx::driver
