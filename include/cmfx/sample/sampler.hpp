#pragma once
/// @file sampler.hpp
/// @brief Choosing the next token from the logits of one position [vocab]: greedy, temperature, top-k, top-p,
///        min-p, repetition / presence / frequency penalties, seeded and platform-independent, with logprobs.
///
/// @code
///   cmfx::sampling_params sp;  sp.temperature = 0.7f;  sp.top_p = 0.9f;  sp.seed = 42;  sp.stop_tokens = {1};
///   cmfx::sampler s(vocab_size, sp);
///   s.set_prompt(prompt_ids);                      // the repetition penalty counts prompt tokens as seen
///   for (;;) {
///     const cmfx::sample_result& r = s.sample(logits);   // chooses AND records r.token (penalty counts)
///     if (r.stop) break;  ...
///   }
/// @endcode
///
/// Order of operations in sample() (each step on float32 logits z; probabilities in float64):
///   1. NaN logits become −inf.
///   2. Penalties, on every token seen so far — repetition (Hugging Face RepetitionPenaltyLogitsProcessor):
///      z ← z < 0 ? z·r : z/r for tokens of the prompt (set_prompt) or of the output; then presence and frequency
///      (OpenAI): z ← z − c·frequency − [c > 0]·presence, c = the token's count in the OUTPUT (accept()/sample()),
///      as vLLM applies them. Penalties act in greedy mode too.
///   3. temperature ≤ 0: greedy — the largest z, the LOWER index on ties (topk.hpp's rule); steps 4–8 skipped, no
///      random number drawn. (With a temperature every sample() draws exactly one random number, also when the
///      largest z is ±inf and the first such token is chosen without it: a device sampler continuing the stream
///      stays in step — gpu::kernels::sample.)
///   4. Temperature: z ← z / T.
///   5. top-k (k > 0): keep the k largest z (ties: lower index first; exactly k are kept).
///   6. top-p (p < 1): over the tokens left, in descending order (same tie rule), keep each token while the
///      probability mass of the tokens before it is < p (the smallest prefix whose mass reaches p; at least one).
///      Masses are summed in fixed point (≈ 2^-36 of the largest probability for a 129k vocabulary), exactly, so
///      the cut does not depend on summation order; found through 1024 buckets of z and a weighted quickselect
///      inside the bucket holding the cut, O(vocab).
///   7. min-p (> 0): keep tokens with probability ≥ min_p · (largest probability), i.e. exp(z − z_max) ≥ min_p;
///      unaffected by the renormalisations of 5–6, since it compares ratios.
///   8. Sample: one uniform u in [0, 1) from rng.hpp; the token where the cumulative weight exp(z − z_max) of the
///      kept tokens (in the order they are held: descending after top-k, index order otherwise) first exceeds u·Σ.
///      The weights come from exp_weights.hpp (float64, < 4e-16 relative error, the same bits on every machine);
///      the cumulative sum is taken per block of 64 weights, then over the block sums (pick(): a fixed order).
/// The same seed, parameters, prompt and logits give the same tokens everywhere: the RNG is fully specified, the
/// orderings are total orders, sums run in a fixed order in float64 (top-p: exact integer sums), and the exp is
/// written out. A different summation order or exp could change a choice only where u·Σ falls within ~1e-15
/// of a boundary between two tokens (tests/sample compare the choices with a long-double softmax reference).
/// Cost (129,280 logits, temperature only, dev machine): one pass for NaN / temperature / maximum, one
/// vectorised exp pass, one summing pass.
///
/// Logprobs (OpenAI `logprobs` / `top_logprobs`): log-softmax, in float64 (logsumexp_parts: the exp and the
/// summation order fixed, so that a device computes the same bits), of the distribution BEFORE any
/// truncation (top-k/top-p/min-p) — by default of the raw model logits (logprob_source::raw, vLLM's default
/// `raw_logprobs`: what the model predicted, independent of sampling settings); logprob_source::processed uses
/// the logits after penalties and temperature (steps 1–4; in greedy mode after penalties only). The chosen
/// token's logprob is reported even when truncation made it the only candidate. top_logprobs: the N most likely
/// tokens, ties → lower index.
///
/// Memory: all buffers are sized at construction (O(vocab)); sample() allocates nothing. Not thread-safe: one
/// sampler per sequence.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <span>
#include <stdexcept>
#include <string>
#include <vector>

