#include "generate.hpp"

#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <stdexcept>
#include <cstdio>
#include <nlohmann/json.hpp>

#include "cmfx/core/error.hpp"
#include "cmfx/sample/stop_strings.hpp"
#include "cmfx/text/chat_parse.hpp"
#include "model/gpu_runner.hpp"
#include "model/prefix_reuse.hpp"

namespace cmfx::driver {

namespace {

uint64_t common_prefix(const std::vector<uint32_t>& a, const std::vector<uint32_t>& b) {
  const uint64_t n = std::min(a.size(), b.size());
  uint64_t i = 0;
  while (i < n && a[i] == b[i]) ++i;
  return i;
}

/// How many of `have` (the tokens a state holds) can stay for `want`: their common prefix, but at least one token
/// of `want` must run (its logits are needed), no more than `limit` (cache_backend::reuse_limit), and the state must
/// be able to get there (it ends there, or truncate() rolls back that far). 0 otherwise.
uint64_t reusable(const std::vector<uint32_t>& have, const std::vector<uint32_t>& want, uint64_t rollback,
                  uint64_t limit) {
  const uint64_t c = std::min({common_prefix(have, want), uint64_t(want.size() - 1), limit});
  return c == have.size() || have.size() - c <= rollback ? c : 0;
}

/// cache_backend over one model type (Logits: its logits-selection enum).
template <class Model, class State, class Logits, uint64_t Rollback>
class backend_of final : public cache_backend {
 public:
  explicit backend_of(Model& m) : m_(&m), live_(m.new_state()) {}
  std::vector<float> forward(std::span<const uint32_t> ids, bool last) override {
    return m_->forward(ids, live_, last ? Logits::last : Logits::none);
  }
  void truncate(uint64_t n) override { live_.truncate(n); }
  void mark_prefill(uint64_t end) override {
    if constexpr (requires(State& st) { st.mark_prefill(end); }) live_.mark_prefill(end);
  }
  uint64_t reuse_limit(bool snapshot) const override { return driver::reuse_limit(*m_, snapshot ? snap_ : live_); }
  void save() override { snap_ = live_; }
  void restore() override { live_ = snap_; }
  void reset() override {
    live_.reset();
    snap_ = State();
  }
  uint64_t vocab() const override { return m_->config().vocab; }
  uint64_t rollback_tokens() const override { return Rollback; }

 private:
  Model* m_;
  State live_, snap_;
};

/// cache_backend over the GPU graph: the state lives on the device; snapshots are device copies.
class gpu_backend final : public cache_backend {
 public:
  explicit gpu_backend(gpu_runner& r) : r_(&r) {}
  std::vector<float> forward(std::span<const uint32_t> ids, bool last) override { return r_->forward(ids, last); }
  void truncate(uint64_t n) override {  // rollback_tokens() == 0: prompt_cache asks only for 0 or the end
    if (n == 0) r_->model().reset();
    else if (n != r_->model().pos()) throw std::logic_error("gpu prompt cache: no rollback on the device state");
  }
  void mark_prefill(uint64_t end) override { r_->model().mark_prefill(end); }
  uint64_t prefill_piece() const override { return UINT64_MAX; }
  uint64_t reuse_limit(bool snapshot) const override { return r_->model().reuse_limit(snapshot); }
  void save() override { r_->model().save_snapshot(); }
  void restore() override { r_->model().restore_snapshot(); }
  void reset() override { r_->model().reset(); }
  uint64_t vocab() const override { return r_->config().vocab; }
  uint64_t rollback_tokens() const override { return 0; }
  bool can_chain(uint64_t steps) const override { return r_->model().can_chain(steps); }
  uint64_t chain_greedy(uint32_t first, uint64_t max, const std::function<bool(uint32_t)>& on_token) override {
    return r_->model().decode_greedy_each(first, max, on_token);
  }
  bool can_sample(uint64_t steps) const override { return r_->model().can_sample(steps); }
  uint64_t chain_sampled(uint32_t first, uint64_t max, const device_sampling& ds,
                         const std::function<bool(uint32_t)>& on_token) override {
    return r_->model().decode_sampled_each(first, max, ds, on_token);
  }

