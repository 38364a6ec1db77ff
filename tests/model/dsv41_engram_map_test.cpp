// The V4.1 load builds Engram's compressed token map from the model's tokenizer (driver/model/dsv41_engram.*,
// include/cmfx/text/engram_map.hpp, spec §4.4) when the config states no "mod" rule, as the official code does:
//   - a release-layout toy whose config drops `engram_token_map` opens with the tokenizer.json beside it, its map is
//     the library's map of that tokenizer, and the forward uses it (logits differ from the "mod" map's);
//   - a CMF file's vocab section feeds the same map;
//   - no tokenizer, a tokenizer of another size, a compressed size the map does not have, an unknown rule: errors
//     that say so.
// The tokenizer is synthetic (the toy embeds 129,280 ids; the DeepSeek-V3 tokenizer.json holds 128,815): the 256
// byte tokens, then pairs " W<j>" / "w<j>" that normalise to one key. The key rules themselves are checked against
// Python in tests/text/engram_map_test.cpp.
#include <gtest/gtest.h>
#include <unistd.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <functional>
#include <nlohmann/json.hpp>
#include <random>
#include <string>
#include <vector>

#include "cmfx/core/error.hpp"
#include "cmfx/text/byte_level.hpp"
#include "cmfx/text/engram_map.hpp"
#include "commands.hpp"
#include "model/dsv41_engram.hpp"
#include "model/dsv41_forward.hpp"
#include "toy_model_dir.hpp"

using namespace cmfx;
using namespace cmfx::driver;
namespace fs = std::filesystem;