#include "cmfx/core/error.hpp"
#include "cmfx/ops/topk.hpp"
#include "cmfx/sample/rng.hpp"
#include "cmfx/sample/vocab_pass.hpp"

namespace cmfx {

enum class logprob_source { raw, processed };

struct sampling_params {
  float temperature = 1.0f;         // ≤ 0: greedy
  int32_t top_k = 0;                // ≤ 0: off
  float top_p = 1.0f;               // in (0, 1]; 1: off
  float min_p = 0.0f;               // in [0, 1]; 0: off
  float repetition_penalty = 1.0f;  // > 0; 1: off
  float presence_penalty = 0.0f;    // OpenAI range −2..2 (not enforced)
  float frequency_penalty = 0.0f;
  uint64_t seed = 0;
  bool logprobs = false;            // report the chosen token's logprob
  int32_t top_logprobs = 0;         // and this many alternatives (implies logprobs)
  logprob_source logprobs_from = logprob_source::raw;
  std::vector<int32_t> stop_tokens;  // sample_result::stop is set when one is chosen (e.g. EOS = 1)
  /// The sampler's choice is then the argmax of the raw logits (lowest id on ties) and it reports nothing else:
  /// greedy, no penalties, no logprobs (top_k / top_p / min_p cannot change an argmax). A device's own argmax may
  /// stand in for it (greedy decode chained on a GPU).
  bool pure_greedy() const noexcept {
    return temperature <= 0.0f && repetition_penalty == 1.0f && presence_penalty == 0.0f && frequency_penalty == 0.0f &&
           !logprobs && top_logprobs == 0;
  }
  /// What a device computes exactly as sample() does (the host then records the choice with sampler::
  /// accept_drawn): with a temperature, the draw of gpu::kernels::sample — top-p, min-p, a top-k of at most max_top_k
  /// (k ≥ vocab is no top-k) and the penalties (from sampler::penalty_state), one draw of the RNG per token; greedy
  /// without penalties, its argmax. Logprobs only of the raw logits, with at most max_top_logprobs alternatives
  /// (gpu::kernels::logprobs; −1: none at all), over a vocabulary of `vocab`.
  bool device_samplable(size_t vocab, size_t max_top_k = 0, int32_t max_top_logprobs = -1) const noexcept {
    const bool k_ok = top_k <= 0 || static_cast<size_t>(top_k) >= vocab || static_cast<size_t>(top_k) <= max_top_k;
    const bool lp = logprobs || top_logprobs > 0;
    const bool lp_ok = !lp || (logprobs_from == logprob_source::raw && max_top_logprobs >= 0 &&
                               top_logprobs <= max_top_logprobs);
    return (temperature > 0.0f ? k_ok : !has_penalties()) && lp_ok;
  }
  bool has_penalties() const noexcept {
    return repetition_penalty != 1.0f || presence_penalty != 0.0f || frequency_penalty != 0.0f;
  }
};

/// The fractional bits of top-p's fixed-point masses for a vocabulary of `vocab`: vocab · 2^bits ≤ 2^53, so that
/// the sum of every mass is an exact integer in a double (53 − ⌈log2 vocab⌉).
inline int top_p_mass_bits(size_t vocab) noexcept {
  int bits = 53;
  for (size_t v = 1; v < vocab; v *= 2) --bits;
  return bits;
}

struct token_logprob {
  int32_t token;
  float logprob;
};

/// What a token's logprob derives from (sampler::fill_logprobs; a device computes the same two numbers, bit for bit:
/// gpu::kernels::logprobs): m = the largest z (NaN as −inf) and sum = Σ exp(z − m), each weight by sample_exp, in
/// blocks of 64 summed in index order, then the block sums in order (pick()'s order); NaN where m is ±inf.
struct logsumexp_parts {
  float m = 0.0f;
  double sum = 0.0;
};
/// Weights per block in the sampler's fixed summation order (pick(), logsumexp_parts_of; sample.comp's 64).
inline constexpr size_t sample_block = 64;
/// logsumexp_parts of z [n] (NaN already −inf: sanitize); w: scratch of n doubles.
inline logsumexp_parts logsumexp_parts_of(const float* z, size_t n, double* w) noexcept {
  logsumexp_parts p;
  p.m = max_of(z, n);
  if (!std::isfinite(p.m)) {
    p.sum = std::numeric_limits<double>::quiet_NaN();
    return p;
  }
  exp_weights(z, n, static_cast<double>(p.m), w);
  double total = 0.0;
  for (size_t b = 0; b < n; b += sample_block) {
    double s = 0.0;
    for (size_t i = b; i < std::min(n, b + sample_block); ++i) s += w[i];
    total += s;
  }
  p.sum = total;
  return p;
}
/// A token's logprob: z − (m + log sum), in float64, rounded once (z: its logit, NaN as −inf).
inline float logprob_from(float z, const logsumexp_parts& p) noexcept {
  const double lse = static_cast<double>(p.m) + std::log(p.sum);
  return static_cast<float>(static_cast<double>(z) - lse);
}

struct sample_result {
  int32_t token = -1;
  bool stop = false;                          // token is one of the stop tokens
  float logprob = 0.0f;                       // of token (when logprobs are on)
  std::span<const token_logprob> top_logprobs;  // most likely first; valid until the next sample()
};

class sampler {
 public:
  explicit sampler(size_t vocab_size, sampling_params p = {}) : vocab_(vocab_size), rng_(p.seed) {
    if (vocab_size == 0 || vocab_size > std::numeric_limits<int32_t>::max())
      throw usage_error("sampler: vocabulary size must be in 1..2^31-1");
    work_.resize(vocab_);
    cand_.resize(vocab_);
    w_.resize(vocab_);
    wc_.resize(vocab_);
    bsum_.resize((vocab_ + block - 1) / block);
    bin_.resize(vocab_);
    bin_mass_.resize(bins);
    mass_bits_ = top_p_mass_bits(vocab_);  // fixed-point masses for top-p: vocab · 2^bits ≤ 2^53
    counts_.assign(vocab_, 0);
    flags_.assign(vocab_, 0);
    touched_.reserve(vocab_);
    set_params(std::move(p));
  }

