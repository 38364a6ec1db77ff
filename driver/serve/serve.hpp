#pragma once
// `cmfx serve MODEL`: an OpenAI-compatible HTTP server (docs/SERVING.md). main.cpp registers the subcommand with
// register_serve() and dispatches to run_serve(); everything else lives in driver/serve/.
#include <cstdint>
#include <string>

#include "cmfx/kernels/act_precision.hpp"
#include "cmfx/vk/gemm_precision.hpp"
#include "model/cold_experts.hpp"

namespace CLI {
class App;
}

namespace cmfx::driver {

struct serve_args {
  std::string model;       // CMF file or release-layout directory
  std::string tokenizer;   // tokenizer.json; empty: the CMF vocab section, else MODEL_DIR/tokenizer.json
  std::string model_name;  // the id /v1/models reports and requests must name; empty: file name
  std::string host = "127.0.0.1";
  int port = 8080;                     // 0: any free port (the bound port is printed)
  unsigned parallel = 1;               // slots: sequences decoded concurrently (round-robin)
  unsigned queue = 16;                 // requests waiting for a slot before 503
  uint64_t ctx = 4096;                 // context per slot: prompt + completion tokens
  uint64_t prefill_chunk = 256;        // prompt tokens per scheduler step (interleaves prefill with decode)
  double timeout_s = 600.0;            // per request, from arrival (queue time included)
  uint64_t max_body_bytes = 4u << 20;  // request body limit (413 beyond)
  std::string api_key;                 // required as `Authorization: Bearer KEY` on /v1/*
  std::string api_key_file;            // first line of this file is the key
  std::string cors_origin;             // Access-Control-Allow-Origin value; empty: no CORS headers
  bool log_prompts = false;            // request log lines include the prompt text
  bool thinking_default = true;        // chat requests think unless they say otherwise
  bool prompt_snapshot = true;         // keep each slot's state at the end of its last prompt (prefix reuse)
  std::string sampling = "device";     // --sampling: device (sampled requests drawn on the GPU, chained) | host
  unsigned threads = 0;                // model worker threads (0 = all cores)
  unsigned http_threads = 0;           // HTTP worker threads (0 = parallel + queue + 4)
  bool qat = false;                    // QAT fake-quant steps (as `cmfx run --qat`)
  act_precision matmul_act = act_precision::f32;  // --act (as `cmfx run --act`): f32 | i8
  // --backend vulkan: the whole graph on a GPU (V4 and V4.1), one slot (--parallel 1)
  std::string backend = "cpu";         // cpu | vulkan
  int device = -1;                     // Vulkan device index (-1 = the best)
  cold_experts cold = cold_experts::copy;  // --cold-experts: misses of the expert cache copied in or run on the CPU
  uint32_t copy_threads = 8;           // --copy-threads: host threads packing (and computing) the cache's experts
  bool budget_keeps_chunks = false;    // --budget-keeps-chunks: the prefill chunks' scratch before resident experts
  uint64_t vram_budget = 0;            // device bytes the model may take (0 = no limit: every expert resident)
  gpu::gemm_precision gemm = gpu::gemm_precision::f16;  // --gemm (as `cmfx run --gemm`)
};

/// Declares the `serve` subcommand and its flags (defaults from serve_args) on app.
CLI::App* register_serve(CLI::App& app, serve_args& a);
/// Loads the model and serves until SIGTERM/SIGINT; 0 after a clean shutdown, 2 on a start-up error.
int run_serve(const serve_args& a);

}  // namespace cmfx::driver
