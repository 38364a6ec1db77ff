#include "dsv41_engram.hpp"

#include <cmath>
#include <set>
#include <stdexcept>

#include "cmfx/core/error.hpp"

namespace cmfx::driver {

namespace {

bool is_prime(uint64_t n) {
  if (n < 2) return false;
  for (uint64_t p = 2; p * p <= n; ++p)
    if (n % p == 0) return false;
  return true;
}

}  // namespace

dsv41_engram_layout dsv41_engram_make_layout(const dsv41_config& c) {
  dsv41_engram_layout L;
  L.orders = c.engram_max_ngram - 1;
  L.heads = c.engram_heads;
  std::set<uint64_t> seen;
  for (size_t e = 0; e < c.engram_layers.size(); ++e) {
    std::vector<uint64_t> pr, off;
    uint64_t sum = 0;
    for (uint32_t o = 0; o < L.orders; ++o) {
      uint64_t cur = c.engram_vocab_size - 1;  // restarts per order; used primes are skipped
      for (uint32_t h = 0; h < L.heads; ++h) {
        do ++cur;
        while (!is_prime(cur) || seen.count(cur));
        seen.insert(cur);
        pr.push_back(cur);
        off.push_back(sum);
        sum += cur;
      }
    }
    if (e < c.engram_num_embeddings.size() && c.engram_num_embeddings[e] != sum)
      throw usage_error("V4.1 config: engram_num_embeddings[" + std::to_string(e) + "] = " +
                        std::to_string(c.engram_num_embeddings[e]) + ", but the hash primes sum to " + std::to_string(sum));
    L.primes.push_back(std::move(pr));
    L.offs.push_back(std::move(off));
    L.rows.push_back(sum);
    L.mult.push_back(c.engram_multipliers.at(e));
  }
  return L;
}

uint32_t dsv41_engram_compress(const dsv41_config& c, uint32_t token) {
  if (c.engram_token_map == "mod") return uint32_t(token % c.engram_compressed_vocab);
  throw usage_error("Engram: the compressed token map of the release (built from the tokenizer, spec §4.4) is not "
                    "implemented yet; this build runs Engram only with the toy's \"mod\" map");
}

void dsv41_engram_rows(const dsv41_engram_layout& L, uint32_t e, std::span<const uint64_t> hist,
                       std::span<uint64_t> rows) {
  const std::vector<int64_t>& m = L.mult[e];
  if (hist.size() != L.orders + 1 || rows.size() != size_t(L.orders) * L.heads)
    throw std::invalid_argument("dsv41_engram_rows: size mismatch");
  // Products stay below 2^63 (multipliers < INT64_MAX / compressed vocab), XOR keeps them non-negative.
  int64_t r = int64_t(hist[0]) * m[0];
  for (uint32_t s = 1; s <= L.orders; ++s) {
    r ^= int64_t(hist[s]) * m[s];
    for (uint32_t h = 0; h < L.heads; ++h) {
      const size_t k = size_t(s - 1) * L.heads + h;
      rows[k] = uint64_t(r) % L.primes[e][k] + L.offs[e][k];
    }
  }
}

void dsv41_engram_gate(std::span<float> X, std::span<const float> kv, std::span<const float> q_w,
                       std::span<const float> k_w, uint32_t hc, double eps) {
  const size_t d = X.size() / hc;
  if (kv.size() != (hc + 1) * d || q_w.size() != hc * d || k_w.size() != hc * d)
    throw std::invalid_argument("dsv41_engram_gate: size mismatch");
  const float* value = kv.data() + size_t(hc) * d;
  for (uint32_t c = 0; c < hc; ++c) {
    float* x = X.data() + c * d;
    const float* key = kv.data() + c * d;
    double sx = 0, sk = 0, dot = 0;
    for (size_t i = 0; i < d; ++i) {
      sx += double(x[i]) * x[i];
      sk += double(key[i]) * key[i];
      dot += double(x[i]) * double(q_w[c * d + i] * k_w[c * d + i]) * double(key[i]);
    }
    const double rstd = 1.0 / std::sqrt(sx / double(d) + eps) / std::sqrt(sk / double(d) + eps);
    dot *= rstd / std::sqrt(double(d));
    const double g = 1.0 / (1.0 + std::exp(-std::copysign(std::sqrt(std::max(std::fabs(dot), 1e-6)), dot)));
    const float gf = float(g);
    for (size_t i = 0; i < d; ++i) x[i] += gf * value[i];
  }
}

}  // namespace cmfx::driver
