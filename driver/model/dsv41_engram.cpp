#include "dsv41_engram.hpp"

#include <limits>
#include <stdexcept>
#include <string>

#include "cmfx/core/error.hpp"

namespace cmfx::driver {

engram_config dsv41_engram_config(const dsv41_config& c) {
  engram_config e;
  auto u32 = [](uint64_t v, const char* what) {
    if (v > std::numeric_limits<uint32_t>::max()) throw usage_error(std::string("V4.1 config: ") + what + " too large");
    return uint32_t(v);
  };
  if (c.engram_max_ngram < 2 || c.engram_max_ngram > engram_ngram_state::max_shifts)
    throw usage_error("V4.1 config: engram_max_ngram_size " + std::to_string(c.engram_max_ngram) + " outside [2, " +
                      std::to_string(engram_ngram_state::max_shifts) + "]");
  e.layer_ids = c.engram_layers;
  e.max_ngram = c.engram_max_ngram;
  e.n_heads = c.engram_heads;
  e.head_dim = c.engram_head_dim;
  e.vocab = c.vocab;
  e.compressed_vocab = u32(c.engram_compressed_vocab, "engram_compressed_vocab_size");
  e.pad_token = c.engram_pad_id;
  e.engram_vocab = c.engram_vocab_size;
  e.num_embeddings = c.engram_num_embeddings;
  e.multipliers = c.engram_multipliers;
  e.hidden = c.dim;
  e.hc = c.hc;
  e.eps = float(c.norm_eps);
  return e;
}

engram_token_map dsv41_engram_token_map(const dsv41_config& c, const engram_config& ec) {
  if (c.engram_token_map != "mod")
    throw usage_error("Engram: the compressed token map of the release (built from the tokenizer, spec §4.4) is not "
                      "implemented yet; this build runs Engram only with the toy's \"mod\" map");
  if (ec.compressed_vocab == 0) throw usage_error("V4.1 config: engram_compressed_vocab_size must be > 0");
  std::vector<int32_t> m(ec.vocab);
  for (uint32_t i = 0; i < ec.vocab; ++i) m[i] = int32_t(i % ec.compressed_vocab);
  try {
    return engram_token_map(std::move(m), ec);
  } catch (const std::invalid_argument& e) {
    throw usage_error(std::string("V4.1 config: ") + e.what());
  }
}

void dsv41_engram_row_ids(const dsv41_engram& eg, size_t e, std::span<const uint32_t> cids, uint64_t t, int64_t* out) {
  const uint32_t n = eg.cfg.max_ngram;
  if (t >= cids.size()) throw std::logic_error("dsv41_engram_row_ids: position past the id history");
  std::array<int64_t, engram_ngram_state::max_shifts> sh{};
  for (uint32_t s = 0; s < n; ++s) sh[s] = t >= s ? int64_t(cids[t - s]) : int64_t(eg.map.pad());
  engram_row_ids(eg.layout.layer(e), eg.cfg.n_heads, sh, out);
}

}  // namespace cmfx::driver
