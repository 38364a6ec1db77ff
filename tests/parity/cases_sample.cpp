// The device sampler (kernels::sample, shaders/sample.comp) against cmfx::sampler on the same logits and the same
// RNG state: the chosen ids must be identical draw after draw (no tolerance: every quantity of the choice is the
// sampler's, bit for bit — docs/VULKAN.md "Sampling on the device"), and the device's MT19937-64 state after the
// draws must be the sampler's. Fresh logits every draw; vocabularies from 1 to the model's 129280 (ragged sizes);
// temperature, top-p (cuts inside groups of equal logits included), min-p, top-k (one stage and two, a ragged last
// row); NaN, ±inf, ±0; a run across the RNG's twist. Then kernels::logprobs after the choice (sampled or greedy):
// the sampler's logprob and alternatives, bit for bit.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>

#include "cmfx/sample/sampler.hpp"
#include "harness.hpp"
#include "logprob_check.hpp"
#include "model/device_sampling.hpp"

namespace cmfx::parity {

namespace {

constexpr float kInf = std::numeric_limits<float>::infinity();

enum class logit_kind { spread, flat, ties, flat_ties, specials, plus_inf, all_neg_inf, all_equal };

std::vector<float> make_logits(rng& r, uint32_t n, logit_kind kind) {
  // the spread of a model's logits; flat: hundreds to thousands of tokens inside a top-p of 0.5–0.95
  const bool flat = kind == logit_kind::flat || kind == logit_kind::flat_ties;
  std::vector<float> v = r.normal(n, flat ? 0.5f : 3.0f);
  if (flat)  // without the harness's 8× outliers, which would dominate
    for (float& x : v) x = std::clamp(x, -1.5f, 1.5f);
  switch (kind) {
    case logit_kind::spread:
    case logit_kind::flat:
      break;
    case logit_kind::ties:  // few distinct values: top-p cuts land inside groups of equal z
      for (float& x : v) x = std::round(x);
      break;
    case logit_kind::flat_ties:
      for (float& x : v) x = std::round(x * 8.0f) / 8.0f;
      break;
    case logit_kind::specials:
      for (float& x : v) {
        const float u = r.uniform(0, 1);
        if (u < 0.02f) x = std::numeric_limits<float>::quiet_NaN();
        else if (u < 0.05f) x = -kInf;
        else if (u < 0.08f) x = u < 0.065f ? -0.0f : 0.0f;
      }
      break;
    case logit_kind::plus_inf:
      v[r.below(n)] = kInf;
      v[r.below(n)] = kInf;
      break;
    case logit_kind::all_neg_inf:
      for (float& x : v) x = r.uniform(0, 1) < 0.5f ? -kInf : std::numeric_limits<float>::quiet_NaN();
      break;
    case logit_kind::all_equal:
      std::fill(v.begin(), v.end(), 0.75f);
      break;
  }
  return v;
}

std::vector<uint64_t> state_words(const mt19937_64_state& st) {
  std::vector<uint64_t> w(st.x.begin(), st.x.end());
  w.push_back(st.index);
  return w;
}

// `draws` consecutive draws; `warm` host-only draws first (to start near the RNG's twist).
std::string sample_case(suite& s, uint64_t seed, uint32_t n, gpu::kernels::sample_settings set, logit_kind kind,
                        uint32_t draws, uint32_t warm, std::string& info) {
  rng r(seed);
  sampling_params sp;
  sp.temperature = set.temperature, sp.top_p = set.top_p, sp.min_p = set.min_p, sp.seed = r.g();
  sp.top_k = int32_t(set.top_k);
  sp.repetition_penalty = set.repetition_penalty, sp.presence_penalty = set.presence_penalty;
  sp.frequency_penalty = set.frequency_penalty;
  sampler smp(n, sp);
  const bool pen = sp.has_penalties();
  if (pen) {  // a prompt of n / 8 random tokens (some repeated), then a few host draws: counts of 0, 1 and more
    std::vector<int32_t> prompt(std::max<uint32_t>(1, n / 8));
    for (int32_t& t : prompt) t = int32_t(r.below(n));
    smp.set_prompt(prompt);
    for (int i = 0; i < 6; ++i) smp.accept(prompt[r.below(prompt.size())]);
  }
  for (uint32_t i = 0; i < warm; ++i) (void)smp.sample(make_logits(r, n, logit_kind::spread));
  std::vector<uint32_t> seen(n);
  smp.penalty_state(seen);
  const gpu::buffer nb = upload(s.dev, seen);
  const gpu::buffer lb = s.dev.alloc(uint64_t(n) * 4), rb = upload(s.dev, state_words(smp.rng_state()));
  const gpu::buffer sb = s.dev.alloc(gpu::kernels::sample_scratch_bytes(n));
  guarded out(s.dev, 4, 0xDEADBEEFu);
  uint32_t kept_max = 0;
  for (uint32_t d = 0; d < draws; ++d) {
    const std::vector<float> l = make_logits(r, n, kind);
    s.dev.upload(lb, l);
    s.dev.upload(out.payload(), std::vector<uint32_t>{0xDEADBEEFu});
    gpu::commands c = s.dev.begin();
    s.kern.sample(c, lb, n, set, rb, sb, out.payload(), pen ? gpu::view(nb) : gpu::view());
    s.submit(c);
    uint32_t got = 0;
    std::string why;
    if (!out.read(&got, why)) return why;
    const int32_t want = smp.sample(l).token;
    kept_max = std::max<uint32_t>(kept_max, uint32_t(smp.last_candidates().size()));
    if (got != uint32_t(want))
      return "draw " + std::to_string(d) + ": gpu token " + std::to_string(got) + ", cpu " + std::to_string(want) +
             " (" + std::to_string(smp.last_candidates().size()) + " candidates)";
  }
  std::vector<uint64_t> st(313);
  s.dev.download(rb, st.data(), st.size() * 8);
  if (st != state_words(smp.rng_state())) return "the device's RNG state differs from the sampler's after the draws";
  if (pen) {
    std::vector<uint32_t> got(n);
    s.dev.download(nb, got.data(), got.size() * 4);
    smp.penalty_state(seen);
    if (got != seen) return "the device's penalty counts differ from the sampler's after the draws";
  }
  info = std::to_string(draws) + " draws identical, up to " + std::to_string(kept_max) + " candidates";
  return {};
}

// kernels::logprobs after the device's choice (kernels::sample, or the argmax when greedy) against the sampler's
// logprobs of the raw logits over the same logits: the same token, the same logprob and alternatives, bit for bit
// (every number they come from is computed in the sampler's order: cmfx::logsumexp_parts).
std::string logprobs_case(suite& s, uint64_t seed, uint32_t n, gpu::kernels::sample_settings set, uint32_t top_n,
                          logit_kind kind, uint32_t draws, std::string& info) {
  rng r(seed);
  sampling_params sp;
  sp.temperature = set.temperature, sp.top_p = set.top_p, sp.min_p = set.min_p, sp.seed = r.g();
  sp.top_k = int32_t(set.top_k), sp.logprobs = true, sp.top_logprobs = int32_t(top_n);
  sampler smp(n, sp);
  const bool greedy = !(set.temperature > 0.0f);
  const uint32_t words = gpu::kernels::logprobs_words(top_n);
  const gpu::buffer lb = s.dev.alloc(uint64_t(n) * 4), rb = upload(s.dev, state_words(smp.rng_state()));
  const gpu::buffer sb = s.dev.alloc(gpu::kernels::sample_scratch_bytes(n)), cb = s.dev.alloc(4);
  guarded out(s.dev, uint64_t(words) * 4, 0xDEADBEEFu);
  uint32_t finite = 0;
  for (uint32_t d = 0; d < draws; ++d) {
    const std::vector<float> l = make_logits(r, n, kind);
    s.dev.upload(lb, l);
    s.dev.upload(out.payload(), std::vector<uint32_t>(words, 0xDEADBEEFu));
    gpu::commands c = s.dev.begin();
    if (greedy)
      s.kern.topk(c, lb, 1, n, 1, cb);
    else
      s.kern.sample(c, lb, n, set, rb, sb, cb);
    s.kern.logprobs(c, lb, n, top_n, cb, sb, out.payload());
    s.submit(c);
    std::vector<uint32_t> rec(words);
    std::string why;
    if (!out.read(rec.data(), why)) return why;
    uint32_t tok = 0;
    s.dev.download(cb, &tok, 4);
    driver::step_logprobs got;
    driver::step_logprobs::from(rec, top_n, n, got);
    const sample_result& want = smp.sample(l);
    const std::string at = "draw " + std::to_string(d) + ": ";
    // the record's m and sum: the host's, bit for bit
    std::vector<float> z(n);
    std::vector<double> w(n);
    sanitize(l.data(), z.data(), n);
    const logsumexp_parts ref = logsumexp_parts_of(z.data(), n, w.data());
    double sum = 0.0;
    std::memcpy(&sum, &rec[1], 8);
    const bool same_sum = (std::isnan(sum) && std::isnan(ref.sum)) || std::memcmp(&sum, &ref.sum, 8) == 0;
    float m = 0.0f;
    std::memcpy(&m, &rec[0], 4);
    if (!same_bits(m, ref.m) || !same_sum)
      return at + "the record's max / sum (" + std::to_string(sum) + ") differ from the host's (" +
             std::to_string(ref.sum) + ")";
    if (tok != uint32_t(want.token))
      return at + "gpu token " + std::to_string(tok) + ", cpu " + std::to_string(want.token);
    if (const std::string diff = logprobs_differ(got, want); !diff.empty()) return at + diff;
    for (uint32_t j = std::min(top_n, n); j < top_n; ++j)  // past n: no token
      if (rec[4 + j] != 0xFFFFFFFFu) return at + "alternative slot " + std::to_string(j) + " past n is not empty";
    finite += std::isfinite(want.logprob) ? 1u : 0u;
  }
  info = std::to_string(draws) + " draws identical (" + std::to_string(finite) + " finite logprobs)";
  return {};
}

}  // namespace

void sample_cases(suite& s) {
  if (!s.kern.has_sample()) {
    s.unsupported("sample", "-");
    return;
  }
  using R = std::string;
  using set = gpu::kernels::sample_settings;
  auto c = [&](uint32_t n, set st, logit_kind kind, uint32_t draws, const char* note, uint32_t warm = 0) {
    char name[160];
    std::snprintf(name, sizeof name, "n=%u T=%g top_p=%g min_p=%g top_k=%u%s %s", n, double(st.temperature),
                  double(st.top_p), double(st.min_p), st.top_k,
                  st.repetition_penalty != 1.0f || st.presence_penalty != 0.0f || st.frequency_penalty != 0.0f
                      ? " penalties" : "", note);
    s.run("sample", "-", name, [=, &s](uint64_t seed, R& info) {
      return sample_case(s, seed, n, st, kind, draws, warm, info);
    });
  };
  c(1, {1.0f, 1.0f, 0.0f}, logit_kind::spread, 3, "one token");
  c(7, {0.7f, 0.9f, 0.0f}, logit_kind::spread, 6, "ragged");
  c(1000, {1.0f, 1.0f, 0.0f}, logit_kind::spread, 6, "temperature only");
  c(4097, {0.6f, 1.0f, 0.0f}, logit_kind::spread, 6, "ragged, temperature only");
  c(4097, {1.3f, 0.95f, 0.0f}, logit_kind::spread, 6, "top-p");
  c(4097, {0.8f, 0.5f, 0.0f}, logit_kind::ties, 8, "top-p inside equal logits");
  c(4097, {1.0f, 0.05f, 0.0f}, logit_kind::ties, 8, "top-p 0.05 inside equal logits");
  c(4097, {1.0f, 0.7f, 0.0f}, logit_kind::flat, 8, "top-p, flat logits");
  c(4097, {0.9f, 0.6f, 0.0f}, logit_kind::flat_ties, 8, "top-p inside large groups of equal logits");
  c(4097, {1.0f, 0.3f, 0.0f}, logit_kind::all_equal, 3, "every logit equal");
  c(4097, {0.9f, 1.0f, 0.05f}, logit_kind::spread, 6, "min-p");
  c(4097, {0.9f, 0.8f, 0.1f}, logit_kind::specials, 6, "top-p + min-p, NaN / -inf / +-0");
  c(4097, {1.0f, 0.9f, 0.0f}, logit_kind::plus_inf, 3, "+inf logits");
  c(4097, {1.0f, 0.9f, 0.0f}, logit_kind::all_neg_inf, 3, "every logit -inf or NaN");
  c(1000, {1.0f, 0.9f, 0.02f}, logit_kind::spread, 8, "across the RNG's twist", 308);
  c(4097, {1.0f, 1.0f, 0.0f, 40}, logit_kind::flat, 6, "top-k");
  c(4097, {0.8f, 0.9f, 0.0f, 300}, logit_kind::flat_ties, 6, "top-k + top-p inside equal logits");
  c(4097, {1.0f, 0.95f, 0.2f, 2048}, logit_kind::flat, 4, "top-k 2048 + top-p + min-p");
  c(4097, {1.0f, 1.0f, 0.0f, 1}, logit_kind::ties, 4, "top-k 1");
  c(4196, {1.0f, 1.0f, 0.0f, 300}, logit_kind::flat_ties, 4, "top-k, a last row shorter than k");
  c(4097, {1.0f, 0.5f, 0.0f, 64}, logit_kind::all_equal, 3, "top-k of equal logits");
  c(4097, {1.0f, 0.9f, 0.0f, 17}, logit_kind::specials, 4, "top-k, NaN / -inf / +-0");
  c(4097, {0.9f, 1.0f, 0.0f, 0, 1.3f, 0.0f, 0.0f}, logit_kind::flat, 6, "repetition penalty");
  c(4097, {1.0f, 0.9f, 0.0f, 0, 1.0f, 0.4f, 0.25f}, logit_kind::flat, 6, "presence + frequency penalties, top-p");
  c(4097, {0.8f, 0.95f, 0.02f, 40, 1.1f, -0.3f, 0.6f}, logit_kind::specials, 6, "all penalties, top-k, NaN / -inf / +-0");
  c(4097, {1.0f, 1.0f, 0.0f, 0, 1.2f, 0.5f, 0.5f}, logit_kind::plus_inf, 3, "penalties, +inf logits");
  c(129280, {1.0f, 1.0f, 0.0f}, logit_kind::spread, 3, "V4 vocabulary");
  c(129280, {0.7f, 0.95f, 0.05f, 0, 1.05f, 0.2f, 0.1f}, logit_kind::flat, 3, "V4 vocabulary, penalties, top-p + min-p");
  c(129280, {0.7f, 0.95f, 0.0f, 40}, logit_kind::flat_ties, 3, "V4 vocabulary, top-k 40 + top-p");
  c(129280, {1.0f, 1.0f, 0.0f, 1}, logit_kind::flat, 3, "V4 vocabulary, top-k 1");
  c(129280, {1.0f, 0.99f, 0.0f, 2048}, logit_kind::flat_ties, 3, "V4 vocabulary, top-k 2048 + top-p, equal logits");
  c(129280, {0.6f, 0.95f, 0.0f}, logit_kind::spread, 3, "V4 vocabulary, top-p");
  c(129280, {1.0f, 0.9f, 0.0f}, logit_kind::flat, 3, "V4 vocabulary, top-p, flat logits");
  c(129280, {0.7f, 0.5f, 0.01f}, logit_kind::flat_ties, 3, "V4 vocabulary, top-p + min-p, equal logits");
  c(129280, {1.0f, 1.0f, 0.3f}, logit_kind::flat, 3, "V4 vocabulary, min-p, flat logits");

  // logprobs of the raw logits after the choice (kernels::logprobs)
  auto lp = [&](uint32_t n, set st, uint32_t top_n, logit_kind kind, uint32_t draws, const char* note) {
    char name[160];
    std::snprintf(name, sizeof name, "n=%u T=%g top_p=%g top_k=%u top_logprobs=%u %s", n, double(st.temperature),
                  double(st.top_p), st.top_k, top_n, note);
    s.run("logprobs", "-", name, [=, &s](uint64_t seed, R& info) {
      return logprobs_case(s, seed, n, st, top_n, kind, draws, info);
    });
  };
  lp(1, {1.0f, 1.0f, 0.0f}, 0, logit_kind::spread, 3, "one token");
  lp(7, {0.7f, 0.9f, 0.0f}, 20, logit_kind::spread, 4, "ragged, more alternatives than tokens");
  lp(1000, {0.0f, 1.0f, 0.0f}, 5, logit_kind::spread, 4, "greedy");
  lp(4097, {1.0f, 0.9f, 0.0f}, 20, logit_kind::ties, 4, "alternatives among equal logits");
  lp(4097, {0.8f, 1.0f, 0.0f}, 7, logit_kind::specials, 4, "NaN / -inf / +-0");
  lp(4097, {1.0f, 1.0f, 0.0f}, 3, logit_kind::plus_inf, 3, "+inf logits (NaN logprobs)");
  lp(4097, {1.0f, 0.9f, 0.0f}, 2, logit_kind::all_neg_inf, 3, "every logit -inf or NaN");
  lp(4196, {1.0f, 1.0f, 0.0f, 40}, 64, logit_kind::flat_ties, 3, "top-k, 64 alternatives in two stages");
  lp(129280, {0.0f, 1.0f, 0.0f}, 20, logit_kind::spread, 3, "V4 vocabulary, greedy");
  lp(129280, {0.7f, 0.95f, 0.0f}, 1, logit_kind::flat, 3, "V4 vocabulary, top-p");
  lp(129280, {1.0f, 1.0f, 0.05f}, 5, logit_kind::flat_ties, 3, "V4 vocabulary, min-p, equal logits");
}

}  // namespace cmfx::parity
