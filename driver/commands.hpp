#pragma once
// Every subcommand of the `cmfx` binary: its options (with documented defaults) and its entry point.
// main.cpp declares the flags once with CLI11 and fills these structs; nothing reads the environment.
#include <cstdint>
#include <string>
#include <vector>

#include "cmfx/kernels/act_precision.hpp"
#include "cmfx/vk/gemm_precision.hpp"
#include "model/cold_experts.hpp"
#include "model/prefill_experts.hpp"

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
  std::string arch = "v4";       // v4 (V4-Flash-0731 layout) | v41 (V4.1-Flash layout)
  std::string quant;             // CMF: q4tp (default) | q2tp | q8 | f16 | f32; release: native (default) | f32
  std::string layout = "cmf";    // cmf (cortiq names) | release (official safetensors names, FP8/FP4)
  uint64_t seed = 20260731;      // weights are a pure function of the seed
  bool stream = false;           // write with the streaming layout (leading gap) instead of in-memory
  std::string tokenizer;         // a tokenizer.json: the CMF vocab section, or copied beside the release shards
};
int run_make_toy(const make_toy_args& a);

/// `cmfx bench --synthetic`: the V4 graph on a Vulkan device at real dimensions with random weights (cmd_bench.cpp).
struct bench_args {
  std::string synthetic;          // v4-flash | tiny | v41-flash | v41-tiny
  std::string backend = "vulkan"; // vulkan (the GPU graphs) | cpu (the CPU graphs: run_bench_cpu)
  unsigned threads = 0;           // --threads, --backend cpu: worker threads of the graph and the roofline (0 = all)
  std::string weights = "q2tp";   // routed experts' format
  std::string expert_down;        // routed experts' w2 format (empty: --weights)
  // --fold-quant: default (the graph's: o) | none | o | u | both (dsv4_gpu_options::fold_o_q8 / fold_u_q8)
  std::string fold_quant = "default";
  std::string prefill_shared = "default";  // --prefill-shared: default | apart | stacked (dsv4_gpu_options::prefill_shared_apart)
  bool no_pipeline = false;  // --no-pipeline: nothing recorded ahead (dsv4/dsv41_gpu_options::pipeline = false)
  std::string fuse_route = "default";  // --fuse-route: default (on) | on | off (dsv4/dsv41_gpu_options)
  std::string shared_expert = "dense";  // --shared-expert: dense (--dense for all three) | routed (--weights, w2 --expert-down)
  std::string dense = "fp8_b128"; // attention / compressor / indexer projections, shared expert, head
  uint64_t prompt = 512, tokens = 256, ctx = 16384;
  uint32_t prefill_reps = 3;      // --prefill-reps: the prompt's prefill timed this many times (median reported)
  uint32_t layers = 0;            // 0: the preset's
  int device = -1;                // Vulkan device index (-1: best)
  uint64_t seed = 1;
  uint32_t variants = 0;          // --variants: distinct random matrices per role (0: the preset's; v4/v41-flash 1)
  uint64_t roofline_mib = 2048;   // streaming-read buffer for the roofline (capped at 1/8 of device memory and the largest allocation)
  bool far = true;                // also decode at the end of --ctx (after a seek)
  // Decode sampling: --temp 0 = greedy (the device's argmax); else temperature / top-p / min-p drawn on the device
  // (--sampling device, chained) or from the logits read back (host: cmfx::sampler per step).
  float temp = 0.0f, top_p = 1.0f, min_p = 0.0f;
  uint32_t top_k = 0;
  float repeat_penalty = 1.0f, presence_penalty = 0.0f, frequency_penalty = 0.0f;
  int32_t logprobs = -1;  // --logprobs: ≥ 0, each decode token's logprob and this many alternatives
  std::string sampling = "device";
  // --decode-chain: on = greedy (and device-sampled) decode chained on the device where the graph can (default);
  // off = every step run by itself (step_greedy / decode_sampled_each one step at a time), to time what chaining saves
  std::string decode_chain = "on";
  std::string act = "f32";        // expert activations: f32 | i8 (dsv4_gpu_options::expert_act; and dense_act)
  std::string dense_act;          // the decode's dense products f32 | i8 (empty: as act; dense_act)
  bool profile = false;           // --profile: per-phase device time of 16 decode steps (cpu: wall time per phase)
  uint64_t profile_at = 0;        // --profile-at: position of the profiled decode steps (0: --prompt)
  std::string vram_budget;        // --vram-budget: device bytes the model may take ("" = no limit)
  uint32_t copy_threads = 8;      // --copy-threads: host threads packing streamed experts (expert cache only)
  cold_experts cold = cold_experts::copy;  // --cold-experts: misses of the expert cache copied in or run on the CPU
  bool budget_keeps_chunks = false;  // --budget-keeps-chunks: the prefill chunks' scratch before resident experts
  double cold_margin = 1.0;       // --cold-margin: uses beyond the coldest slot's a miss needs to be copied in (cpu)
  uint64_t cpu_chunk = 64;          // --cpu-chunk: rows per chunk of the CPU experts (0 = static partition)
  // the prefill chunks' expert streaming under --vram-budget (chunk_streaming's defaults; diagnostics)
  bool pass_overlap = true;            // --pass-overlap / --no-pass-overlap: copies beside the previous pass's MoE
  std::string copy_queue = "transfer";  // --copy-queue: the pass copies on the compute | transfer queue
  std::string prefetch = "auto";       // --prefetch: device bytes of prefetched experts (auto | 0 | size)
  std::string prefetch_d2d = "compute";  // --prefetch-d2d: their copies into slots on the compute | transfer queue
  std::string staging = "cached";      // --staging: the upload rings write-combined | cached
  std::string pack = "stream";         // --pack: how the copy threads fill them (memcpy | stream)
  std::string cache_wait = "spin";  // --cache-wait: spin | block (the expert cache's per-layer waits; diagnostics)
  uint32_t prefill_chunk = 512;   // --prefill-chunk: positions per prefill recording (V4; 0/1 = token by token)
  gpu::gemm_precision gemm = gpu::gemm_precision::f16;  // --gemm: the prefill chunks' tiled GEMMs (f16 | f32)
  prefill_expert_mode prefill_experts = prefill_expert_mode::fastest;  // --prefill-experts: the prefill chunks' experts
  bool shuffle = true;            // --no-shuffle: f64 subgroup sums through subgroupAdd (comparisons)
  uint32_t mv_subgroups = 0;      // --mv-subgroups: batch-1 matvec target subgroups per dispatch (0: the default rule)
  uint32_t mv_rows_per_team = 0;  // --mv-rows-per-team: batch-1 matvec rows per subgroup (0: from the shape)
  uint32_t mv_pairs = 0;          // --mv-pairs: q2tp int8 row kernel, chunks per lane unit (1, 2; 0: chosen)
  uint32_t mv_sub = 0;            // --mv-sub: f32 row kernel, lanes per chunk (1, 2, 4; 0: chosen per format)
  uint32_t mv_x_source = 0;       // --mv-x-source: f32 row kernel, activations from the buffer (2) or registers (3)
  uint32_t mv_xreg_batches = 0;   // --mv-xreg-batches: register kernel, batches of rows per subgroup (0: chosen)
  uint32_t mv_concurrent = 0;     // --mv-concurrent: row-kernel rule inside concurrent groups (1, 2; 0: chosen)
  bool f64 = false;               // --f64: f64 accumulators where the device has f64 (gpu::device_options::float64)
  uint32_t moe_tails = 0;         // --moe-tails: 1 = the batch-1 int8 MoE in four dispatches (gpu::matvec_tuning::moe_tails)
  uint32_t moe_b1_rpt = 0, moe_b1_pairs = 0, moe_b1_unroll = 0, moe_b1_batches = 0;  // --moe-b1-*: the batch-1 int8 MoE's row split (gpu::matvec_tuning)
  uint32_t gemm_min_groups = 0;   // --gemm-min-groups: smaller dense GEMM tiles below N workgroups (gpu::matvec_tuning)
  uint32_t hc_tokens = 0;         // --hc-tokens: tokens per mHC block workgroup in prefill chunks (gpu::matvec_tuning)
  uint32_t gemm_warp_tile = 0;    // --gemm-warp-tile: the f16 GEMM's blocks per subgroup in 1 or 2 rows (0: 2) (gpu::matvec_tuning)
  uint32_t moe_i8_tc = 0;         // --moe-i8-tc: 1 = the prefill's int8 experts on moe_rows_g8.comp (gpu::matvec_tuning::moe_i8_tc)
  std::string shader_dir;         // --shader-dir: shaders read from this directory (kernel variants), not the built-in copies
  bool nontemporal = false;       // --nontemporal: weight loads with SPIR-V's Nontemporal hint (gpu::device_options)
  bool json = false;              // one JSON line at the end
};
int run_bench(const bench_args& a);
int run_bench_cpu(const bench_args& a);  // cmd_bench_cpu.cpp: run_bench with --backend cpu
/// The synthetic model's options from --synthetic, --weights, --expert-down, --dense, --layers, --seed and --variants
/// (one of the two is filled: v41 says which). Shared by both backends of `cmfx bench`.
struct dsv4_synth_options;
struct dsv41_synth_options;
bool bench_synth_options(const bench_args& a, dsv4_synth_options& so, dsv41_synth_options& so41);

