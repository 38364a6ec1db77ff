#pragma once
// The Vulkan parity harness (modelled on ggml's test-backend-ops, serving.md §2): every case runs one GPU kernel
// on fresh random inputs (never all zero), with its output poisoned (NaN) before the run and guarded by
// sentinel regions on both sides, and compares it with the CPU float64 reference of include/cmfx/ref/ (or,
// for dequantisation and top-k, demands exact equality). Results feed a coverage table op × format.
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <functional>
#include <map>
#include <random>
#include <string>
#include <vector>

#include "cmfx/core/hash64.hpp"
#include "cmfx/formats/format_list.hpp"
#include "cmfx/vk/kernels.hpp"

namespace cmfx::parity {

/// NMSE bound of every floating-point case: the GPU decodes exactly the CPU's values (proved bit-for-bit by
/// the dequant cases), so f32 accumulation order and f32 exp / cos·sin products are the only differences.
constexpr double kNmse = 1e-7;
/// Max-abs bound relative to the reference's largest magnitude (at least 1): a single bad element that NMSE
/// would average away still fails. Measured worst: 3e-7 (matvec), 5e-8 (softmax).
constexpr double kMaxAbsRel = 1e-5;

/// The f16 GEMM modes (kernels::set_gemm_precision): weight and activation tiles rounded to f16 (unit roundoff
/// 2^-11), products summed in f32. Each output's relative error is then of order 2^-11 · sqrt(2/3) per term, NMSE
/// ~2e-7 on random data (measured on lavapipe, emulated: 1.5–2.5e-7); the bound leaves 5×. Max-abs: a few
/// roundings of the largest terms, 1e-2 of the largest output.
constexpr double kF16Nmse = 1e-6;
constexpr double kF16MaxAbsRel = 1e-2;
/// The expert-grouped MoE in an f16 mode: two rounded GEMMs in series (gate/up, then down over the rounded h).
constexpr double kF16MoeNmse = 3e-6;

struct options {
  uint64_t seed = 0;
  std::string filter;  // run only cases whose name contains this
};

enum class status { pass, fail, unsupported };

struct result {
  std::string op, fmt, name;
  status st = status::pass;
};

/// Fresh random data for one case.
struct rng {
  std::mt19937_64 g;
  explicit rng(uint64_t seed) : g(seed) {}
  /// N(0, sigma²) with 0.2 % 8× outliers; never all zero.
  std::vector<float> normal(size_t n, float sigma = 1.0f) {
    std::normal_distribution<float> nd(0.0f, sigma);
    std::uniform_real_distribution<float> u(0.0f, 1.0f);
    std::vector<float> v(n);
    bool nz = false;
    for (auto& x : v) {
      x = nd(g);
      if (u(g) < 0.002f) x *= 8.0f;
      nz |= x != 0.0f;
    }
    if (!nz && n) v[0] = sigma;
    return v;
  }
  float uniform(float a, float b) { return std::uniform_real_distribution<float>(a, b)(g); }
  uint64_t below(uint64_t n) { return std::uniform_int_distribution<uint64_t>(0, n - 1)(g); }
};

/// A device buffer [guard | payload | guard]: payload poisoned before a run, guards checked after it.
class guarded {
 public:
  static constexpr uint64_t guard_bytes = 1024;
  static constexpr uint32_t guard_word = 0x5A5AA5A5u;
  static constexpr uint32_t nan_word = 0x7FC0DEADu;  // a NaN no kernel produces

  guarded(gpu::device& d, uint64_t bytes, uint32_t poison = nan_word)
      : dev_(d), bytes_(bytes), buf_(d.alloc(bytes + 2 * guard_bytes)) {
    std::vector<uint32_t> init((bytes + 2 * guard_bytes + 3) / 4, guard_word);
    for (uint64_t i = guard_bytes / 4; i < (guard_bytes + bytes) / 4; ++i) init[i] = poison;
    dev_.upload(buf_, init.data(), bytes + 2 * guard_bytes);
  }
  gpu::view payload() const { return gpu::view(buf_, guard_bytes, bytes_); }
  /// Downloads everything; returns false (and says so) when a guard word changed.
  bool read(void* out, std::string& why) {
    std::vector<uint8_t> all(bytes_ + 2 * guard_bytes);
    dev_.download(buf_, all.data(), all.size());
    std::memcpy(out, all.data() + guard_bytes, bytes_);
    for (uint64_t i = 0; i < guard_bytes; i += 4) {
      uint32_t a, b;
      std::memcpy(&a, all.data() + i, 4);
      std::memcpy(&b, all.data() + guard_bytes + bytes_ + i, 4);
      if (a != guard_word || b != guard_word) {
        why = "out-of-bounds write: sentinel " + std::string(a != guard_word ? "before" : "after") +
              " the output changed at byte " + std::to_string(i);
        return false;
      }
    }
    return true;
  }