  /// New parameters (the seen tokens are kept; the RNG is reseeded only by reset()). May allocate.
  void set_params(sampling_params p) {
    if (!(p.temperature >= 0.0f) && !(p.temperature < 0.0f)) throw usage_error("sampler: temperature is NaN");
    if (!(p.top_p > 0.0f && p.top_p <= 1.0f)) throw usage_error("sampler: top_p must be in (0, 1]");
    if (!(p.min_p >= 0.0f && p.min_p <= 1.0f)) throw usage_error("sampler: min_p must be in [0, 1]");
    if (!(p.repetition_penalty > 0.0f) || !std::isfinite(p.repetition_penalty))
      throw usage_error("sampler: repetition_penalty must be > 0");
    if (!std::isfinite(p.presence_penalty) || !std::isfinite(p.frequency_penalty))
      throw usage_error("sampler: penalties must be finite");
    if (p.top_logprobs < 0) throw usage_error("sampler: top_logprobs must be >= 0");
    for (const int32_t t : stop_list_) flags_[static_cast<size_t>(t)] &= static_cast<uint8_t>(~flag_stop);
    stop_list_.clear();
    for (const int32_t t : p.stop_tokens) {
      if (t < 0 || static_cast<size_t>(t) >= vocab_) throw usage_error("sampler: stop token outside the vocabulary");
      flags_[static_cast<size_t>(t)] |= flag_stop;
      stop_list_.push_back(t);
    }
    p_ = std::move(p);
    top_.resize(std::min(static_cast<size_t>(p_.top_logprobs), vocab_));
    if ((p_.logprobs || p_.top_logprobs > 0) && lp_.size() != vocab_) lp_.resize(vocab_), lpz_.resize(vocab_);
  }
  const sampling_params& params() const noexcept { return p_; }
  size_t vocab_size() const noexcept { return vocab_; }