namespace {

test::toy_model_dir& dir() {
  static test::toy_model_dir d("v41map", "v41");
  return d;
}

std::string bl(std::string_view raw) {
  const auto& t = text::byte_level();
  std::string s;
  for (const unsigned char b : raw) s.append(t.utf8[b].data(), t.utf8_len[b]);
  return s;
}

/// A tokenizer.json with `ids` ids (see the file comment); returns its path.
std::string synthetic_tokenizer(const std::string& name, uint32_t ids) {
  const fs::path p = dir().root() / name;
  if (fs::exists(p)) return p.string();
  nlohmann::json vocab = nlohmann::json::object();
  for (unsigned b = 0; b < 256; ++b) vocab[bl(std::string(1, char(b)))] = b;
  for (uint32_t i = 256; i < ids; ++i)
    vocab[bl((i % 2 == 0 ? " W" : "w") + std::to_string((i - 256) / 2))] = i;
  const nlohmann::json j = {
      {"version", "1.0"},
      {"added_tokens", nlohmann::json::array()},
      {"normalizer", nullptr},
      {"pre_tokenizer",
       {{"type", "Sequence"},
        {"pretokenizers",
         {{{"type", "ByteLevel"}, {"add_prefix_space", false}, {"trim_offsets", true}, {"use_regex", false}}}}}},
      {"post_processor", nullptr},
      {"decoder", {{"type", "ByteLevel"}}},
      {"model", {{"type", "BPE"}, {"dropout", nullptr}, {"unk_token", nullptr}, {"vocab", vocab},
                 {"merges", nlohmann::json::array()}}}};
  std::ofstream(p) << j.dump();
  return p.string();
}

std::string make_toy(const std::string& name, const std::string& layout, const std::string& tokenizer = "") {
  return dir().make(name, layout, "f32", tokenizer);
}

/// A copy of the release toy (shards symlinked) with an edited text config and, optionally, a tokenizer.json.
std::string variant(const std::string& name, const std::function<void(nlohmann::json&)>& edit,
                    const std::string& tokenizer) {
  const std::string rel = make_toy("rel-f32", "release");
  const fs::path d = dir().root() / name;
  fs::create_directories(d);
  for (const auto& e : fs::directory_iterator(rel))
    if (e.path().filename() != "config.json" && e.path().filename() != "tokenizer.json" &&
        !fs::exists(d / e.path().filename()))
      fs::create_symlink(fs::absolute(e.path()), d / e.path().filename());
  if (!tokenizer.empty() && !fs::exists(d / "tokenizer.json")) fs::create_symlink(tokenizer, d / "tokenizer.json");
  nlohmann::json j;
  std::ifstream(fs::path(rel) / "config.json") >> j;
  edit(j["text_config"]);
  std::ofstream(d / "config.json") << j.dump(1);
  return d.string();
}

/// Small odd multipliers that stay within the int64 bound of any compressed size used here.
void small_multipliers(nlohmann::json& t) {
  nlohmann::json m = nlohmann::json::array();
  for (size_t l = 0; l < t["engram_layer_ids"].size(); ++l) m.push_back({3 + 8 * l, 5 + 8 * l, 7 + 8 * l, 9 + 8 * l});
  t["engram_multipliers"] = m;
}

std::string error_of(const std::string& path) {
  try {
    dsv41_options o;
    o.threads = 1;
    (void)dsv41_model::open(path, o);
  } catch (const usage_error& e) {
    return e.what();
  }
  return "";
}

std::vector<float> run(const std::string& path, const std::vector<uint32_t>& ids) {
  dsv41_options o;
  o.threads = 2;
  auto m = dsv41_model::open(path, o);
  dsv41_state st = m->new_state();
  return m->forward(ids, st, dsv41_logits::all);
}

constexpr uint32_t kToyVocab = 129280;

TEST(Dsv41EngramMap, ReleaseBuildsTheMapFromItsTokenizer) {
  const std::string tj = synthetic_tokenizer("tok.json", kToyVocab);
  const engram_compressed_map want = engram_build_token_map(tokenizer::from_file(tj));
  ASSERT_EQ(want.map.size(), kToyVocab);
  EXPECT_EQ(want.map[256], want.map[257]);  // " W0" and "w0"
  EXPECT_NE(want.map[256], want.map[258]);
  const uint32_t cv = want.compressed;
  const std::string built = variant("eg-tok", [&](nlohmann::json& t) {
    t.erase("engram_token_map");
    t["engram_compressed_vocab_size"] = cv;
    small_multipliers(t);
  }, tj);
  const std::string mod = variant("eg-mod", [&](nlohmann::json& t) {
    t["engram_compressed_vocab_size"] = cv;
    small_multipliers(t);
  }, tj);
  {
    dsv41_options o;
    o.threads = 1;
    const auto m = dsv41_model::open(built, o);
    EXPECT_EQ(m->weights().engram_map, want.map);
  }
  std::mt19937_64 rng(20261129);
  std::vector<uint32_t> ids(24);
  for (auto& x : ids) x = uint32_t(256 + rng() % (kToyVocab - 256));
  const std::vector<float> a = run(built, ids), b = run(mod, ids);
  ASSERT_EQ(a.size(), b.size());
  double diff = 0;
  for (size_t i = 0; i < a.size(); ++i) {
    ASSERT_TRUE(std::isfinite(a[i])) << i;
    diff = std::max(diff, double(std::fabs(a[i] - b[i])));
  }
  EXPECT_GT(diff, 0.0) << "the forward did not use the tokenizer-derived map";
}

TEST(Dsv41EngramMap, CmfVocabSectionFeedsTheMap) {
  const std::string tj = synthetic_tokenizer("tok.json", kToyVocab);
  const std::string cmf = make_toy("toy-tok.cmf", "cmf", tj);
  const dsv41_config c = dsv41_load(cmf).cfg;  // the toy states "mod": nothing built at load
  EXPECT_FALSE(dsv41_engram_needs_tokenizer(c));
  EXPECT_EQ(dsv41_engram_tokenizer_map(cmf, c), engram_build_token_map(tokenizer::from_file(tj)).map);
  const std::string bare = make_toy("toy.cmf", "cmf");
  try {
    (void)dsv41_engram_tokenizer_map(bare, c);
    ADD_FAILURE() << "a CMF file without a vocab section gave a map";
  } catch (const usage_error& e) {
    EXPECT_NE(std::string(e.what()).find("no vocab section"), std::string::npos) << e.what();
  }
}

TEST(Dsv41EngramMap, MissingOrWrongTokenizerIsAClearError) {
  const std::string tj = synthetic_tokenizer("tok.json", kToyVocab);
  const uint32_t cv = engram_build_token_map(tokenizer::from_file(tj)).compressed;
  const auto drop = [&](uint32_t size) {
    return [size](nlohmann::json& t) {
      t.erase("engram_token_map");
      t["engram_compressed_vocab_size"] = size;
      small_multipliers(t);
    };
  };
  const std::string none = error_of(variant("eg-none", drop(cv), ""));
  EXPECT_NE(none.find("compressed token map"), std::string::npos) << none;
  EXPECT_NE(none.find("tokenizer.json does not exist"), std::string::npos) << none;
  const std::string size = error_of(variant("eg-size", drop(cv + 1), tj));
  EXPECT_NE(size.find(std::to_string(cv) + " compressed ids"), std::string::npos) << size;
  const std::string small = error_of(variant("eg-small", drop(cv), synthetic_tokenizer("small.json", 1000)));
  EXPECT_NE(small.find("holds 1000 token ids"), std::string::npos) << small;
  const std::string rule = error_of(variant("eg-rule", [](nlohmann::json& t) { t["engram_token_map"] = "bogus"; }, tj));
  EXPECT_NE(rule.find("\"bogus\" is unknown"), std::string::npos) << rule;
}

}  // namespace
