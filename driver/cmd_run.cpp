// `cmfx run`: text generation (-p PROMPT, or -i for a chat on stdin) with the chat encoding, the sampler, stop
// strings and the chat output parser; `--raw-ids` (greedy ids in, ids out) lives in cmd_model.cpp.
#include <unistd.h>

#include <chrono>
#include <cmath>
#include <cstdio>
#include <iostream>
#include <random>
#include <string>
#include <vector>

#include "cmfx/core/error.hpp"
#include "cmfx/text/chat.hpp"
#include "commands.hpp"
#include "generate.hpp"
#include "model/dsv41_forward.hpp"
#include "model/dsv41_weights.hpp"
#include "model/dsv4_forward.hpp"
#include "model/gpu_runner.hpp"
#include "model_tokenizer.hpp"

namespace cmfx::driver {

int run_raw_ids(const run_args& a);  // cmd_model.cpp

namespace {

double seconds_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

double rate(uint64_t n, double s) { return n ? double(n) / std::max(s, 1e-9) : 0.0; }

template <class T>
std::string join_ids(const std::vector<T>& ids) {
  std::string s;
  for (const T id : ids) {
    if (!s.empty()) s += ' ';
    s += std::to_string(id);
  }
  return s;
}

void check_flags(const run_args& a) {
  const int inputs = int(a.prompt_given) + int(a.interactive) + int(!a.raw_ids.empty());
  if (inputs != 1) throw usage_error("run takes exactly one of -p PROMPT, -i (chat on stdin) or --raw-ids IDS");
  if (a.raw && (a.think || !a.system.empty()))
    throw usage_error("--raw sends the prompt as is: --think and --system need the chat template");
  if (a.raw && a.interactive) throw usage_error("-i keeps a chat history: it needs the chat template (drop --raw)");
  if (a.ctx == 0) throw usage_error("--ctx must be at least 1");
  if (!(a.temp >= 0.0f)) throw usage_error("--temp must be >= 0");
  if (!(a.top_p > 0.0f && a.top_p <= 1.0f)) throw usage_error("--top-p must be in (0, 1]");
  if (!(a.min_p >= 0.0f && a.min_p <= 1.0f)) throw usage_error("--min-p must be in [0, 1]");
  if (!(a.repeat_penalty > 0.0f)) throw usage_error("--repeat-penalty must be > 0");
  if (!std::isfinite(a.presence_penalty) || !std::isfinite(a.frequency_penalty))
    throw usage_error("--presence-penalty and --frequency-penalty must be finite");
  if (a.backend != "vulkan" && (a.model_opts.vram_budget || a.stats))
    throw usage_error("--vram-budget and --stats are for --backend vulkan (the expert cache of the GPU graph)");
}

/// Token limit of a turn: -n, or what is left of --ctx; an error when the prompt and -n do not fit.
uint64_t turn_limit(const run_args& a, uint64_t prompt_tokens) {
  if (a.n_given) {
    if (prompt_tokens + a.n > a.ctx)
      throw usage_error("prompt " + std::to_string(prompt_tokens) + " tokens + -n " + std::to_string(a.n) +
                        " exceed --ctx " + std::to_string(a.ctx));
    return a.n;
  }
  if (prompt_tokens >= a.ctx)
    throw usage_error("prompt " + std::to_string(prompt_tokens) + " tokens do not fit in --ctx " +
                      std::to_string(a.ctx));
  return a.ctx - prompt_tokens;
}

chat_message message(chat_role role, const std::string& content) {
  chat_message m;
  m.role = role;
  m.content = content;
  return m;
}

std::vector<uint32_t> to_u32(const std::vector<int32_t>& v) { return std::vector<uint32_t>(v.begin(), v.end()); }

struct session {
  const run_args& a;
  model_tokenizer mt;
  std::unique_ptr<dsv4_model> model;     // a V4 file, or
  std::unique_ptr<dsv41_model> model41;  // a V4.1 file, or
  std::unique_ptr<gpu_runner> gpu;  // a V4 / V4.1 file on the GPU (--backend vulkan)
  turn_settings ts;
  chat_options chat;
  double load_s = 0.0;
};

prompt_cache make_cache(session& s) {
  return s.model41 ? prompt_cache(*s.model41) : s.gpu ? prompt_cache(*s.gpu) : prompt_cache(*s.model);
}

void print_stats(const turn_result& r, const char* lead) {
  std::fprintf(stderr, "%sprompt %llu tokens %.2f tok/s, generated %zu tokens %.2f tok/s\n", lead,
               static_cast<unsigned long long>(r.prompt_tokens), rate(r.prompt_tokens - r.reused, r.prefill_s),
               r.ids.size(), rate(r.ids.size(), r.decode_s));
}

turn_result run_turn(session& s, prompt_cache& cache, const std::vector<uint32_t>& prompt, uint64_t turn) {
  turn_settings ts = s.ts;
  ts.max_tokens = turn_limit(s.a, prompt.size());
  ts.sampling.seed = s.ts.sampling.seed + turn;  // a fresh sampler per turn; turn k draws from seed + k
  if (s.a.print_ids) std::fprintf(stderr, "prompt ids: %s\n", join_ids(prompt).c_str());
  text_printer out;
  turn_result r = generate_turn(cache, s.mt.tok, prompt, ts, out);
  if (s.a.print_ids) std::fprintf(stderr, "generated ids: %s\n", join_ids(r.ids).c_str());
  if (s.a.verbose)
    std::fprintf(stderr, "reused %llu tokens, prefilled %llu, finish %s, decode %s\n", static_cast<unsigned long long>(r.reused),
                 static_cast<unsigned long long>(r.prompt_tokens - r.reused), r.finish.c_str(), r.decode_how.c_str());
  return r;
}

int run_interactive(session& s) {
  std::vector<chat_message> base;
  if (!s.a.system.empty()) base.push_back(message(chat_role::system, s.a.system));
  std::vector<chat_message> history = base;
  prompt_cache cache = make_cache(s);
  const bool tty = ::isatty(0) != 0;
  uint64_t turn = 0;
  std::string line;
  for (;;) {
    if (tty) std::fputs("> ", stderr);
    if (!std::getline(std::cin, line)) break;
    if (!line.empty() && line.back() == '\r') line.pop_back();
    if (line.empty()) continue;
    if (line == "/reset") {
      history = base;
      cache.reset();
      std::fputs("(history cleared)\n", stderr);
      continue;
    }
    history.push_back(message(chat_role::user, line));
    std::vector<uint32_t> prompt;
    try {  // a bad line (not UTF-8, too long for --ctx) drops the turn, not the session
      prompt = to_u32(s.mt.tok.encode(chat_encode(history, s.chat)));
      (void)turn_limit(s.a, prompt.size());
    } catch (const std::exception& e) {
      std::fprintf(stderr, "cmfx: %s; the turn is dropped (/reset clears the history)\n", e.what());
      history.pop_back();
      continue;
    }
    const turn_result r = run_turn(s, cache, prompt, turn++);
    chat_message reply = message(chat_role::assistant, r.content);
    reply.reasoning_content = r.reasoning;
    reply.tool_calls = r.tool_calls;
    history.push_back(std::move(reply));
    print_stats(r, "");
  }
  if (s.a.stats && s.gpu) std::fprintf(stderr, "%s\n", s.gpu->cache_line().c_str());
  return 0;
}

}  // namespace

int run_run(const run_args& a) {
  check_flags(a);
  if (!a.raw_ids.empty()) return run_raw_ids(a);
  const auto t0 = std::chrono::steady_clock::now();
  session s{a, load_model_tokenizer(a.model, a.tokenizer), nullptr, nullptr, nullptr, {}, {}, 0.0};
  dsv4_config cfg;  // V4.1: the fields the tokenizer check and the turn need (vocab, bos, eos, layers)
  std::string source;
  if (a.backend == "vulkan") {
    if (a.qat) throw usage_error("--backend vulkan: the QAT fake-quant steps run on the CPU graph only (drop --qat)");
    s.gpu = gpu_runner::open(a.model, gpu_run_options_of(a.model_opts, a.ctx));
    cfg = s.gpu->config();
    source = s.gpu->source() + ", on " + s.gpu->device_name();
  } else if (dsv41_is_model(a.model)) {
    dsv41_options o;
    o.threads = a.model_opts.threads;
    o.matmul_act = a.model_opts.matmul_act;
    o.qat_act = a.qat;
    s.model41 = dsv41_model::open(a.model, o);
    const dsv41_config& c = s.model41->config();
    cfg.vocab = c.vocab;
    cfg.bos = c.bos;
    cfg.eos = c.eos;
    cfg.layers = c.layers;
    source = s.model41->weights().source;
  } else {
    dsv4_options o;
    o.threads = a.model_opts.threads;
    o.matmul_act = a.model_opts.matmul_act;
    o.qat_kv_fp8 = o.qat_indexer_fp4 = o.qat_act_fp8 = a.qat;
    s.model = dsv4_model::open(a.model, o);
    cfg = s.model->config();
    source = s.model->weights().source;
  }
  const std::vector<std::string> warnings = check_model_tokenizer(s.mt, cfg);
  s.load_s = seconds_since(t0);
  if (!a.raw && !warnings.empty())
    std::fprintf(stderr, "cmfx: warning: %zu chat marker(s) not as in DeepSeek-V4 (%s%s); they are encoded as text\n",
                 warnings.size(), warnings[0].c_str(), warnings.size() > 1 ? ", ..." : "");
  if (a.verbose)
    for (const std::string& w : warnings) std::fprintf(stderr, "  %s\n", w.c_str());

  sampling_params& sp = s.ts.sampling;
  sp.temperature = a.temp;
  sp.top_p = a.top_p;
  sp.top_k = a.top_k;
  sp.min_p = a.min_p;
  sp.repetition_penalty = a.repeat_penalty;
  sp.presence_penalty = a.presence_penalty;
  sp.frequency_penalty = a.frequency_penalty;
  sp.seed = a.seed_given ? a.seed : std::random_device{}();
  if (!a.no_stop) sp.stop_tokens = {int32_t(cfg.eos)};
  s.ts.stops = a.stops;
  s.ts.raw = a.raw;
  s.ts.device_sampling = a.sampling == "device";
  s.ts.mode = a.think ? chat_mode::thinking : chat_mode::chat;
  s.chat.mode = s.ts.mode;
  if (a.verbose)
    std::fprintf(stderr, "loaded %s (%s layout, %u layers) with the tokenizer of %s in %.2f s; seed %llu\n",
                 a.model.c_str(), source.c_str(), cfg.layers, s.mt.source.c_str(), s.load_s,
                 static_cast<unsigned long long>(sp.seed));

  if (a.interactive) {
    std::fprintf(stderr, "loaded in %.2f s; chat: one message per line, /reset clears the history, EOF ends\n", s.load_s);
    return run_interactive(s);
  }
  std::vector<chat_message> msgs;
  if (!a.system.empty()) msgs.push_back(message(chat_role::system, a.system));
  msgs.push_back(message(chat_role::user, a.prompt));
  const std::vector<uint32_t> prompt =
      to_u32(a.raw ? s.mt.tok.encode(a.prompt) : s.mt.tok.encode(chat_encode(msgs, s.chat)));
  if (prompt.empty()) throw usage_error("-p: the prompt encodes to no tokens");
  prompt_cache cache = make_cache(s);
  const turn_result r = run_turn(s, cache, prompt, 0);
  char lead[64];
  std::snprintf(lead, sizeof lead, "load %.2f s, ", s.load_s);
  print_stats(r, lead);
  if (a.stats && s.gpu) std::fprintf(stderr, "%s\n", s.gpu->cache_line().c_str());
  return 0;
}

}  // namespace cmfx::driver
