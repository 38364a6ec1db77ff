// The flags of `cmfx serve` (defaults come from serve_args; docs/SERVING.md lists them).
#include <CLI/CLI.hpp>

#include "act_flag.hpp"
#include "byte_size.hpp"
#include "serve/serve.hpp"

namespace cmfx::driver {

CLI::App* register_serve(CLI::App& app, serve_args& a) {
  auto* c = app.add_subcommand("serve", "OpenAI-compatible HTTP server for a DeepSeek-V4 or V4.1 model (docs/SERVING.md)");
  c->add_option("model", a.model, "CMF file or release-layout directory")->required();
  c->add_option("--tokenizer", a.tokenizer,
                "tokenizer.json (default: the CMF vocab section, else tokenizer.json next to the model)");
  c->add_option("--model-name", a.model_name, "Model id in /v1/models and requests (default: the file name)");
  c->add_option("--host", a.host, "Address to bind")->default_val(a.host);
  c->add_option("--port", a.port, "TCP port (0 = any free port)")->check(CLI::Range(0, 65535))->default_val(a.port);
  c->add_option("--parallel", a.parallel, "Slots: requests decoded concurrently")
      ->check(CLI::Range(1u, 256u))
      ->default_val(a.parallel);
  c->add_option("--queue", a.queue, "Requests that may wait for a slot; more get 503 + Retry-After")
      ->check(CLI::Range(0u, 65536u))
      ->default_val(a.queue);
  c->add_option("--ctx", a.ctx, "Context length per slot (prompt + completion tokens)")
      ->check(CLI::Range(uint64_t{2}, uint64_t{1} << 24))
      ->default_val(a.ctx);
  c->add_option("--prefill-chunk", a.prefill_chunk,
                "Prompt tokens per scheduler step (--backend vulkan: also the device's prefill chunk; with "
                "--vram-budget and not given: min(2048, --ctx))")
      ->check(CLI::Range(uint64_t{1}, uint64_t{1} << 20))
      ->default_val(a.prefill_chunk);
  c->add_option("--timeout-s", a.timeout_s, "Per-request time limit in seconds, queueing included")
      ->check(CLI::Range(0.001, 1e7))
      ->default_val(a.timeout_s);
  c->add_option("--max-body-bytes", a.max_body_bytes, "Largest request body (413 beyond)")
      ->check(CLI::Range(uint64_t{1024}, uint64_t{1} << 32))
      ->default_val(a.max_body_bytes);
  auto* key = c->add_option("--api-key", a.api_key, "Require `Authorization: Bearer KEY` on /v1/* (visible in ps)");
  c->add_option("--api-key-file", a.api_key_file, "Read the API key from the first line of this file")->excludes(key);
  c->add_option("--cors-origin", a.cors_origin, "Send Access-Control-Allow-Origin with this value (default: no CORS)");
  c->add_flag("--log-prompts", a.log_prompts, "Include the prompt text in the request log on stderr");
  c->add_flag("--thinking,!--no-thinking", a.thinking_default,
              "Default thinking mode of chat requests that do not choose (default: on, as the DeepSeek API)");
  c->add_option("--sampling", a.sampling,
                 "--backend vulkan: device = a lone request without penalties, top-k or logprobs draws its tokens on the "
                 "GPU, chained (the same choices as the host's sampler); host = logits read back every step")
      ->check(CLI::IsMember({"device", "host"}))->default_val(a.sampling);
  c->add_flag("--prompt-snapshot,!--no-prompt-snapshot", a.prompt_snapshot,
              "Keep a copy of each slot's state at the end of its last prompt for prefix reuse (default: on)");
  c->add_option("--threads", a.threads, "Model worker threads (0 = all cores)")->default_val(a.threads);
  c->add_option("--http-threads", a.http_threads, "HTTP worker threads (0 = parallel + queue + 4)")
      ->default_val(a.http_threads);
  c->add_flag("--qat", a.qat, "Enable the QAT fake-quant steps of the reference (FP8 KV, FP4 indexer, FP8 act)");
  add_act_flag(c, a.matmul_act);
  c->add_option("--backend", a.backend,
                "cpu | vulkan (V4 and V4.1: the whole graph on the GPU; one sequence at a time, --parallel 1)")
      ->check(CLI::IsMember({"cpu", "vulkan"}))
      ->default_val(a.backend);
  c->add_option("--device", a.device, "Vulkan device index for --backend vulkan (-1 = best)")->default_val(a.device);
  c->add_option_function<std::string>(
      "--vram-budget",
      [&a](const std::string& v) {
        try {
          a.vram_budget = parse_byte_size(v, "--vram-budget");
        } catch (const std::exception& e) {
          throw CLI::ValidationError(e.what());
        }
      },
      "--backend vulkan: device memory the model may take (e.g. 96G); experts that do not fit are cached and copied "
      "in per token, with their hit rate and bytes moved on /metrics (default: no limit)");
  add_gemm_flag(c, a.gemm);
  add_cold_experts_flag(c, a.cold);
  add_budget_keeps_chunks_flag(c, a.budget_keeps_chunks);
  add_copy_threads_flag(c, a.copy_threads);
  return c;
}

}  // namespace cmfx::driver
