#pragma once
// The `--act f32|i8` flag of `cmfx run`, `cmfx ppl` and `cmfx serve` (one declaration, one help text): the
// activation precision of the weight matmuls (dsv4_options::matmul_act, dsv41_options::matmul_act).
#include <CLI/CLI.hpp>
#include <algorithm>
#include <cstdint>
#include <string>

#include "cmfx/kernels/act_precision.hpp"
#include "byte_size.hpp"
#include "cmfx/vk/gemm_precision.hpp"
#include "model/cold_experts.hpp"
#include "model/prefill_experts.hpp"

namespace cmfx::driver {

inline CLI::Option* add_act_flag(CLI::App* c, act_precision& v) {
  return c
      ->add_option_function<std::string>(
          "--act", [&v](const std::string& s) { v = s == "i8" ? act_precision::i8 : act_precision::f32; },
          "Activation precision of the q4tp/q2tp/MXFP4 weight matmuls: f32 (default; strict, the parity reference) "
          "| i8 (inputs rounded to int8 per 32 values: faster decode, logits off by a small error, see "
          "docs/ARCHITECTURE.md; the router stays f32)")
      ->check(CLI::IsMember({"f32", "i8"}).description(""))
      ->option_text("f32|i8")
      ->default_str("f32");
}

/// The `--gemm f16|f32` flag of `cmfx run`, `cmfx ppl` and `cmfx bench` (Vulkan): dsv4_gpu_options::gemm.
inline CLI::Option* add_gemm_flag(CLI::App* c, gpu::gemm_precision& v) {
  return c
      ->add_option_function<std::string>(
          "--gemm", [&v](const std::string& s) { v = s == "f32" ? gpu::gemm_precision::f32 : gpu::gemm_precision::f16; },
          "--backend vulkan: the V4 prefill chunks' tiled GEMMs: f16 (default; tiles rounded to f16 with "
          "saturation, f32 sums, on the tensor cores where the device has cooperative matrices, else the f32 tiles; "
          "see docs/VULKAN.md) | f32 (strict: the CPU's results up to summation order)")
      ->check(CLI::IsMember({"f32", "f16"}).description(""))
      ->option_text("f16|f32")
      ->default_str("f16");
}

/// The `--prefill-experts auto|f16|act` flag of `cmfx run`, `cmfx ppl` and `cmfx bench` (Vulkan):
/// dsv4_gpu_options::prefill_experts.
inline CLI::Option* add_prefill_experts_flag(CLI::App* c, prefill_expert_mode& v) {
  return c
      ->add_option_function<std::string>(
          "--prefill-experts",
          [&v](const std::string& s) {
            v = s == "f16"   ? prefill_expert_mode::f16
                : s == "act" ? prefill_expert_mode::act
                             : prefill_expert_mode::fastest;
          },
          "--backend vulkan: the V4 prefill chunks' experts: auto (default; per expert format the faster of the "
          "int8 kernels and the f16 tiles, by the H200 measurements in docs/PERF.md) | f16 (the --gemm tiles) | "
          "act (the precision of --act)")
      ->check(CLI::IsMember({"auto", "f16", "act"}).description(""))
      ->option_text("auto|f16|act")
      ->default_str("auto");
}

/// The `--cold-experts copy|cpu` flag of `cmfx run`, `cmfx serve` and `cmfx bench` (Vulkan, with --vram-budget):
/// dsv4_gpu_options::cold / dsv41_gpu_options::cold.
inline CLI::Option* add_cold_experts_flag(CLI::App* c, cold_experts& v) {
  return c
      ->add_option_function<std::string>(
          "--cold-experts", [&v](const std::string& s) { v = parse_cold_experts(s); },
          "--backend vulkan with --vram-budget: an expert that is not resident is copied in (copy, default; the "
          "logits equal the resident model's) or, unless it is used more often than the coldest cached expert, "
          "computed on the CPU (cpu); auto: whichever gives the faster tokens, measured in windows of both")
      ->check(CLI::IsMember({"copy", "cpu", "auto"}).description(""))
      ->option_text("copy|cpu|auto")
      ->default_str("copy");
}

/// The `--budget-keeps-chunks` flag of `cmfx run`, `cmfx serve` and `cmfx bench` (Vulkan, with --vram-budget):
/// dsv4_gpu_options::budget_keeps_chunks / dsv41_gpu_options::budget_keeps_chunks.
inline CLI::Option* add_budget_keeps_chunks_flag(CLI::App* c, bool& v) {
  return c->add_flag("--budget-keeps-chunks", v,
                     "--backend vulkan with --vram-budget: where every expert fits only without the prefill chunks' "
                     "scratch, keep the scratch (prompts in chunks, the experts through the expert cache) instead "
                     "of the experts resident and prompts token by token (default)");
}

/// The `--copy-threads N` flag of `cmfx run` and `cmfx serve` (Vulkan, with --vram-budget; `cmfx bench` has its own).
inline CLI::Option* add_copy_threads_flag(CLI::App* c, uint32_t& v) {
  return c
      ->add_option("--copy-threads", v,
                   "--backend vulkan with --vram-budget: host threads packing streamed experts and computing the "
                   "CPU's (--cold-experts cpu|auto); at most the cores")
      ->default_val(v)
      ->check(CLI::Range(1u, 256u));
}

/// --prefill-chunk's default under --vram-budget (Vulkan) where --prefill-chunk is not given. Under the expert cache
/// a chunk moves nearly every expert of every layer once, whatever its length, so a prompt's time grows with its
/// chunks rather than its tokens (docs/PERF.md, fifty-third session: V4.1 at 60 GB on an H100, 65 tok/s in chunks of
/// 512, 240 in chunks of 2048); the longer chunk's scratch (~1 MB a row at V4.1's size) costs a few slots.
inline constexpr uint64_t budget_prefill_chunk = 2048;

/// Whether a --vram-budget string sets a budget (not empty, not 0; an invalid one counts: its command names it).
inline bool budget_given(const std::string& v) {
  if (v.empty()) return false;
  try {
    return parse_byte_size(v, "--vram-budget") != 0;
  } catch (...) {
    return true;
  }
}

/// Sets `chunk` to min(budget_prefill_chunk, ctx) when `budget` is set and the subcommand `c` was not given
/// --prefill-chunk.
template <class T>
void default_budget_chunk(const CLI::App* c, bool budget, uint64_t ctx, T& chunk) {
  if (budget && c->get_option("--prefill-chunk")->count() == 0)
    chunk = T(std::min<uint64_t>(budget_prefill_chunk, std::max<uint64_t>(ctx, 1)));
}

}  // namespace cmfx::driver
