// Pipelined prefill chunks (driver/model/chunk_pipeline.hpp): with dsv4/dsv41_gpu_options::pipeline a chunk's inputs
// are staged and its commands recorded while the device runs the chunk before. The same graph with pipeline off
// waits for each chunk first; the two must give the same prompt logits and decode steps after it, bit for bit (the
// numerics are the chunks' own, which the model_v4 / model_v41 chunk cases compare with the CPU).
#include <cstring>

#include "harness.hpp"
#include "model/dsv41_forward.hpp"
#include "model/dsv41_gpu.hpp"
#include "model/dsv4_forward.hpp"
#include "model/dsv4_gpu.hpp"
#include "model_toys.hpp"

namespace cmfx::parity {

namespace {

using namespace cmfx::driver;

constexpr uint32_t kChunk = 7;
constexpr uint64_t kPrompt = 40, kDecode = 6;  // 40 = 5 × 7 + 5: six chunks, the last ragged

bool same_bits(const std::vector<float>& a, const std::vector<float>& b) {
  return a.size() == b.size() && (a.empty() || std::memcmp(a.data(), b.data(), a.size() * 4) == 0);
}

/// `on` and `off`: one model's graphs with pipeline on and off.
std::string compare(gpu_graph& on, gpu_graph& off, uint32_t vocab, uint64_t seed, std::string& info) {
  const std::vector<uint32_t> ids = random_ids(seed, vocab, kPrompt + kDecode);
  const std::span<const uint32_t> prompt(ids.data(), kPrompt);
  const std::vector<float> a = on.forward(prompt, true), b = off.forward(prompt, true);
  const uint64_t chunks = (kPrompt + kChunk - 1) / kChunk;
  if (on.last_prefill().chunks != chunks || off.last_prefill().chunks != chunks)
    return "the prompt ran " + std::to_string(on.last_prefill().chunks) + " / " +
           std::to_string(off.last_prefill().chunks) + " chunks, not " + std::to_string(chunks);
  if (on.pos() != kPrompt || off.pos() != kPrompt) return "position after the prompt is not " + std::to_string(kPrompt);
  if (a.size() != vocab) return "no logits after the pipelined prompt";
  if (!same_bits(a, b)) return "the prompt's last logits differ between pipelined and waited-for chunks";
  for (uint64_t t = kPrompt; t < kPrompt + kDecode; ++t) {
    const std::span<const uint32_t> one(&ids[t], 1);
    if (!same_bits(on.forward(one, true), off.forward(one, true)))
      return "decode step at position " + std::to_string(t) + " differs after pipelined chunks";
  }
  info = std::to_string(chunks) + " chunks of <= " + std::to_string(kChunk) + " rows + " + std::to_string(kDecode) +
         " steps, bit for bit";
  return {};
}

/// Model (dsv4_model / dsv41_model, opened with CpuOptions) and its GPU graph with pipeline on and off.
template <class Model, class CpuOptions, class GpuModel, class GpuOptions>
std::string pipeline_case(suite& s, const std::string& path, uint64_t seed, std::string& info) {
  CpuOptions co;
  co.threads = 1;
  auto cpu = Model::open(path, co);
  GpuOptions go;
  go.max_ctx = kPrompt + kDecode;
  go.prefill_chunk = kChunk;
  go.gemm = gpu::gemm_precision::f32;
  GpuModel on(cpu->weights(), s.dev, s.kern, go);
  go.pipeline = false;
  GpuModel off(cpu->weights(), s.dev, s.kern, go);
  return compare(on, off, cpu->config().vocab, seed, info);
}

}  // namespace

void chunk_pipeline_cases(suite& s) {
  toy_files files;
  s.run("model_v4", "-", "pipelined prefill chunks of 7 == chunks waited for, cmf q4tp toy, 40+6 tokens",
        [&](uint64_t seed, std::string& info) {
          return pipeline_case<dsv4_model, dsv4_options, dsv4_gpu_model, dsv4_gpu_options>(s, files.make("cmf", "q4tp"),
                                                                                            seed, info);
        });
  s.run("model_v41", "-", "pipelined prefill chunks of 7 == chunks waited for, release toy, 40+6 tokens",
        [&](uint64_t seed, std::string& info) {
          return pipeline_case<dsv41_model, dsv41_options, dsv41_gpu_model, dsv41_gpu_options>(
              s, files.make("release", "native", "v41"), seed, info);
        });
}

}  // namespace cmfx::parity
