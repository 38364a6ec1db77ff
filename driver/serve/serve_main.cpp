// `cmfx serve`: load the tokenizer and the model, start the scheduler thread and the HTTP server, and shut down
// gracefully on SIGTERM/SIGINT (stop accepting — new requests get 503 — let queued and running requests finish,
// then exit 0; a second signal cancels what is left).
#include <pthread.h>
#include <signal.h>

#include <atomic>
#include <chrono>
#include <csignal>
#include <cstdio>
#include <ctime>
#include <filesystem>
#include <fstream>
#include <thread>

#include "cmfx/core/error.hpp"
#include "model/dsv41_forward.hpp"
#include "model/dsv41_weights.hpp"
#include "model/dsv4_forward.hpp"
#include "model/gpu_runner.hpp"
#include "model_tokenizer.hpp"
#include "serve/engine.hpp"
#include "serve/http_server.hpp"
#include "serve/serve.hpp"

namespace cmfx::driver {

namespace {

namespace fs = std::filesystem;

std::string read_key_file(const std::string& path) {
  std::ifstream in(path);
  if (!in) throw usage_error("--api-key-file " + path + ": cannot open");
  std::string key;
  std::getline(in, key);
  while (!key.empty() && (key.back() == '\r' || key.back() == ' ' || key.back() == '\t')) key.pop_back();
  size_t b = 0;
  while (b < key.size() && (key[b] == ' ' || key[b] == '\t')) ++b;
  key.erase(0, b);
  if (key.empty()) throw usage_error("--api-key-file " + path + ": the first line is empty");
  return key;
}

std::string default_model_name(const std::string& path) {
  fs::path p(path);
  while (p.has_relative_path() && p.filename().empty()) p = p.parent_path();  // "dir/" → "dir"
  if (fs::is_directory(p)) return p.filename().string();
  return p.stem().string();
}

}  // namespace

int run_serve(const serve_args& a) {
  using namespace serve;
  // Signals: SIGINT/SIGTERM are taken by one thread (sigtimedwait below), so they are blocked before any thread
  // exists (the model's worker pool inherits the mask); a signal during loading waits until the server is up.
  sigset_t sigs;
  sigemptyset(&sigs);
  sigaddset(&sigs, SIGINT);
  sigaddset(&sigs, SIGTERM);
  pthread_sigmask(SIG_BLOCK, &sigs, nullptr);
  std::signal(SIGPIPE, SIG_IGN);

  std::string key = a.api_key;
  if (!a.api_key_file.empty()) key = read_key_file(a.api_key_file);
  const model_tokenizer mt = load_model_tokenizer(a.model, a.tokenizer);
  const tokenizer& tok = mt.tok;
  const auto t0 = std::chrono::steady_clock::now();
  std::unique_ptr<dsv4_model> cpu_model;
  std::unique_ptr<dsv41_model> cpu_model41;
  std::unique_ptr<gpu_runner> gpu_model;
  std::unique_ptr<serve::engine> eng;
  dsv4_config cfg;  // V4.1 on the GPU: the fields the tokenizer check and the requests need (vocab, bos, eos, layers)
  std::string source;
  if (a.backend == "vulkan") {
    if (a.qat) throw usage_error("--backend vulkan: the QAT fake-quant steps run on the CPU graph only (drop --qat)");
    if (a.parallel != 1)
      throw usage_error("--backend vulkan holds one sequence on the device: --parallel must be 1 (requests queue)");
    if (a.prefill_chunk > 4096) throw usage_error("--backend vulkan: --prefill-chunk must be at most 4096");
    gpu_run_options o;
    o.device = a.device;
    o.max_ctx = a.ctx;
    o.expert_act = a.matmul_act;
    o.vram_budget = a.vram_budget;
    o.prefill_chunk = uint32_t(a.prefill_chunk);
    o.gemm = a.gemm;
    o.prefill_experts = prefill_expert_mode::fastest;
    o.cold = a.cold;
    o.copy_threads = a.copy_threads;
    o.budget_keeps_chunks = a.budget_keeps_chunks;
    gpu_model = gpu_runner::open(a.model, o);
    cfg = gpu_model->config();
    source = gpu_model->source();
    eng = serve::make_gpu_engine(*gpu_model);
  } else if (dsv41_is_model(a.model)) {
    if (a.vram_budget) throw usage_error("--vram-budget is for --backend vulkan (the GPU graph's expert cache)");
    dsv41_options o;
    o.threads = a.threads;
    o.matmul_act = a.matmul_act;
    o.qat_act = a.qat;
    cpu_model41 = dsv41_model::open(a.model, o);
    const dsv41_config& c = cpu_model41->config();
    cfg.vocab = c.vocab, cfg.bos = c.bos, cfg.eos = c.eos, cfg.layers = c.layers;
    source = cpu_model41->weights().source;
    eng = serve::make_cpu_engine(*cpu_model41, a.parallel);
  } else {
    if (a.vram_budget) throw usage_error("--vram-budget is for --backend vulkan (the GPU graph's expert cache)");
    dsv4_options o;
    o.threads = a.threads;
    o.qat_kv_fp8 = o.qat_indexer_fp4 = o.qat_act_fp8 = a.qat;
    o.matmul_act = a.matmul_act;
    cpu_model = dsv4_model::open(a.model, o);
    cfg = cpu_model->config();
    source = cpu_model->weights().source;
    eng = serve::make_cpu_engine(*cpu_model, a.parallel);
  }
  std::fprintf(stderr, "cmfx serve: loaded %s (%s layout, %u layers, vocab %u) in %.2f s on %s; tokenizer %s\n",
               a.model.c_str(), source.c_str(), cfg.layers, cfg.vocab,
               std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count(), eng->describe().c_str(),
               mt.source.c_str());
  if (const auto warn = check_model_tokenizer(mt, cfg); !warn.empty())
    std::fprintf(stderr,
                 "cmfx serve: note: %zu chat marker(s) missing from the tokenizer (e.g. %s); they are "
                 "encoded as plain text\n",
                 warn.size(), warn[0].c_str());

  request_context rc;
  rc.tok = &tok;
  rc.model_name = a.model_name.empty() ? default_model_name(a.model) : a.model_name;
  rc.ctx = a.ctx;
  rc.vocab = cfg.vocab;
  rc.bos = static_cast<int32_t>(cfg.bos);
  rc.thinking_default = a.thinking_default;

  metrics m;
  scheduler_options so;
  so.parallel = a.parallel;
  so.queue = a.queue;
  so.ctx = a.ctx;
  so.prefill_chunk = a.prefill_chunk;
  so.snapshot = a.prompt_snapshot;
  so.device_sampling = a.sampling == "device";
  scheduler sched(*eng, tok, so, m);
  http_server http(a, std::move(key), rc, sched, m);
  const int port = http.bind();
  if (port < 0) {
    std::fprintf(stderr, "cmfx: serve: cannot listen on %s:%d\n", a.host.c_str(), a.port);
    return 2;
  }
  std::fprintf(stderr, "cmfx serve: listening on http://%s:%d (model \"%s\", %u slot(s), queue %u, ctx %llu)\n",
               a.host.c_str(), port, rc.model_name.c_str(), a.parallel, a.queue,
               static_cast<unsigned long long>(a.ctx));

  std::atomic<bool> done{false};
  std::thread watcher([&] {
    bool draining = false, aborted = false;
    while (!done) {
      const timespec wait{0, 100 * 1000 * 1000};
      const int s = sigtimedwait(&sigs, nullptr, &wait);
      if (s == SIGINT || s == SIGTERM) {
        if (!draining) {
          draining = true;
          http.begin_drain();
          std::fprintf(stderr, "cmfx serve: %s: no new requests; finishing %zu queued/running request(s)\n",
                       s == SIGINT ? "SIGINT" : "SIGTERM", sched.load());
        } else if (!aborted) {
          aborted = true;
          std::fprintf(stderr, "cmfx serve: second signal: cancelling every request\n");
          sched.abort();
        }
      }
      if (draining && http.in_flight() == 0 && sched.load() == 0) http.stop();  // repeated until listen() returns
    }
  });
  const bool ok = http.listen();
  done = true;
  watcher.join();
  sched.stop();
  std::fprintf(stderr, "cmfx serve: stopped\n");
  return (ok || http.draining()) ? 0 : 2;
}

}  // namespace cmfx::driver