struct model_run_options {
  unsigned threads = 0;  // 0 = all hardware threads
  act_precision matmul_act = act_precision::f32;  // --act: f32 (parity reference) | i8 (int8 activations)
  // --backend vulkan only:
  int device = -1;          // --device: Vulkan device index (-1 = the best)
  uint64_t max_ctx = 4096;  // positions the device state holds (run: --ctx)
  uint64_t vram_budget = 0; // --vram-budget: device bytes the model may take (0 = no limit: every expert resident)
  cold_experts cold = cold_experts::copy;  // --cold-experts: misses of the expert cache copied in or run on the CPU
  uint32_t copy_threads = 8;  // --copy-threads: host threads packing (and with --cold-experts cpu computing) experts
  bool budget_keeps_chunks = false;  // --budget-keeps-chunks: the prefill chunks' scratch before resident experts
  uint32_t prefill_chunk = 512;  // --prefill-chunk: V4 prompt positions per device recording (0/1: token by token)
  gpu::gemm_precision gemm = gpu::gemm_precision::f16;  // --gemm: the prefill chunks' tiled GEMMs (f16 | f32)
  prefill_expert_mode prefill_experts = prefill_expert_mode::fastest;  // --prefill-experts: the prefill chunks' experts
};

struct gpu_run_options;
/// The Vulkan runner's options (model/gpu_runner.hpp) from a command's model options; ctx = positions the device
/// state holds (the command's --ctx).
gpu_run_options gpu_run_options_of(const model_run_options& m, uint64_t ctx);

