#include "dsv41_engram.hpp"

#include <limits>
#include <stdexcept>
#include <string>

#include "cmfx/core/error.hpp"
#include "cmfx/text/engram_map.hpp"
#include "model_tokenizer.hpp"
#include "cmfx/formats/format_list.hpp"
#include "dsv41_weights.hpp"

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

bool dsv41_engram_needs_tokenizer(const dsv41_config& c) {
  if (c.engram_layers.empty() || c.engram_token_map == "mod") return false;
  if (c.engram_token_map.empty() || c.engram_token_map == "tokenizer") return true;
  throw usage_error("V4.1 config: engram_token_map \"" + c.engram_token_map +
                    "\" is unknown (absent or \"tokenizer\": built from the tokenizer; \"mod\": the toy's rule)");
}

std::vector<int32_t> dsv41_engram_tokenizer_map(const std::string& model_path, const dsv41_config& c) {
  const std::string what = "Engram: the compressed token map is built from the model's tokenizer (spec §4.4): ";
  const model_tokenizer t = [&] {
    try {
      return load_model_tokenizer(model_path, "");
    } catch (const usage_error& e) {
      std::string m = e.what();  // its "--tokenizer" hint does not apply here: the map needs the model's own
      if (const size_t h = m.find("; pass --tokenizer"); h != std::string::npos) m.resize(h);
      throw usage_error(what + m + " (ship the release's tokenizer.json beside its shards, or in the CMF vocab "
                               "section)");
    }
  }();
  if (t.tok.vocab_size() != c.vocab)
    throw usage_error(what + t.source + " holds " + std::to_string(t.tok.vocab_size()) + " token ids, the model " +
                      std::to_string(c.vocab) + " (wrong tokenizer?)");
  return engram_build_token_map(t.tok).map;
}

engram_token_map dsv41_engram_token_map(const dsv41_config& c, const engram_config& ec,
                                        std::span<const int32_t> built) {
  if (ec.compressed_vocab == 0) throw usage_error("V4.1 config: engram_compressed_vocab_size must be > 0");
  std::vector<int32_t> m;
  if (!dsv41_engram_needs_tokenizer(c)) {
    m.resize(ec.vocab);
    for (uint32_t i = 0; i < ec.vocab; ++i) m[i] = int32_t(i % ec.compressed_vocab);
  } else {
    if (built.empty())
      throw usage_error("Engram: no compressed token map: it is built from the model's tokenizer when the model is "
                        "loaded (dsv41_load), and this model has none");
    m.assign(built.begin(), built.end());
  }
  try {
    return engram_token_map(std::move(m), ec);
  } catch (const std::invalid_argument& e) {
    const char* who = dsv41_engram_needs_tokenizer(c) ? "Engram map from the tokenizer: " : "V4.1 config: ";
    throw usage_error(std::string(who) + e.what());
  }
}

void dsv41_engram_row_ids(const dsv41_engram& eg, size_t e, std::span<const uint32_t> cids, uint64_t t, int64_t* out) {
  const uint32_t n = eg.cfg.max_ngram;
  if (t >= cids.size()) throw std::logic_error("dsv41_engram_row_ids: position past the id history");
  std::array<int64_t, engram_ngram_state::max_shifts> sh{};
  for (uint32_t s = 0; s < n; ++s) sh[s] = t >= s ? int64_t(cids[t - s]) : int64_t(eg.map.pad());
  engram_row_ids(eg.layout.layer(e), eg.cfg.n_heads, sh, out);
}

void dsv41_engram_token_rows(const dsv41_engram& eg, size_t e, const dsv41_layer_w& L, std::span<const uint32_t> cids,
                             uint64_t t, std::span<int64_t> rows, float* E) {
  const engram_config& ec = eg.cfg;
  const uint64_t cols = ec.cols(), hd = ec.head_dim;
  if (rows.size() != cols) throw std::logic_error("dsv41_engram_token_rows: row scratch of the wrong size");
  dsv41_engram_row_ids(eg, e, cids, t, rows.data());
  if (L.eg_table_fp8.data) {
    engram_gather(L.eg_table_fp8, ec, rows, E);
    return;
  }
  visit_format(L.eg_embed.fmt, [&]<class F>() {
    for (uint64_t k = 0; k < cols; ++k) {
      if (rows[k] < 0 || uint64_t(rows[k]) >= L.eg_embed.rows())
        throw std::out_of_range("engram table: row " + std::to_string(rows[k]) + " outside the table");
      F::decode_row(L.eg_embed.v, uint64_t(rows[k]), E + k * hd);
    }
  });
  for (uint64_t k = 0; k < cols * hd; ++k) E[k] = bfloat16::decode(bfloat16::encode(E[k]));
}

}  // namespace cmfx::driver