 private:
  gpu_runner* r_;
};

double seconds_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

void write(FILE* f, std::string_view s, char& last) {
  if (s.empty()) return;
  std::fwrite(s.data(), 1, s.size(), f);
  std::fflush(f);
  last = s.back();
}

}  // namespace

prompt_cache::prompt_cache(dsv4_model& m)
    : b_(std::make_unique<backend_of<dsv4_model, dsv4_state, dsv4_logits, dsv4_rollback_tokens>>(m)) {}
prompt_cache::prompt_cache(dsv41_model& m)
    : b_(std::make_unique<backend_of<dsv41_model, dsv41_state, dsv41_logits, dsv41_rollback_tokens>>(m)) {}

prompt_cache::prompt_cache(gpu_runner& m) : b_(std::make_unique<gpu_backend>(m)) {}

std::vector<float> prompt_cache::prefill(const std::vector<uint32_t>& prompt, uint64_t& reused) {
  if (prompt.empty()) throw usage_error("empty prompt");
  const uint64_t from_live = reusable(live_ids_, prompt, b_->rollback_tokens(), b_->reuse_limit(false));
  const uint64_t from_snap = reusable(snap_ids_, prompt, b_->rollback_tokens(), b_->reuse_limit(true));
  if (from_snap > from_live) {
    b_->restore();
    live_ids_ = snap_ids_;
  }
  const uint64_t keep = std::max(from_live, from_snap);
  if (keep < live_ids_.size()) {
    b_->truncate(keep);  // 0: reset
    live_ids_.resize(keep);
  }
  b_->mark_prefill(prompt.size());  // the pieces below are one official prefill (V4.1's stale-key rule)
  std::vector<float> logits;
  const uint64_t piece = piece_ ? piece_ : b_->prefill_piece();
  for (uint64_t b = keep; b < prompt.size();) {
    const uint64_t e = prompt.size() - b > piece ? b + piece : prompt.size();
    logits = b_->forward(std::span<const uint32_t>(prompt.data() + b, e - b), e == prompt.size());
    b = e;
  }
  live_ids_ = prompt;
  b_->save();
  snap_ids_ = prompt;
  reused = keep;
  return logits;
}

std::vector<float> prompt_cache::step(uint32_t id) {
  const uint32_t one[1] = {id};
  std::vector<float> logits = b_->forward(one, true);
  live_ids_.push_back(id);
  return logits;
}

void prompt_cache::track_chain(uint32_t first, const std::function<void(const std::function<bool(uint32_t)>&)>& run,
                               const std::function<bool(uint32_t)>& on_id) {
  // the tokens the state runs: first, then every id handed over but the last (also when on_id throws)
  std::vector<uint32_t> got;
  auto keep = [&] {
    live_ids_.push_back(first);
    if (got.size() > 1) live_ids_.insert(live_ids_.end(), got.begin(), got.end() - 1);
  };
  try {
    run([&](uint32_t id) {
      got.push_back(id);
      return on_id(id);
    });
  } catch (...) {
    if (!got.empty()) keep();
    throw;
  }
  keep();
}

bool prompt_cache::chain_greedy(uint32_t first, uint64_t max, const std::function<bool(uint32_t)>& on_token) {
  if (max == 0 || !b_->can_chain(max)) return false;
  track_chain(first, [&](const std::function<bool(uint32_t)>& cb) { b_->chain_greedy(first, max, cb); }, on_token);
  return true;
}

bool prompt_cache::chain_sampled(uint32_t first, uint64_t max, sampler& smp,
                                 const std::function<bool(uint32_t)>& on_token) {
  if (max == 0 || !smp.params().device_samplable(b_->vocab(), gpu::kernels::sample_max_top_k) || !b_->can_sample(max))
    return false;
  const device_sampling ds = device_sampling::of(smp);
  track_chain(first, [&](const std::function<bool(uint32_t)>& cb) { b_->chain_sampled(first, max, ds, cb); },
              [&](uint32_t id) {
                smp.accept_drawn(int32_t(id));
                return on_token(id);
              });
  return true;
}

void prompt_cache::reset() {
  b_->reset();
  live_ids_.clear();
  snap_ids_.clear();
}

text_printer::text_printer() : dim_(::isatty(2) != 0) {}

void text_printer::content(std::string_view s) {
  if (s.empty()) return;
  close_reasoning();
  write(stdout, s, last_out_);
}

void text_printer::reasoning(std::string_view s) {
  if (s.empty()) return;
  if (!in_reasoning_) {
    if (last_err_ != '\n') write(stderr, "\n", last_err_);
    write(stderr, dim_ ? "\x1b[2m[thinking]\n" : "[thinking]\n", last_err_);
    in_reasoning_ = true;
  }
  write(stderr, s, last_err_);
}

void text_printer::close_reasoning() {
  if (!in_reasoning_) return;
  if (last_err_ != '\n') write(stderr, "\n", last_err_);
  write(stderr, dim_ ? "[/thinking]\x1b[0m\n" : "[/thinking]\n", last_err_);
  in_reasoning_ = false;
}

void text_printer::tool_call(const chat_tool_call& c) {
  close_reasoning();
  if (last_out_ != '\n') write(stdout, "\n", last_out_);
  const nlohmann::ordered_json j = {{"tool_call", {{"id", c.id}, {"name", c.name}, {"arguments", c.arguments}}}};
  write(stdout, j.dump() + "\n", last_out_);
}

void text_printer::end_turn() {
  close_reasoning();
  if (last_out_ != '\n') write(stdout, "\n", last_out_);
}

turn_result generate_turn(prompt_cache& cache, const tokenizer& tok, const std::vector<uint32_t>& prompt,
                          const turn_settings& s, text_printer& out) {
  turn_result r;
  r.prompt_tokens = prompt.size();
  sampler smp(cache.vocab(), s.sampling);
  smp.set_prompt(std::vector<int32_t>(prompt.begin(), prompt.end()));
  stream_decoder dec(tok);  // special tokens kept: </think> and the DSML markers must reach the parser
  stop_string_matcher stops(s.stops);
  chat_output_parser parser(s.mode);

  auto deliver = [&](const chat_delta& d) {
    r.reasoning += d.reasoning;
    out.reasoning(d.reasoning);
    r.content += d.content;
    out.content(d.content);
    for (const chat_tool_call& c : d.tool_calls) {
      r.tool_calls.push_back(c);
      out.tool_call(c);
    }
  };
  auto emit = [&](std::string_view text) {
    if (text.empty()) return;
    if (s.raw) {
      r.content += text;
      out.content(text);
    } else {
      deliver(parser.feed(text));
    }
  };

  auto t0 = std::chrono::steady_clock::now();
  std::vector<float> logits = cache.prefill(prompt, r.reused);
  r.prefill_s = seconds_since(t0);
  t0 = std::chrono::steady_clock::now();
  bool stopped = false;
  // One sampled id: whether generation goes on (the id then runs next).
  auto take = [&](int32_t token, bool is_stop) {
    r.ids.push_back(token);
    if (is_stop) {
      r.finish = "eos";
      return false;
    }
    const auto sr = stops.push(dec.push(token));
    emit(sr.text);
    if (sr.stopped) {
      r.finish = "stop";
      stopped = true;
      return false;
    }
    return r.ids.size() < s.max_tokens;
  };
  // Pure greedy sampling (no temperature, penalties or logprobs) is the device's argmax: after the first id the
  // steps chain on the device where the backend can (prompt_cache::chain_greedy), without logits.
  const sampling_params& sp = s.sampling;
  bool go = s.max_tokens > 0;
  if (go) {
    const sample_result& x = smp.sample(logits);
    go = take(x.token, x.stop);
  }
  if (go && sp.pure_greedy()) {
    auto is_stop = [&](uint32_t id) {
      return std::find(sp.stop_tokens.begin(), sp.stop_tokens.end(), int32_t(id)) != sp.stop_tokens.end();
    };
    if (cache.chain_greedy(uint32_t(r.ids.back()), s.max_tokens - r.ids.size(),
                           [&](uint32_t id) { return take(int32_t(id), is_stop(id)); })) {
      go = false;  // it ran until take() said stop
      r.decode_how = "greedy chained on the device";
    }
  }
  // Sampled decode without logprobs (and greedy decode where the steps do not chain): the choices on the device where
  // the backend can (the sampler's, bit for bit; prompt_cache::chain_sampled), without reading the logits back.
  if (go && s.device_sampling && sp.device_samplable(cache.vocab(), gpu::kernels::sample_max_top_k)) {
    auto is_stop = [&](uint32_t id) {
      return std::find(sp.stop_tokens.begin(), sp.stop_tokens.end(), int32_t(id)) != sp.stop_tokens.end();
    };
    if (cache.chain_sampled(uint32_t(r.ids.back()), s.max_tokens - r.ids.size(), smp,
                            [&](uint32_t id) { return take(int32_t(id), is_stop(id)); })) {
      go = false;
      r.decode_how = sp.temperature > 0.0f ? "sampled on the device" : "greedy on the device, step by step";
    }
  }
  while (go) {
    logits = cache.step(static_cast<uint32_t>(r.ids.back()));
    const sample_result& x = smp.sample(logits);
    go = take(x.token, x.stop);
  }
  if (r.finish.empty()) r.finish = "length";
  if (!stopped) {
    const std::string tail = dec.flush();
    const auto sr = stops.push(tail);
    emit(sr.text);
    if (!sr.stopped) emit(stops.flush());
  }
  if (!s.raw) {
    chat_delta d;
    parser.finish(d);
    deliver(d);
  }
  r.decode_s = seconds_since(t0);
  out.end_turn();
  return r;
}

}  // namespace cmfx::driver