  /// Tokens the repetition penalty treats as already seen (the prompt, as Hugging Face and vLLM do).
  void set_prompt(std::span<const int32_t> prompt) {
    for (const int32_t t : prompt) {
      check_id(t);
      touch(t);
      flags_[static_cast<size_t>(t)] |= flag_prompt;
    }
  }
  /// Records a generated token chosen elsewhere (sample() records its own choice).
  void accept(int32_t t) {
    check_id(t);
    touch(t);
    ++counts_[static_cast<size_t>(t)];
  }
  /// Records a token a device chose from this sampler's RNG state (params().device_samplable): accept(t) and, with
  /// a temperature, the one draw it made (a greedy choice draws nothing).
  void accept_drawn(int32_t t) {
    accept(t);
    if (p_.temperature > 0.0f) (void)rng_.next();
  }
  /// The RNG's state: where the next draw continues (a device sampler starts from it).
  const mt19937_64_state& rng_state() const noexcept { return rng_.state(); }
  /// What the penalties depend on, one word per token (a device sampler's `seen`): the token's count in the output,
  /// bit 31 set for a token of the prompt (set_prompt).
  void penalty_state(std::span<uint32_t> out) const {
    if (out.size() != vocab_) throw usage_error("sampler: penalty_state needs one word per token");
    for (size_t i = 0; i < vocab_; ++i) out[i] = counts_[i] | ((flags_[i] & flag_prompt) ? 0x80000000u : 0u);
  }
  /// Forgets prompt and output, reseeds the RNG with params().seed.
  void reset() {
    for (const int32_t t : touched_) {
      counts_[static_cast<size_t>(t)] = 0;
      flags_[static_cast<size_t>(t)] &= flag_stop;
    }
    touched_.clear();
    rng_.seed(p_.seed);
  }
  uint32_t count(int32_t t) const { return counts_.at(static_cast<size_t>(t)); }

  /// Chooses the next token (and records it); the reference is valid until the next call.
  const sample_result& sample(std::span<const float> logits) {
    if (logits.size() != vocab_)
      throw usage_error("sampler: " + std::to_string(logits.size()) + " logits for a vocabulary of " +
                        std::to_string(vocab_));
    const size_t n = vocab_;
    sanitize(logits.data(), work_.data(), n);
    apply_penalties();

    int32_t tok;
    const bool greedy = !(p_.temperature > 0.0f);
    const float zmax = greedy ? max_of(work_.data(), n) : divide_max(work_.data(), n, p_.temperature);
    cand_identity_ = false;
    if (greedy || !std::isfinite(zmax)) {
      tok = first_of(work_, zmax);
      cand_[0] = {work_[static_cast<size_t>(tok)], static_cast<uint32_t>(tok)};
      ncand_ = 1;
      if (!greedy) (void)rng_.next();  // one draw per sampled token, whatever the logits (the device sampler's rule)
    } else {
      tok = draw(zmax);
    }

    res_ = sample_result{};
    res_.token = tok;
    res_.stop = (flags_[static_cast<size_t>(tok)] & flag_stop) != 0;
    if (p_.logprobs || p_.top_logprobs > 0) fill_logprobs(p_.logprobs_from == logprob_source::raw ? logits : work_, tok);
    accept(tok);
    return res_;
  }

  /// The logits after penalties and temperature (steps 1–4) of the last sample().
  std::span<const float> processed_logits() const noexcept { return work_; }
  /// The tokens that survived top-k/top-p/min-p in the last sample() (in the order sampled over; the chosen
  /// token alone after a greedy choice).
  std::vector<int32_t> last_candidates() const {
    std::vector<int32_t> r(ncand_);
    for (size_t i = 0; i < ncand_; ++i)
      r[i] = cand_identity_ ? static_cast<int32_t>(i) : static_cast<int32_t>(cand_[i].index);
    return r;
  }

 private:
  static constexpr float inf = std::numeric_limits<float>::infinity();
  static constexpr uint8_t flag_prompt = 1, flag_stop = 2, flag_touched = 4;

