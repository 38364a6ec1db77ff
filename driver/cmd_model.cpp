// `cmfx ppl` (teacher-forced perplexity over token ids or a text file) and `cmfx run --raw-ids` (greedy
// continuation of raw ids) on the CPU model graphs (driver/model/: a V4 or a V4.1 file, told apart by its config).
// Text generation: cmd_run.cpp.
#include <chrono>
#include <cmath>
#include <cstdio>
#include <fstream>
#include <sstream>

#include <nlohmann/json.hpp>

#include "cmfx/core/error.hpp"
#include "commands.hpp"
#include "model/dsv41_forward.hpp"
#include "model/dsv41_weights.hpp"
#include "model/dsv4_forward.hpp"
#include "model/gpu_runner.hpp"
#include "model_tokenizer.hpp"

namespace cmfx::driver {

gpu_run_options gpu_run_options_of(const model_run_options& m, uint64_t ctx) {
  gpu_run_options o;  // (its chunk_streaming stays the default)
  o.device = m.device;
  o.max_ctx = ctx;
  o.expert_act = m.matmul_act;
  o.vram_budget = m.vram_budget;
  o.prefill_chunk = m.prefill_chunk;
  o.gemm = m.gemm;
  o.prefill_experts = m.prefill_experts;
  o.cold = m.cold;
  o.copy_threads = m.copy_threads;
  o.budget_keeps_chunks = m.budget_keeps_chunks;
  return o;
}

namespace {

/// Token ids separated by white space or commas ("0 5 9", "0,5,9", a JSON-like "[0, 5, 9]" without its brackets).
/// A bad entry is named by its index, and shown cut to 40 characters (a mistyped file may hold anything).
std::vector<uint32_t> parse_ids(std::istream& in, const std::string& what) {
  std::vector<uint32_t> ids;
  std::string word;
  while (in >> word) {
    std::string tok;
    std::istringstream parts(word);
    while (std::getline(parts, tok, ',')) {
      if (tok.empty()) continue;  // "1, 2" and "1,2," split into empty pieces
      char* end = nullptr;
      const unsigned long long v = std::strtoull(tok.c_str(), &end, 10);
      if (*end != '\0' || tok[0] == '-' || tok[0] == '+' || v > 0xFFFFFFFFull) {
        const std::string shown = tok.size() > 40 ? tok.substr(0, 40) + "..." : tok;
        throw usage_error(what + ": entry " + std::to_string(ids.size()) + " '" + shown + "' is not a token id");
      }
      ids.push_back(uint32_t(v));
    }
  }
  return ids;
}

dsv4_options options(const model_run_options& m, bool qat) {
  dsv4_options o;
  o.threads = m.threads;
  o.matmul_act = m.matmul_act;
  o.qat_kv_fp8 = o.qat_indexer_fp4 = o.qat_act_fp8 = qat;
  return o;
}

/// V4.1: the cache quantisation is the model's format (always on); --qat adds the FP8 Linear-input fake-quant.
dsv41_options options41(const model_run_options& m, bool qat) {
  dsv41_options o;
  o.threads = m.threads;
  o.matmul_act = m.matmul_act;
  o.qat_act = qat;
  return o;
}

/// The two model graphs behind ppl / --raw-ids: open, logits selection and the tokenizer-check config.
struct v4_graph {
  using model = dsv4_model;
  static constexpr dsv4_logits all = dsv4_logits::all, last = dsv4_logits::last;
  static std::unique_ptr<model> open(const std::string& p, const model_run_options& m, bool qat) {
    return dsv4_model::open(p, options(m, qat));
  }
  static dsv4_config tokenizer_config(const model& m) { return m.config(); }
};
struct v41_graph {
  using model = dsv41_model;
  static constexpr dsv41_logits all = dsv41_logits::all, last = dsv41_logits::last;
  static std::unique_ptr<model> open(const std::string& p, const model_run_options& m, bool qat) {
    return dsv41_model::open(p, options41(m, qat));
  }
  static dsv4_config tokenizer_config(const model& m) {  // what check_model_tokenizer and the BOS need
    dsv4_config c;
    c.vocab = m.config().vocab;
    c.bos = m.config().bos;
    c.eos = m.config().eos;
    return c;
  }
};

/// --backend vulkan: the V4 / V4.1 graph on the GPU behind the interface raw_ids_with uses (one sequence; the state
/// lives on the device, so new_state() is a placeholder).
struct gpu_adapter {
  struct file_info {
    std::string source;
  };
  std::unique_ptr<gpu_runner> r;
  file_info info;
  const dsv4_config& config() const { return r->config(); }
  const file_info& weights() const { return info; }
  int new_state() const { return 0; }
  /// want: gpu_logits::last (the last id's logits) or ::all (every id's, [n, vocab]).
  enum class gpu_logits { last, all };
  std::vector<float> forward(std::span<const uint32_t> ids, int&, gpu_logits want) {
    return want == gpu_logits::all ? r->forward_all(ids) : r->forward(ids, true);
  }
  std::string cache_line() const { return r->cache_line(); }
  /// The file is one prefill (gpu_graph::mark_prefill, V4.1's stale-key rule).
  void mark_prefill(int&, uint64_t end) { r->model().mark_prefill(end); }
};
struct gpu_graph_of_file {
  using model = gpu_adapter;
  static constexpr gpu_adapter::gpu_logits all = gpu_adapter::gpu_logits::all, last = gpu_adapter::gpu_logits::last;
  static std::unique_ptr<model> open(const std::string& p, const model_run_options& m, bool qat) {
    if (qat) throw usage_error("--backend vulkan: the QAT fake-quant steps run on the CPU graph only (drop --qat)");
    auto g = std::make_unique<gpu_adapter>();
    g->r = gpu_runner::open(p, gpu_run_options_of(m, m.max_ctx));
    g->info.source = g->r->source();
    return g;
  }
  static dsv4_config tokenizer_config(const model& m) { return m.config(); }
};

double seconds_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

uint32_t argmax(const float* x, uint64_t n) {
  uint64_t best = 0;
  for (uint64_t i = 1; i < n; ++i)
    if (x[i] > x[best]) best = i;
  return uint32_t(best);
}

/// The token ids of a text file: BOS, then the text as plain text (added tokens are not matched).
std::vector<uint32_t> text_file_ids(const ppl_args& a, const dsv4_config& cfg) {
  const model_tokenizer mt = load_model_tokenizer(a.model, a.tokenizer);
  (void)check_model_tokenizer(mt, cfg);
  std::ifstream in(a.text_file, std::ios::binary);
  if (!in) throw usage_error(a.text_file + ": cannot open");
  std::ostringstream text;
  text << in.rdbuf();
  std::vector<int32_t> ids{int32_t(cfg.bos)};
  mt.tok.encode_append(text.str(), ids, false);
  std::fprintf(stderr, "%s: %zu tokens (BOS + text) with the tokenizer of %s\n", a.text_file.c_str(), ids.size(),
               mt.source.c_str());
  return std::vector<uint32_t>(ids.begin(), ids.end());
}


template <class G>
int ppl_with(const ppl_args& a) {
  if (a.ids_file.empty() == a.text_file.empty()) throw usage_error("ppl takes exactly one of --ids-file or --file");
  const std::string& input = a.ids_file.empty() ? a.text_file : a.ids_file;
  std::vector<uint32_t> ids;
  if (!a.ids_file.empty()) {
    std::ifstream in(a.ids_file);
    if (!in) throw usage_error(a.ids_file + ": cannot open");
    ids = parse_ids(in, a.ids_file);
  }
  const auto t0 = std::chrono::steady_clock::now();
  auto model = G::open(a.model, a.model_opts, a.qat);
  const uint64_t V = model->config().vocab;
  if (!a.text_file.empty()) ids = text_file_ids(a, G::tokenizer_config(*model));
  if (ids.size() < 2) throw usage_error(input + ": needs at least 2 tokens");
  if (a.backend == "vulkan" && ids.size() > a.model_opts.max_ctx)
    throw usage_error(input + ": " + std::to_string(ids.size()) + " tokens exceed the device context of " +
                      std::to_string(a.model_opts.max_ctx) + " positions (--ctx)");
  std::fprintf(stderr, "loaded %s (%s layout, %u layers) in %.2f s\n", a.model.c_str(), model->weights().source.c_str(),
               model->config().layers, seconds_since(t0));
  auto st = model->new_state();
  // The whole file is one prefill whatever --chunk is (V4.1's stale-key rule: otherwise every chunk after the first
  // would run as official one-token decode steps, and --chunk would change the result; docs/V41.md).
  if constexpr (requires { st.mark_prefill(uint64_t(1)); })
    st.mark_prefill(ids.size());
  else if constexpr (requires { model->mark_prefill(st, uint64_t(1)); })
    model->mark_prefill(st, ids.size());
  const uint64_t chunk = a.chunk ? a.chunk : ids.size();
  double nll = 0.0;
  uint64_t count = 0;
  const auto t1 = std::chrono::steady_clock::now();
  for (uint64_t b = 0; b < ids.size(); b += chunk) {
    const uint64_t e = std::min<uint64_t>(ids.size(), b + chunk);
    const std::vector<float> logits =
        model->forward(std::span<const uint32_t>(ids.data() + b, e - b), st, G::all);
    for (uint64_t i = b; i < e && i + 1 < ids.size(); ++i) {
      const float* z = logits.data() + (i - b) * V;
      double m = z[0];
      for (uint64_t v = 1; v < V; ++v) m = std::max(m, double(z[v]));
      double s = 0.0;
      for (uint64_t v = 0; v < V; ++v) s += std::exp(double(z[v]) - m);
      nll += m + std::log(s) - double(z[ids[i + 1]]);
      ++count;
    }
    std::fprintf(stderr, "\r%llu / %zu tokens", static_cast<unsigned long long>(e), ids.size());
  }
  const double dt = seconds_since(t1);
  std::fprintf(stderr, "\n%.2f s, %.1f tok/s\n", dt, double(ids.size()) / std::max(dt, 1e-9));
  const double ppl = std::exp(nll / double(count));
  char value[64];
  std::snprintf(value, sizeof value, "%.6f", ppl);
  if (a.json) {
    nlohmann::ordered_json j;
    j["ppl"] = std::isfinite(ppl) ? nlohmann::ordered_json(std::stod(value)) : nlohmann::ordered_json(nullptr);
    j["tokens"] = count;
    std::printf("%s\n", j.dump().c_str());
  } else {
    std::printf("ppl %s tokens %llu\n", value, static_cast<unsigned long long>(count));
  }
  return 0;
}

template <class G>
int raw_ids_with(const run_args& a) {
  std::istringstream in(a.raw_ids);
  const std::vector<uint32_t> prompt = parse_ids(in, "--raw-ids");
  if (prompt.empty()) throw usage_error("--raw-ids: no token ids");
  const auto t0 = std::chrono::steady_clock::now();
  auto model = G::open(a.model, a.model_opts, a.qat);
  const uint64_t V = model->config().vocab;
  std::fprintf(stderr, "loaded %s (%s layout, %u layers) in %.2f s\n", a.model.c_str(), model->weights().source.c_str(),
               model->config().layers, seconds_since(t0));
  auto st = model->new_state();
  auto t1 = std::chrono::steady_clock::now();
  std::vector<float> logits = model->forward(prompt, st, G::last);
  const double t_prefill = seconds_since(t1);
  std::vector<uint32_t> out;
  t1 = std::chrono::steady_clock::now();
  for (uint64_t i = 0; i < a.n; ++i) {
    const uint32_t next = argmax(logits.data(), V);
    out.push_back(next);
    std::printf("%s%u", i ? " " : "", next);
    std::fflush(stdout);
    if ((next == model->config().eos && !a.no_stop) || i + 1 == a.n) break;
    const uint32_t one[1] = {next};
    logits = model->forward(one, st, G::last);
  }
  const double t_decode = seconds_since(t1);
  std::printf("\n");
  const uint64_t decoded = out.empty() ? 0 : out.size() - 1;
  std::printf("prefill %zu tokens %.2f tok/s, decode %llu tokens %.2f tok/s\n", prompt.size(),
              double(prompt.size()) / std::max(t_prefill, 1e-9), static_cast<unsigned long long>(decoded),
              decoded ? double(decoded) / std::max(t_decode, 1e-9) : 0.0);
  if constexpr (requires { model->cache_line(); })
    if (a.stats) std::fprintf(stderr, "%s\n", model->cache_line().c_str());
  return 0;
}

}  // namespace

int run_ppl(const ppl_args& a) {
  if (a.backend == "vulkan") return ppl_with<gpu_graph_of_file>(a);
  return dsv41_is_model(a.model) ? ppl_with<v41_graph>(a) : ppl_with<v4_graph>(a);
}

int run_raw_ids(const run_args& a) {
  if (a.backend == "vulkan") {
    run_args g = a;
    g.model_opts.max_ctx = a.ctx;
    return raw_ids_with<gpu_graph_of_file>(g);
  }
  return dsv41_is_model(a.model) ? raw_ids_with<v41_graph>(a) : raw_ids_with<v4_graph>(a);
}

}  // namespace cmfx::driver