 private:
  gpu::device& dev_;
  uint64_t bytes_;
  gpu::buffer buf_;
};

/// Uploads host data into a fresh device buffer.
template <class T>
gpu::buffer upload(gpu::device& d, const std::vector<T>& v) {
  gpu::buffer b = d.alloc(std::max<size_t>(v.size() * sizeof(T), 4));
  if (!v.empty()) d.upload(b, v.data(), v.size() * sizeof(T));
  return b;
}

struct stats {
  double nmse = 0, max_abs = 0, ref_max = 0;
  size_t nonfinite_mismatch = 0;
};

/// NMSE = Σ(got − ref)² / Σ ref² over positions where both are finite; NaN/Inf positions must agree.
template <class Ref>
stats compare(const float* got, const Ref* ref, size_t n) {
  stats s;
  double err = 0, den = 0;
  for (size_t i = 0; i < n; ++i) {
    const double g = got[i], r = double(ref[i]);
    if (!std::isfinite(g) || !std::isfinite(r)) {
      if (!(std::isnan(g) && std::isnan(r)) && g != r) ++s.nonfinite_mismatch;
      continue;
    }
    err += (g - r) * (g - r);
    den += r * r;
    s.max_abs = std::max(s.max_abs, std::fabs(g - r));
    s.ref_max = std::max(s.ref_max, std::fabs(r));
  }
  s.nmse = den > 0 ? err / den : err;
  return s;
}

/// Runs cases and collects results. Each case body returns "" on success or a failure reason.
class suite {
 public:
  suite(gpu::device& d, gpu::kernels& k, const options& o) : dev(d), kern(k), opt(o) {}
  gpu::device& dev;
  gpu::kernels& kern;
  const options& opt;

  /// A fresh seed per case, derived from the run's seed (printed at the start), the case's full name and how many
  /// cases of that name ran before it — not from its place in the run, so `--seed S --filter NAME` gives a failing
  /// case the inputs it had in the whole run (cases registered only where a feature or the filter allows them do
  /// not shift the others' seeds).
  uint64_t case_seed(const std::string& full) {
    const uint64_t name = hash64(reinterpret_cast<const uint8_t*>(full.data()), full.size());
    return fmix64(opt.seed * hash64_golden ^ name ^ fmix64(uint64_t(seen_[full]++) + 1));
  }

  void run(const std::string& op, const std::string& fmt, const std::string& name,
           const std::function<std::string(uint64_t seed, std::string& info)>& body);
  void unsupported(const std::string& op, const std::string& fmt) { results_.push_back({op, fmt, "", status::unsupported}); }
  /// Whether --filter selects the case "op/fmt/name" (substrings separated by '|': any of them; none: every case).
  bool selected(const std::string& full) const;

  /// Submits a recording and returns its wall time in ms.
  double submit(gpu::commands& c);

  /// Prints the coverage table; returns the number of failed cases.
  int report() const;
  int failures() const;

 private:
  std::vector<result> results_;
  std::map<std::string, uint32_t> seen_;  // case_seed: cases run so far per full name
};

/// Formats a float-error verdict: "" when within bounds.
std::string verdict(const stats& s, double nmse_max, std::string& info, double max_abs_rel = kMaxAbsRel);

// Case groups (cases_matrix.cpp, cases_ops.cpp, cases_route.cpp, cases_mhc.cpp, cases_quant.cpp, cases_moe.cpp).
/// The f16 GEMM mode this device runs: f16 on the tensor cores where it has cooperative matrices, else the
/// emulated one (shaderFloat16), else f32 (none: the caller marks the cases unsupported).
inline gpu::gemm_precision f16_gemm_mode(const gpu::device& d) {
  if (d.info().coop_matrix) return gpu::gemm_precision::f16;
  return d.info().float16 ? gpu::gemm_precision::f16_emulated : gpu::gemm_precision::f32;
}

using gpu::gemm_precision_scope;

void matrix_cases(suite& s);
void op_cases(suite& s);
void route_cases(suite& s);
void mhc_cases(suite& s);
void quant_cases(suite& s);
void moe_cases(suite& s);
void moe_slots_cases(suite& s);  // cases_moe_slots.cpp: the expert cache's MoE
void attn_cases(suite& s);  // cases_attn.cpp
void attn_q8_cases(suite& s);  // cases_attn_q8.cpp: the attention output's int8 copy
void model_cases(suite& s);  // cases_model.cpp: the V4 GPU graph vs the CPU graph on the toys
struct toy_files;
void model_chain_cases(suite& s, toy_files& files);  // cases_model_chain.cpp: decode chained on the device
void model_v41_cases(suite& s);  // cases_model_v41.cpp: the V4.1 GPU graph vs the CPU graph on the V4.1 toys
void prim_cases(suite& s);   // cases_prims.cpp: add, scale, matmul_rows, recorded transfers
void queue_cases(suite& s);  // cases_queues.cpp: transfer and compute recordings ordered by sync points
void v41_cases(suite& s);  // cases_v41.cpp: V4.1 kernels (FP4 KV fake-quant, candidate blocks, Engram gather and gate)
void sample_cases(suite& s);  // cases_sample.cpp: the device sampler against cmfx::sampler
void prompt_cache_cases(suite& s);  // cases_prompt_cache.cpp: the driver's prompt cache, a long V4.1 prompt
void chunk_pipeline_cases(suite& s);  // cases_chunk_pipeline.cpp: prefill chunks recorded while the one before runs
void chunk_passes_cases(suite& s);  // cases_chunk_passes.cpp: prefill chunks under the expert cache, in passes

}  // namespace cmfx::parity