  void check_id(int32_t t) const {
    if (t < 0 || static_cast<size_t>(t) >= vocab_) throw usage_error("sampler: token id outside the vocabulary");
  }
  void touch(int32_t t) {
    uint8_t& f = flags_[static_cast<size_t>(t)];
    if (!(f & flag_touched)) {
      f |= flag_touched;
      touched_.push_back(t);  // capacity reserved for the whole vocabulary: never reallocates
    }
  }

  void apply_penalties() {
    if (!p_.has_penalties()) return;
    const float rep = p_.repetition_penalty, pres = p_.presence_penalty, freq = p_.frequency_penalty;
    for (const int32_t t : touched_) {
      const auto i = static_cast<size_t>(t);
      float& z = work_[i];
      const uint32_t c = counts_[i];
      if (rep != 1.0f && (c > 0 || (flags_[i] & flag_prompt))) z = z < 0.0f ? z * rep : z / rep;
      if (c > 0) z -= static_cast<float>(c) * freq + pres;
    }
  }

  // The first index holding zmax, the largest value (greedy: the lower index wins ties).
  static int32_t first_of(std::span<const float> z, float zmax) {
    for (size_t i = 0; i < z.size(); ++i)
      if (z[i] == zmax) return static_cast<int32_t>(i);
    return 0;  // unreachable: zmax is one of the values
  }

  // Steps 5–8 on work_ (already divided by the temperature); zmax = its largest value (finite).
  // w_[token] = exp(z − z_max) (exp_weights.hpp) is computed once per candidate and shared by top-p, min-p and the
  // draw. Without top-k the whole vocabulary is weighed in one vectorised pass, and without top-p / min-p the
  // candidates are the vocabulary itself in index order (cand_identity_: cand_ is not written).
  int32_t draw(float zmax) {
    const size_t n = vocab_;
    const double m = zmax;
    size_t cnt = n;
    bool ident = false;
    const bool top_k = p_.top_k > 0 && static_cast<size_t>(p_.top_k) < n;
    if (top_k) {
      cnt = best_entries(work_, static_cast<size_t>(p_.top_k), cand_);
      for (size_t i = 0; i < cnt; ++i) w_[cand_[i].index] = sample_exp(static_cast<double>(cand_[i].value) - m);
    } else {
      exp_weights(work_.data(), n, m, w_.data());
      ident = true;
    }
    if (p_.top_p < 1.0f) {
      if (ident)
        for (size_t i = 0; i < n; ++i) cand_[i] = {work_[i], static_cast<uint32_t>(i)};
      ident = false;
      cnt = top_p_cut(cnt, top_k, m);
    }
    if (p_.min_p > 0.0f) {
      const double minp = p_.min_p;
      size_t w = 0;
      if (ident) {
        for (size_t i = 0; i < n; ++i)
          if (w_[i] >= minp) cand_[w++] = {work_[i], static_cast<uint32_t>(i)};
      } else {
        for (size_t i = 0; i < cnt; ++i)
          if (w_[cand_[i].index] >= minp) cand_[w++] = cand_[i];
      }
      ident = false;
      cnt = w;  // the largest (weight 1) always stays
    }
    ncand_ = cnt;
    cand_identity_ = ident;
    const double* wv = w_.data();
    if (!ident) {
      for (size_t i = 0; i < cnt; ++i) wc_[i] = w_[cand_[i].index];
      wv = wc_.data();
    }
    const size_t j = pick(wv, cnt, rng_.uniform());
    return static_cast<int32_t>(ident ? j : cand_[j].index);
  }

