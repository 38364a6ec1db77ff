// The `cmfx` binary: flag declarations (name, default, help) for every subcommand, then dispatch.
#include <CLI/CLI.hpp>
#include <cstdio>
#include <exception>

#include "act_flag.hpp"
#include "byte_size.hpp"
#include "cmfx/vk/kernels.hpp"
#include "commands.hpp"
#include "serve/serve.hpp"

int main(int argc, char** argv) {
  using namespace cmfx::driver;
  CLI::App app{"cmfx: DeepSeek-V4-Flash / V4.1-Flash inference from CMF and the official release files"};
  app.require_subcommand(1);
  app.set_version_flag("--version", "cmfx 0.1.0");
  auto byte_size_flag = [](const std::string& v) {
    try {
      return parse_byte_size(v, "--vram-budget");
    } catch (const std::exception& e) {
      throw CLI::ValidationError(e.what());
    }
  };

  info_args info;
  auto* ci = app.add_subcommand("info", "Describe a model file: architecture, tensors, dtype histogram, config");
  ci->add_option("path", info.path, "CMF file, .safetensors file or checkpoint directory")->required();
  ci->add_flag("--json", info.json, "Print one JSON object (architecture, tensors, dtypes, config)");
  ci->add_flag("--tensors", info.list_tensors, "Also list every tensor (text mode)");
  ci->add_flag("--state", info.state, "Also print the per-sequence state (KV cache) size of a DeepSeek-V4 model");
  ci->add_option("--ctx", info.ctx, "Context length for --state")->default_val(info.ctx);

  verify_args ver;
  auto* cv = app.add_subcommand("verify", "Check every stored hash of a CMF file (exit 0 ok, 1 corrupt, 2 unreadable)");
  cv->add_option("path", ver.path, "CMF file")->required();
  cv->add_option("--threads", ver.threads, "Hashing threads (0 = all cores)")->default_val(0);
  cv->add_flag("--quiet", ver.quiet, "No progress bar");

  make_toy_args toy;
  auto* ct = app.add_subcommand("make-toy", "Write the deterministic toy model (real tensor names, tiny dimensions)");
  ct->add_option("--out", toy.out, "Output file (.cmf) or directory (release layout)")->default_val(toy.out);
  ct->add_option("--arch", toy.arch, "Architecture: v4 (V4-Flash-0731) | v41 (V4.1-Flash)")->check(CLI::IsMember({"v4", "v41"}))->default_val(toy.arch);
  ct->add_option("--quant", toy.quant,
                 "Weight dtype: CMF q4tp (default) | q2tp | q8 | f16 | f32; release native (default, FP8 + FP4) | f32")
      ->check(CLI::IsMember({"q4tp", "q2tp", "q8", "f16", "f32", "native"}));
  ct->add_option("--layout", toy.layout, "cmf | release")->check(CLI::IsMember({"cmf", "release"}))
      ->default_val(toy.layout);
  ct->add_option("--seed", toy.seed, "Weight seed")->default_val(toy.seed);
  ct->add_flag("--stream", toy.stream, "Use the streaming CMF layout (leading gap)");
  ct->add_option("--tokenizer", toy.tokenizer,
                 "A tokenizer.json to ship with the toy: the CMF vocab section, or tokenizer.json beside the shards");

  ppl_args ppl;
  auto* cp = app.add_subcommand("ppl", "Teacher-forced perplexity of a DeepSeek-V4 model over token ids or a text file");
  cp->add_option("model", ppl.model, "CMF file or release-layout directory")->required();
  auto* ppl_ids = cp->add_option("--ids-file", ppl.ids_file, "File of token ids separated by whitespace");
  auto* ppl_text = cp->add_option("--file", ppl.text_file,
                                  "Text file, tokenized with the model's tokenizer (BOS first, no special tokens)");
  ppl_ids->excludes(ppl_text);
  cp->add_option("--tokenizer", ppl.tokenizer, "tokenizer.json to use instead of the model's own (--file)");
  cp->add_option("--chunk", ppl.chunk,
                 "Tokens per forward call (0 = the whole file at once; bounds the [chunk, vocab] logits; the file is "
                 "one prefill whatever the chunk)")
      ->default_val(ppl.chunk);
  cp->add_option("--threads", ppl.model_opts.threads, "Worker threads (0 = all cores)")->default_val(0);
  add_act_flag(cp, ppl.model_opts.matmul_act);
  cp->add_option("--backend", ppl.backend,
                 "cpu | vulkan (V4 / V4.1: the whole graph on the GPU, prompts in prefill chunks)")
      ->check(CLI::IsMember({"cpu", "vulkan"}))->default_val(ppl.backend);
  cp->add_option("--device", ppl.model_opts.device, "Vulkan device index for --backend vulkan (-1 = best)")
      ->default_val(ppl.model_opts.device);
  cp->add_option("--ctx", ppl.model_opts.max_ctx, "--backend vulkan: positions the device state holds (>= the tokens)")
      ->default_val(ppl.model_opts.max_ctx);
  cp->add_option("--prefill-chunk", ppl.model_opts.prefill_chunk,
                 "--backend vulkan: positions per device recording (0 or 1: token by token)")
      ->default_val(ppl.model_opts.prefill_chunk)
      ->check(CLI::Range(0u, 4096u));
  add_gemm_flag(cp, ppl.model_opts.gemm);
  add_prefill_experts_flag(cp, ppl.model_opts.prefill_experts);
  cp->add_flag("--json", ppl.json, "Print the result as one JSON object {\"ppl\": value, \"tokens\": n}");
  cp->add_flag("--qat", ppl.qat, "Enable the QAT fake-quant steps of the reference (FP8 KV, FP4 indexer, FP8 act)");

  run_args run;
  auto* cr = app.add_subcommand("run", "Generate text with a DeepSeek-V4 model (-p PROMPT, -i chat) or continue raw ids");
  cr->add_option("model", run.model, "CMF file or release-layout directory")->required();
  auto* run_p = cr->add_option("-p,--prompt", run.prompt, "Prompt (a user message in the chat template unless --raw)");
  auto* run_i = cr->add_flag("-i,--interactive", run.interactive,
                             "Chat: one user message per stdin line, history kept, /reset clears it, EOF ends");
  auto* run_ids = cr->add_option("--raw-ids", run.raw_ids, "Greedy continuation of these token ids (ids out, speed on stdout)");
  run_p->excludes(run_i)->excludes(run_ids);
  run_i->excludes(run_ids);
  cr->add_flag("--think", run.think, "Thinking mode (prompt ends with <think>; reasoning on stderr); default chat mode");
  cr->add_flag("--raw", run.raw, "No chat template: tokenize the prompt as is (special tokens matched, no BOS added)");
  cr->add_option("--system", run.system, "System message");
  cr->add_option("--tokenizer", run.tokenizer, "tokenizer.json to use instead of the model's own");
  cr->add_option("--temp", run.temp, "Temperature (0 = greedy)")->default_val(run.temp);
  cr->add_option("--top-p", run.top_p, "Nucleus sampling mass (1 = off)")->default_val(run.top_p);
  cr->add_option("--top-k", run.top_k, "Keep the k most likely tokens (0 = off)")->default_val(run.top_k);
  cr->add_option("--min-p", run.min_p, "Drop tokens below min-p times the top probability (0 = off)")->default_val(run.min_p);
  cr->add_option("--repeat-penalty", run.repeat_penalty, "Repetition penalty on prompt and output tokens (1 = off)")
      ->default_val(run.repeat_penalty);
  cr->add_option("--presence-penalty", run.presence_penalty,
                 "Subtracted from the logit of every token the output holds (OpenAI's; 0 = off)")
      ->default_val(run.presence_penalty);
  cr->add_option("--frequency-penalty", run.frequency_penalty,
                 "Subtracted from a token's logit once per time the output holds it (OpenAI's; 0 = off)")
      ->default_val(run.frequency_penalty);
  auto* run_seed = cr->add_option("--seed", run.seed, "Sampling seed (default: random); same seed, same output");
  auto* run_n = cr->add_option("-n,--max-tokens", run.n,
                               "Tokens to generate (default: 16 with --raw-ids, else until EOS or --ctx is full)");
  cr->add_option("--stop", run.stops, "Stop string (repeatable); the text before it is kept")->allow_extra_args(false);
  cr->add_option("--backend", run.backend, "cpu | vulkan (V4 models: the whole graph on the GPU)")
      ->check(CLI::IsMember({"cpu", "vulkan"}))->default_val(run.backend);
  cr->add_option("--device", run.model_opts.device, "Vulkan device index for --backend vulkan (-1 = best)")
      ->default_val(run.model_opts.device);
  cr->add_option("--threads", run.model_opts.threads, "Worker threads (0 = all cores)")->default_val(0);
  add_act_flag(cr, run.model_opts.matmul_act);
  cr->add_option_function<std::string>(
        "--vram-budget", [&](const std::string& v) { run.model_opts.vram_budget = byte_size_flag(v); },
        "--backend vulkan: device memory the model may take (e.g. 96G); experts that do not fit are cached and "
        "copied in per token (default: no limit)");
  cr->add_option("--prefill-chunk", run.model_opts.prefill_chunk,
                 "--backend vulkan: prompt positions per device recording (0 or 1: token by token; with --vram-budget "
                 "and not given: min(2048, --ctx))")
      ->default_val(run.model_opts.prefill_chunk)
      ->check(CLI::Range(0u, 4096u));
  add_gemm_flag(cr, run.model_opts.gemm);
  add_prefill_experts_flag(cr, run.model_opts.prefill_experts);
  add_cold_experts_flag(cr, run.model_opts.cold);
  add_budget_keeps_chunks_flag(cr, run.model_opts.budget_keeps_chunks);
  add_copy_threads_flag(cr, run.model_opts.copy_threads);
  cr->add_flag("--stats", run.stats, "--backend vulkan: print the expert-cache statistics at the end");
  cr->add_option("--sampling", run.sampling,
                 "--backend vulkan: device = draw sampled tokens on the GPU where the settings allow (temperature, "
                 "top-p, min-p; the same choices as the host), host = read the logits back and sample on the CPU")
      ->check(CLI::IsMember({"device", "host"}))->default_val(run.sampling);
  cr->add_option("--ctx", run.ctx, "Max context (prompt + generated tokens)")->default_val(run.ctx);
  cr->add_flag("--print-ids", run.print_ids, "Print the prompt and generated token ids on stderr");
  cr->add_flag("-v,--verbose", run.verbose, "Load details and prompt-prefix reuse on stderr");
  cr->add_flag("--qat", run.qat, "Enable the QAT fake-quant steps of the reference (FP8 KV, FP4 indexer, FP8 act)");
  cr->add_flag("--no-stop", run.no_stop, "Do not stop at the end-of-sentence id");

  serve_args serve;
  auto* cs = register_serve(app, serve);

  bench_args bench;
  auto* cb = app.add_subcommand("bench", "Speed of the whole V4 / V4.1 graph on a Vulkan device or the CPU (random weights, real dimensions)");
  cb->add_option("--synthetic", bench.synthetic,
                 "v4-flash | v41-flash (real dimensions) | tiny | v41-tiny (the toys' dimensions)")
      ->required();
  cb->add_option("--backend", bench.backend,
                 "vulkan | cpu (the CPU graph: greedy decode, prefill once, no --ctx seek; Vulkan-only options are "
                 "refused)")
      ->check(CLI::IsMember({"cpu", "vulkan"}))->default_val(bench.backend);
  cb->add_option("--threads", bench.threads, "--backend cpu: worker threads of the graph and the roofline (0 = all cores)")
      ->default_val(bench.threads);
  cb->add_option("--weights", bench.weights, "Routed experts' format (q2tp, q4tp, mxfp4, ...)")->default_val(bench.weights);
  cb->add_option("--expert-down", bench.expert_down, "Routed experts' w2 format (default: --weights)");
  cb->add_option("--dense", bench.dense, "Attention / indexer / shared-expert / head format")->default_val(bench.dense);
  cb->add_option("--fuse-route", bench.fuse_route,
                 "The router's logits and the routing in one dispatch (the last of the router's workgroups routes; "
                 "selections may differ from two dispatches at near-ties): default (on) | on | off")
      ->check(CLI::IsMember({"default", "on", "off"}))
      ->default_val(bench.fuse_route);
  cb->add_option("--fold-quant", bench.fold_quant,
                 "--act i8: int8 copies written by their producers instead of quantisation steps — o by the attention's "
                 "combine, u by the boundary before the attention site and the head (V4.1: o only): default (o, "
                 "where the dense products take int8) | none | o | u | both")
      ->check(CLI::IsMember({"default", "none", "o", "u", "both"}))
      ->default_val(bench.fold_quant);
  cb->add_option("--prefill-shared", bench.prefill_shared,
                 "Prefill chunks (V4, V4.1) with the shared expert stacked (--shared-expert routed): default | apart "
                 "(three "
                 "tiled GEMMs on copies of its matrices) | stacked (one more expert of the grouped MoE kernels)")
      ->check(CLI::IsMember({"default", "apart", "stacked"}))
      ->default_val(bench.prefill_shared);
  cb->add_flag("--no-pipeline", bench.no_pipeline,
              "Record nothing ahead (dsv4/dsv41_gpu_options::pipeline off): each decode step recorded after the one "
              "before ran, each prefill chunk recorded and its inputs staged after the one before ran");
  cb->add_option("--shared-expert", bench.shared_expert,
                 "The shared expert's formats: dense (--dense, the release's FP8) | routed (gate/up --weights, w2 "
                 "--expert-down: the CMF files' rule, stacked with the routed experts)")
      ->check(CLI::IsMember({"dense", "routed"}))
      ->default_val(bench.shared_expert);
  cb->add_option("--prompt", bench.prompt, "Prompt tokens (prefill)")->default_val(bench.prompt);
  cb->add_option("--tokens", bench.tokens, "Decode tokens")->default_val(bench.tokens);
  cb->add_option("--prefill-reps", bench.prefill_reps,
                 "Prefill runs of the prompt (from position 0 each): the first and the median are reported")
      ->default_val(bench.prefill_reps)
      ->check(CLI::Range(1u, 100u));
  cb->add_option("--ctx", bench.ctx, "Context the device state holds; decode is also timed at its end")->default_val(bench.ctx);
  cb->add_option("--layers", bench.layers, "Layers (0 = the preset's)")->default_val(bench.layers);
  cb->add_option("--device", bench.device, "Vulkan device index (-1 = best)")->default_val(bench.device);
  cb->add_option("--seed", bench.seed, "Weights and token seed")->default_val(bench.seed);
  cb->add_option("--variants", bench.variants,
                 "Distinct random matrices per role (0 = the preset's: one for v4-flash / v41-flash, so every expert's "
                 "host copy is the same bytes — the CPU's caches then flatter --cold-experts cpu and the streaming "
                 "copies; e.g. 256 makes them read DRAM like a real model's)")
      ->default_val(bench.variants);
  cb->add_option("--roofline-mib", bench.roofline_mib, "Streaming-read buffer of the roofline, MiB")->default_val(bench.roofline_mib);
  cb->add_flag("!--no-far", bench.far, "Skip the decode timing at the end of --ctx");
  cb->add_option("--act", bench.act,
                 "Activations of the experts and (v4) of the decode's q4tp / q2tp / MXFP4 dense products: f32 | i8 "
                 "(int8, integer dot products)")
      ->check(CLI::IsMember({"f32", "i8"}))->default_val(bench.act);
  cb->add_option("--dense-act", bench.dense_act,
                 "Diagnostics: the decode's dense products alone: f32 | i8 (default: as --act)")
      ->check(CLI::IsMember({"f32", "i8"}));
  cb->add_flag("--profile", bench.profile,
               "--backend vulkan: per-phase device time of 16 decode steps (timestamps); --backend cpu: wall time "
               "per phase of the decode steps");
  cb->add_flag("--nontemporal", bench.nontemporal,
               "Diagnostics: weight loads carry SPIR-V's Nontemporal hint (no effect measured on the H200; docs/VULKAN.md)");
  cb->add_option("--profile-at", bench.profile_at,
                 "Position of the profiled decode steps (0 = after the prompt; e.g. 16000 with --ctx 16384)")
      ->default_val(bench.profile_at);
  cb->add_flag("!--no-shuffle", bench.shuffle, "Diagnostics: no subgroup shuffles (f64 sums through subgroupAdd)");
  cb->add_option("--vram-budget", bench.vram_budget,
                 "Device memory the model may take (e.g. 40G); experts that do not fit are cached (default: no limit)");
  cb->add_option("--copy-threads", bench.copy_threads, "Host threads packing streamed experts (with --vram-budget)")
      ->default_val(bench.copy_threads)
      ->check(CLI::Range(1u, 256u));
  cb->add_option("--prefill-chunk", bench.prefill_chunk,
                 "Prompt positions per device recording (0 or 1: token by token; with --vram-budget and not given: "
                 "min(2048, --ctx))")
      ->default_val(bench.prefill_chunk)
      ->check(CLI::Range(0u, 4096u));
  add_gemm_flag(cb, bench.gemm);
  add_prefill_experts_flag(cb, bench.prefill_experts);
  add_cold_experts_flag(cb, bench.cold);
  add_budget_keeps_chunks_flag(cb, bench.budget_keeps_chunks);
  cb->add_option("--cache-wait", bench.cache_wait,
                 "Diagnostics: how the expert cache waits for each layer's part — spin (default: on the fence's status) "
                 "| block (the driver's blocking wait)")
      ->check(CLI::IsMember({"spin", "block"}))
      ->default_val(bench.cache_wait);
  // the prefill chunks' expert streaming under --vram-budget (chunk_streaming: the defaults run and serve use)
  cb->add_flag("--pass-overlap,!--no-pass-overlap", bench.pass_overlap,
               "Diagnostics, with --vram-budget: the prefill chunks' expert passes take half the slots each, so each "
               "pass's copies run beside the previous pass's MoE (default: on)");
  cb->add_option("--copy-queue", bench.copy_queue,
                 "Diagnostics, with --vram-budget: the prefill chunks' expert-pass copies on the transfer queue "
                 "(default: a transfer-only queue family where the device has one, ordered by timeline semaphores) or "
                 "on the compute queue (ordered by barriers)")
      ->check(CLI::IsMember({"compute", "transfer"}))
      ->default_val(bench.copy_queue);
  cb->add_option("--prefetch", bench.prefetch,
                 "Diagnostics, with --vram-budget and the transfer queue: device bytes (taken from the expert slots) "
                 "into which each prefill chunk layer's first non-resident experts are copied while the part up to "
                 "its routing runs — auto (default: min(2G, budget / 32) where the device has a transfer queue), "
                 "0 (none) or a size such as 1G")
      ->check([](const std::string& v) {
        if (v == "auto") return std::string();
        try {
          (void)parse_byte_size(v, "--prefetch");
        } catch (const std::exception& e) {
          return std::string(e.what());
        }
        return std::string();
      })
      ->default_val(bench.prefetch);
  cb->add_option("--prefetch-d2d", bench.prefetch_d2d,
                 "Diagnostics, with --prefetch: the prefetched experts' copies into their slots in the pass's part on "
                 "the compute queue (default) or on the transfer queue")
      ->check(CLI::IsMember({"compute", "transfer"}))
      ->default_val(bench.prefetch_d2d);
  cb->add_option("--staging", bench.staging,
                 "Diagnostics, with --vram-budget: the expert cache's upload rings in host-cached (default) or "
                 "write-combined (wc) system memory")
      ->check(CLI::IsMember({"wc", "cached"}))
      ->default_val(bench.staging);
  cb->add_option("--pack", bench.pack,
                 "Diagnostics, with --vram-budget: the copy threads fill the upload rings with non-temporal stores "
                 "(default: stream) or memcpy")
      ->check(CLI::IsMember({"memcpy", "stream"}))
      ->default_val(bench.pack);
  cb->add_option("--cpu-chunk", bench.cpu_chunk,
                 "With --cold-experts cpu: rows of the CPU experts a copy thread takes at a time (dynamic chunks; "
                 "0 = one static range per thread)")
      ->default_val(bench.cpu_chunk)
      ->check(CLI::Range(uint64_t(0), uint64_t(1) << 20));
  cb->add_option("--cold-margin", bench.cold_margin,
                 "With --cold-experts cpu: decayed uses beyond the coldest cached expert's that a miss needs to be "
                 "copied in (larger: fewer copies, more experts on the CPU)")
      ->default_val(bench.cold_margin)
      ->check(CLI::Range(0.0, 1e9));
  cb->add_option("--mv-subgroups", bench.mv_subgroups,
                 "Diagnostics: subgroups a batch-1 matvec dispatch aims at (rows per subgroup and column split; "
                 "0 = the default rule)")
      ->default_val(bench.mv_subgroups);
  cb->add_option("--mv-rows-per-team", bench.mv_rows_per_team, "Diagnostics: batch-1 matvec rows per subgroup (1, 2, 4; with --mv-x-source 3 also 8, 16; 0 = from the shape)")
      ->default_val(bench.mv_rows_per_team)
      ->check(CLI::IsMember({0u, 1u, 2u, 4u, 8u, 16u}));
  cb->add_option("--mv-sub", bench.mv_sub,
                 "Diagnostics: batch-1 matvec with f32 activations, lanes per chunk (1, 2, 4; 0 = chosen per format)")
      ->default_val(bench.mv_sub)
      ->check(CLI::IsMember({0u, 1u, 2u, 4u}));
  cb->add_option("--mv-x-source", bench.mv_x_source,
                 "Diagnostics: batch-1 matvec with f32 activations — 2 = read from the buffer, 3 = held in registers "
                 "(shaders/matvec_xreg.comp); 0 = chosen (2)")
      ->default_val(bench.mv_x_source)
      ->check(CLI::IsMember({0u, 2u, 3u}));
  cb->add_option("--mv-xreg-batches", bench.mv_xreg_batches,
                 "Diagnostics: with --mv-x-source 3, the register kernel's batches of --mv-rows-per-team rows per "
                 "subgroup (1-64; 0 = 4)")
      ->default_val(bench.mv_xreg_batches)
      ->check(CLI::Range(0u, 64u));
  cb->add_option("--mv-pairs", bench.mv_pairs,
                 "Diagnostics: q2tp int8 batch-1 row kernel, chunks per lane unit (1, 2: where the row's chunk count "
                 "is even; 0 = chosen)")
      ->default_val(bench.mv_pairs)
      ->check(CLI::IsMember({0u, 1u, 2u}));
  cb->add_option("--mv-concurrent", bench.mv_concurrent,
                 "Diagnostics: batch-1 matvecs recorded in a concurrent group — 1 = the dependent-product rule, 2 = the "
                 "throughput rule (4 rows per subgroup, q2tp chunk pairs); 0 = chosen (1)")
      ->default_val(bench.mv_concurrent)
      ->check(CLI::IsMember({0u, 1u, 2u}));
  cb->add_option("--moe-tails", bench.moe_tails,
                 "Diagnostics: 1 = the decode MoE (int8) in four dispatches, without the SwiGLU and sum tails "
                 "(0 = the tails where they apply)")
      ->default_val(bench.moe_tails)
      ->check(CLI::IsMember({0u, 1u}));
  cb->add_option("--moe-b1-rows-per-team", bench.moe_b1_rpt,
                 "Diagnostics: the decode's int8 MoE dispatches, rows per subgroup (1, 2, 4; 0 = as --mv-rows-per-team)")
      ->default_val(bench.moe_b1_rpt)
      ->check(CLI::IsMember({0u, 1u, 2u, 4u}));
  cb->add_option("--moe-b1-pairs", bench.moe_b1_pairs,
                 "Diagnostics: the decode's int8 MoE dispatches, q2tp chunks per lane unit (1, 2; 0 = 2)")
      ->default_val(bench.moe_b1_pairs)
      ->check(CLI::IsMember({0u, 1u, 2u}));
  cb->add_option("--moe-b1-unroll", bench.moe_b1_unroll,
                 "Diagnostics: the decode's int8 MoE dispatches, chunks a lane loads before decoding (1, 2, 4; 0 = 2)")
      ->default_val(bench.moe_b1_unroll)
      ->check(CLI::IsMember({0u, 1u, 2u, 4u}));
  cb->add_option("--moe-b1-batches", bench.moe_b1_batches,
                 "Diagnostics: the decode's int8 MoE dispatches, batches of rows each workgroup walks (1, 2, 4, 8; 0 = "
                 "4, halved until a workgroup's rows divide an expert's half)")
      ->default_val(bench.moe_b1_batches)
      ->check(CLI::IsMember({0u, 1u, 2u, 4u, 8u}));
  cb->add_option("--moe-i8-tc", bench.moe_i8_tc,
                 "Diagnostics: the prefill's int8 expert products — 0 = the default kernel (moe_rows_g8.comp), "
                 "1 = moe_rows_g8.comp, 2 = moe_i8_tc.comp on the int8 tensor cores (emulated without them)")
      ->default_val(bench.moe_i8_tc)
      ->check(CLI::IsMember({0u, 1u, 2u}));
  cb->add_option("--hc-tokens", bench.hc_tokens,
                 "Prefill chunks' mHC blocks: tokens one workgroup walks with the mix weights in registers (1-64; the "
                 "same bits for every value; 0 = chosen: 8; gpu::matvec_tuning::hc_tokens)")
      ->default_val(bench.hc_tokens)
      ->check(CLI::Range(0u, 64u));
  cb->add_option("--gemm-warp-tile", bench.gemm_warp_tile,
                 "Prefill's dense f16 GEMMs on cooperative matrices: a subgroup's 16x16 blocks in 1 row (1) or 2 rows "
                 "of blocks where the tile allows it (0: the default, 2; gpu::matvec_tuning::gemm_warp_tile)")
      ->default_val(bench.gemm_warp_tile)
      ->check(CLI::IsMember({0u, 1u, 2u}));
  cb->add_option("--gemm-min-groups", bench.gemm_min_groups,
                 "Prefill's dense GEMMs: a product whose grid of the largest tiles has fewer workgroups takes a "
                 "smaller tile (0 = always the largest; gpu::matvec_tuning::gemm_min_groups)")
      ->default_val(bench.gemm_min_groups);
  cb->add_flag("--f64", bench.f64, "f64 accumulators (norms, softmax, mHC) where the device has f64 (default f32)");
  cb->add_flag("--json", bench.json, "Also print one JSON line with the figures");
  cb->add_option("--temp", bench.temp, "Decode temperature (0 = greedy, the device's argmax)")->default_val(bench.temp);
  cb->add_option("--top-p", bench.top_p, "Decode nucleus mass (1 = off; with --temp)")->default_val(bench.top_p);
  cb->add_option("--min-p", bench.min_p, "Decode min-p (0 = off; with --temp)")->default_val(bench.min_p);
  cb->add_option("--top-k", bench.top_k, "Decode top-k (0 = off; with --temp)")->default_val(bench.top_k);
  cb->add_option("--repeat-penalty", bench.repeat_penalty, "Decode repetition penalty (1 = off; with --temp)")
      ->default_val(bench.repeat_penalty);
  cb->add_option("--presence-penalty", bench.presence_penalty, "Decode presence penalty (0 = off; with --temp)")
      ->default_val(bench.presence_penalty);
  cb->add_option("--frequency-penalty", bench.frequency_penalty, "Decode frequency penalty (0 = off; with --temp)")
      ->default_val(bench.frequency_penalty);
  cb->add_option("--logprobs", bench.logprobs,
                 "Decode logprobs of the raw logits with this many alternatives (-1 = none; also greedy, 0 = the chosen "
                 "token's only)")
      ->check(CLI::Range(-1, int32_t(cmfx::gpu::kernels::logprobs_max_top)))->default_val(bench.logprobs);
  cb->add_option("--sampling", bench.sampling,
                 "With --temp or --logprobs: device = chosen on the GPU, chained; host = logits read back, "
                 "cmfx::sampler per step")
      ->check(CLI::IsMember({"device", "host"}))->default_val(bench.sampling);
  cb->add_option("--decode-chain", bench.decode_chain,
                 "on: the decode's steps chained on the device where the graph can (default); off: each step run by "
                 "itself (to time what chaining saves)")
      ->check(CLI::IsMember({"on", "off"}))->default_val(bench.decode_chain);
  cb->add_option("--shader-dir", bench.shader_dir,
                 "Read the shaders (*.comp, common/*.glsl) from this directory instead of the built-in copies "
                 "(to time a kernel variant)");

  tokenize_args tk;
  auto* ctk = app.add_subcommand("tokenize", "Print the token ids of TEXT as a JSON array");
  ctk->add_option("text", tk.text, "Text to tokenize")->required();
  auto* cdt = app.add_subcommand("detokenize", "Print the text of token ids (arguments, or one JSON array)");
  cdt->add_option("ids", tk.ids, "Token ids")->required();
  for (auto* c : {ctk, cdt}) {
    c->add_option("--model", tk.model, "CMF file or release directory whose tokenizer to use");
    c->add_option("--tokenizer", tk.tokenizer, "A tokenizer.json (instead of, or overriding, the model's)");
  }
  ctk->add_flag("--chat", tk.chat, "Render TEXT as one user message with the DeepSeek-V4 chat encoding");
  ctk->add_flag("--think", tk.think, "With --chat: thinking mode");

  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return app.exit(e) == 0 ? 0 : 2;
  }
  try {
    if (*ci) return run_info(info);
    if (*ctk) return run_tokenize(tk);
    if (*cdt) return run_detokenize(tk);
    if (*cv) return run_verify(ver);
    if (*ct) return run_make_toy(toy);
    if (*cp) return run_ppl(ppl);
    if (*cs) {
      default_budget_chunk(cs, serve.vram_budget != 0, serve.ctx, serve.prefill_chunk);
      return run_serve(serve);
    }
    if (*cb) {
      default_budget_chunk(cb, budget_given(bench.vram_budget), bench.ctx, bench.prefill_chunk);
      return run_bench(bench);
    }
    if (*cr) {
      default_budget_chunk(cr, run.model_opts.vram_budget != 0, run.ctx, run.model_opts.prefill_chunk);
      run.prompt_given = run_p->count() > 0;
      run.seed_given = run_seed->count() > 0;
      run.n_given = run_n->count() > 0;
      return run_run(run);
    }
  } catch (const std::exception& e) {
    std::fprintf(stderr, "cmfx: %s\n", e.what());
    return 2;
  }
  return 2;
}