struct ppl_args {
  std::string model;      // CMF file or release-layout directory
  std::string ids_file;   // token ids, whitespace separated
  std::string text_file;  // or text, tokenized with the model's tokenizer (BOS first, no special tokens matched)
  std::string tokenizer;  // a tokenizer.json instead of the model's own (--file)
  uint64_t chunk = 512;   // tokens per forward call (bounds the [chunk, vocab] logits); 0 = all at once
  bool json = false;      // the result as one JSON object {"ppl", "tokens"} instead of the last line
  bool qat = false;       // QAT fake-quant steps on
  std::string backend = "cpu";  // cpu | vulkan (the whole graph on the GPU; model_opts.max_ctx = --ctx)
  model_run_options model_opts;
};
/// Prints progress on stderr and, as the last stdout line, `ppl <value> tokens <n>` (n = predicted tokens).
int run_ppl(const ppl_args& a);

struct run_args {
  std::string model;
  // Input: exactly one of these.
  std::string raw_ids;         // "0 5 9 ...": greedy ids out, speed on stdout (the model-graph contract)
  std::string prompt;          // -p: one prompt
  bool prompt_given = false;
  bool interactive = false;    // -i: a chat, one user message per stdin line
  // Prompt encoding.
  bool think = false;          // thinking mode (prompt ends with <think>); default chat mode (ends with </think>)
  bool raw = false;            // no chat template: the prompt is tokenized as is
  std::string system;          // system message
  std::string tokenizer;       // a tokenizer.json instead of the model's own
  // Sampling. Defaults as DeepSeek's own server ds4-server (spec serving.md §1.1): T 1, top-p 1, min-p 0.05.
  float temp = 1.0f;           // 0: greedy
  float top_p = 1.0f;
  int32_t top_k = 0;           // 0: off
  float min_p = 0.05f;
  float repeat_penalty = 1.0f; // 1: off
  float presence_penalty = 0.0f, frequency_penalty = 0.0f;  // OpenAI's, on the output's tokens; 0: off
  uint64_t seed = 0;           // turn k of -i samples with seed + k
  bool seed_given = false;     // else a random seed
  uint64_t n = 16;             // max tokens; --raw-ids default 16, text default: the rest of --ctx
  bool n_given = false;
  std::vector<std::string> stops;  // stop strings
  // Run.
  std::string backend = "cpu"; // cpu | vulkan (V4 models: the whole graph on the GPU, f32 activations, no --qat)
  uint64_t ctx = 4096;         // max context: prompt + generated tokens
  bool print_ids = false;      // prompt and generated ids on stderr
  bool verbose = false;        // load details, prefix reuse ("reused N tokens") on stderr
  bool qat = false;
  bool no_stop = false;        // keep going past EOS
  bool stats = false;          // --stats: expert-cache statistics at the end (--backend vulkan)
  std::string sampling = "device";  // --sampling: device (draws on the GPU where it can, the same choices) | host
  model_run_options model_opts;
};
/// -p / -i: streamed text on stdout, speed on stderr (cmd_run.cpp). --raw-ids: greedy decoding; prints the
/// generated ids and the prefill / decode speed on stdout (cmd_model.cpp).
int run_run(const run_args& a);

struct tokenize_args {
  std::string model;              // a CMF file or release directory whose tokenizer to use
  std::string tokenizer;          // or a tokenizer.json
  bool chat = false;              // render TEXT as one user message with the chat encoding
  bool think = false;             // with --chat: thinking mode (prompt ends with <think>)
  std::string text;               // tokenize
  std::vector<std::string> ids;   // detokenize: ids, or one JSON array
};
int run_tokenize(const tokenize_args& a);
int run_detokenize(const tokenize_args& a);

}  // namespace cmfx::driver