  // Step 8 over the weights wv[0..cnt): blocks of `block` weights; S_b = the block's weights summed in order,
  // total = the S_b summed in order, r = u·total. The chosen block is the first whose running total
  // P_{b+1} = P_b + S_b exceeds r, the chosen entry the first j in it whose in-block running sum exceeds r − P_b.
  // (Where rounding finds none: the last entry with a non-zero weight in that block, or overall.) Four blocks are
  // summed side by side, so the pass is not one long chain of dependent additions; the result is the same.
  size_t pick(const double* wv, size_t cnt, double u) {
    const size_t nb = (cnt + block - 1) / block, full = cnt / block;
    size_t b = 0;
    for (; b + 4 <= full; b += 4) {
      const double* p = wv + b * block;
      double s0 = 0.0, s1 = 0.0, s2 = 0.0, s3 = 0.0;
      for (size_t j = 0; j < block; ++j) {
        s0 += p[j];
        s1 += p[block + j];
        s2 += p[2 * block + j];
        s3 += p[3 * block + j];
      }
      bsum_[b] = s0;
      bsum_[b + 1] = s1;
      bsum_[b + 2] = s2;
      bsum_[b + 3] = s3;
    }
    for (; b < nb; ++b) {
      double s = 0.0;
      for (size_t j = b * block; j < std::min(cnt, (b + 1) * block); ++j) s += wv[j];
      bsum_[b] = s;
    }
    double total = 0.0;
    for (b = 0; b < nb; ++b) total += bsum_[b];
    const double r = u * total;
    double before = 0.0;
    for (b = 0; b < nb; ++b) {
      const double next = before + bsum_[b];
      if (r < next) {
        const double rr = r - before;
        const size_t e = std::min(cnt, (b + 1) * block);
        double s = 0.0;
        for (size_t j = b * block; j < e; ++j) {
          s += wv[j];
          if (rr < s) return j;
        }
        for (size_t j = e; j-- > b * block;)
          if (wv[j] > 0.0) return j;
      }
      before = next;
    }
    for (size_t i = cnt; i-- > 0;)
      if (wv[i] > 0.0) return i;
    return 0;
  }

  // top-p over cand_[0..cnt) (sorted descending when `sorted`, else the whole vocabulary in index order).
  // Masses are w_ in fixed point (mass_bits_ fractional bits, chosen so the total stays below 2^53): integer
  // sums are exact in any order, so the cut is the same however the selection below arranges the entries.
  // Returns the kept count; unsorted input comes back in index order. O(vocab) expected.
  size_t top_p_cut(size_t cnt, bool sorted, double zmax) {
    const double scale = std::ldexp(1.0, mass_bits_);
    auto mass = [&](const topk_entry& e) { return static_cast<uint64_t>(w_[e.index] * scale); };
    uint64_t total = 0;
    for (size_t i = 0; i < cnt; ++i) total += mass(cand_[i]);
    const double target = static_cast<double>(p_.top_p) * static_cast<double>(total);
    if (sorted) {  // keep each token while the mass before it is < target
      uint64_t before = 0;
      size_t keep = 0;
      while (keep < cnt && (keep == 0 || static_cast<double>(before) < target)) before += mass(cand_[keep++]);
      return keep;
    }
    // Bucket by z_max − z (monotone in z, so bins hold consecutive ranks); the cut lies in the first bin where the
    // running mass reaches target. Only that bin needs ordering: a weighted quickselect for K = the smallest count
    // whose top-K mass reaches target. Invariant: K ∈ [lo+1, hi]; the entries ranked above cand_[lo] have mass acc.
    std::fill(bin_mass_.begin(), bin_mass_.end(), uint64_t{0});
    for (size_t i = 0; i < cnt; ++i) {
      const double d = (zmax - static_cast<double>(cand_[i].value)) * (static_cast<double>(bins) / bin_span);
      const auto b = static_cast<uint16_t>(d < static_cast<double>(bins - 1) ? d : static_cast<double>(bins - 1));
      bin_[cand_[i].index] = b;
      bin_mass_[b] += mass(cand_[i]);
    }
    uint64_t acc = 0;
    uint16_t cut_bin = 0;
    while (cut_bin + 1 < bins && static_cast<double>(acc + bin_mass_[cut_bin]) < target) acc += bin_mass_[cut_bin++];
    size_t hi = 0;
    for (size_t i = 0; i < cnt; ++i)
      if (bin_[cand_[i].index] == cut_bin) cand_[hi++] = cand_[i];
    size_t lo = 0;
    while (lo + 1 < hi) {
      const size_t mid = lo + (hi - lo) / 2;
      std::nth_element(cand_.begin() + static_cast<std::ptrdiff_t>(lo), cand_.begin() + static_cast<std::ptrdiff_t>(mid),
                       cand_.begin() + static_cast<std::ptrdiff_t>(hi), topk_before{});
      uint64_t left = acc;
      for (size_t i = lo; i < mid; ++i) left += mass(cand_[i]);
      if (static_cast<double>(left) >= target) {
        hi = mid;
      } else if (static_cast<double>(left + mass(cand_[mid])) >= target) {
        lo = mid;
        hi = mid + 1;
      } else {
        acc = left + mass(cand_[mid]);
        lo = mid + 1;
      }
    }
    // cand_[hi-1] is the K-th entry: keep everything ranked at or before it, gathered in index order.
    const topk_entry last = cand_[hi - 1];
    size_t w = 0;
    for (size_t i = 0; i < vocab_; ++i) {
      const topk_entry e{work_[i], static_cast<uint32_t>(i)};
      if (!topk_before{}(last, e)) cand_[w++] = e;
    }
    return w;
  }

  // The k best entries of z (value descending, lower index first; NaN as −inf) into out[0..k), in order.
  // Small k: one pass keeping a heap of the k best (almost every entry is rejected by one comparison);
  // large k: topk.hpp's nth_element + sort. Both give exactly the first k of the stable descending order.
  static size_t best_entries(std::span<const float> z, size_t k, std::vector<topk_entry>& out) {
    const size_t n = z.size();
    k = std::min(k, n);
    if (k == 0) return 0;
    if (k > 256 || k * 8 > n) {
      for (size_t i = 0; i < n; ++i) out[i] = {std::isnan(z[i]) ? -inf : z[i], static_cast<uint32_t>(i)};
      return topk_entries(std::span<topk_entry>(out.data(), n), k);
    }
    const auto first = out.begin(), heap_end = out.begin() + static_cast<std::ptrdiff_t>(k);
    for (size_t i = 0; i < k; ++i) out[i] = {std::isnan(z[i]) ? -inf : z[i], static_cast<uint32_t>(i)};
    std::make_heap(first, heap_end, topk_before{});  // front: the worst of those kept
    for (size_t i = k; i < n; ++i) {
      const float v = std::isnan(z[i]) ? -inf : z[i];
      if (!(v > out[0].value)) continue;  // a later index with an equal value ranks after the front
      std::pop_heap(first, heap_end, topk_before{});
      out[k - 1] = {v, static_cast<uint32_t>(i)};
      std::push_heap(first, heap_end, topk_before{});
    }
    std::sort_heap(first, heap_end, topk_before{});
    return k;
  }

  void fill_logprobs(std::span<const float> src, int32_t tok) {
    const size_t n = vocab_;
    sanitize(src.data(), lpz_.data(), n);
    const logsumexp_parts p = logsumexp_parts_of(lpz_.data(), n, w_.data());  // the draw is done with w_
    auto lp = [&](size_t i) { return logprob_from(lpz_[i], p); };
    res_.logprob = lp(static_cast<size_t>(tok));
    if (!top_.empty()) {
      const size_t k = best_entries(src, top_.size(), lp_);
      for (size_t i = 0; i < k; ++i) top_[i] = {static_cast<int32_t>(lp_[i].index), lp(lp_[i].index)};
      res_.top_logprobs = std::span<const token_logprob>(top_.data(), k);
    }
  }

  size_t vocab_;
  sampling_params p_;
  sample_rng rng_;
  std::vector<float> work_;
  static constexpr uint16_t bins = 1024;      // top-p buckets over z_max − z ∈ [0, bin_span) (then one last bin)
  static constexpr double bin_span = 32.0;
  static constexpr size_t block = sample_block;  // weights per block in pick()
  std::vector<double> w_, wc_, bsum_;         // weights by token; by candidate; block sums
  bool cand_identity_ = false;                // the last draw's candidates: the whole vocabulary in index order
  int mass_bits_ = 0;
  std::vector<uint16_t> bin_;
  std::vector<uint64_t> bin_mass_;
  std::vector<topk_entry> cand_, lp_;
  std::vector<float> lpz_;  // logprobs: their source, NaN → −inf
  size_t ncand_ = 0;
  std::vector<uint32_t> counts_;
  std::vector<uint8_t> flags_;
  std::vector<int32_t> touched_, stop_list_;
  std::vector<token_logprob> top_;
  sample_result res_;
};

}  // namespace cmfx
