// The scheduler thread: admission, batched steps (prefill chunks and decode tokens), prefix reuse,
// cancellation and timeouts. See scheduler.hpp.
#include "serve/scheduler.hpp"

#include <algorithm>
#include <cstdio>
#include <string>

#include "cmfx/core/error.hpp"

namespace cmfx::driver::serve {

namespace {

using clock_type = std::chrono::steady_clock;

double seconds_since(clock_type::time_point t0) {
  return std::chrono::duration<double>(clock_type::now() - t0).count();
}

template <class A, class B>
uint64_t common_prefix(const A& a, const B& b) {
  const size_t n = std::min(a.size(), b.size());
  size_t i = 0;
  while (i < n && static_cast<int64_t>(a[i]) == static_cast<int64_t>(b[i])) ++i;
  return i;
}

gen_result error_result(int status, const std::string& message, const std::string& type, const std::string& code) {
  gen_result r;
  r.error_status = status;
  r.error_message = message;
  r.error_type = type;
  r.error_code = code;
  return r;
}

}  // namespace

scheduler::scheduler(engine& model, const tokenizer& tok, scheduler_options o, metrics& m)
    : model_(model), tok_(tok), o_(o), m_(m), vocab_(model.vocab()), slots_(o.parallel) {
  if (o_.parallel > model_.max_slots())
    throw usage_error("--parallel " + std::to_string(o_.parallel) + ": this backend holds at most " +
                      std::to_string(model_.max_slots()) + " sequence(s) at once");
  for (unsigned i = 0; i < o_.parallel; ++i) slots_[i].id = i;
  m_.slots = o_.parallel;
  m_.set_engine_text(model_.metrics_text());
  thread_ = std::thread([this] { loop(); });
}

scheduler::~scheduler() { abort(); }

submit_status scheduler::submit(std::shared_ptr<job> j) {
  {
    std::lock_guard lk(mu_);
    if (stopping_) return submit_status::shutting_down;
    if (waiting_.size() + busy_ >= size_t{o_.parallel} + o_.queue) return submit_status::queue_full;
    waiting_.push_back(std::move(j));
    m_.queue_depth = waiting_.size();
  }
  cv_.notify_all();
  return submit_status::ok;
}

size_t scheduler::load() const {
  std::lock_guard lk(mu_);
  return waiting_.size() + busy_;
}

void scheduler::stop() {
  {
    std::lock_guard lk(mu_);
    stopping_ = true;
  }
  cv_.notify_all();
  if (thread_.joinable()) thread_.join();
}

void scheduler::abort() {
  {
    std::lock_guard lk(mu_);
    stopping_ = aborting_ = true;
    for (auto& j : waiting_) j->cancel();
  }
  cv_.notify_all();
  if (thread_.joinable()) thread_.join();
}

void scheduler::loop() {
  for (;;) {
    std::vector<std::shared_ptr<job>> admitted;
    bool aborting = false;
    {
      std::unique_lock lk(mu_);
      expire_waiting();
      while (!waiting_.empty() && busy_ < o_.parallel) {
        admitted.push_back(std::move(waiting_.front()));
        waiting_.pop_front();
        ++busy_;
      }
      m_.queue_depth = waiting_.size();
      m_.busy_slots = busy_;
      aborting = aborting_;
      if (busy_ == 0 && waiting_.empty()) {
        if (stopping_) return;
        cv_.wait_for(lk, std::chrono::milliseconds(100));
        continue;
      }
    }
    for (auto& j : admitted) assign(std::move(j));
    for (slot& s : slots_)
      if (s.j && aborting) s.j->cancel();
    step_all();
  }
}

// Under mu_: queued requests that were cancelled or ran out of time leave the queue.
void scheduler::expire_waiting() {
  const auto now = clock_type::now();
  for (auto it = waiting_.begin(); it != waiting_.end();) {
    job& j = **it;
    if (j.cancelled()) {
      ++m_.cancelled;
      j.finish(error_result(499, "request cancelled", "server_error", "cancelled"));
    } else if (now >= j.deadline()) {
      ++m_.timed_out;
      j.finish(
          error_result(504, "request timed out while waiting for a slot (--timeout-s)", "server_error", "timeout"));
    } else {
      ++it;
      continue;
    }
    it = waiting_.erase(it);
  }
}

// Tokens of `prompt` a slot can keep: the common prefix with its live state or its snapshot, at most
// prompt.size() − 1 (the last prompt token must run to give logits), and only where the state can be rolled back
// to it (within engine::rollback_tokens of its end, or no roll-back at all).
uint64_t scheduler::usable_prefix(const slot& s, const std::vector<int32_t>& prompt, bool& from_snap) const {
  const uint64_t limit = prompt.empty() ? 0 : prompt.size() - 1;
  auto usable = [&](const std::vector<uint32_t>& held, bool snap) -> uint64_t {
    const uint64_t l = std::min({uint64_t(common_prefix(held, prompt)), limit, model_.reuse_limit(s.id, snap)});
    return held.size() - l <= model_.rollback_tokens() ? l : 0;
  };
  from_snap = false;
  const uint64_t live = usable(s.tokens, false);
  if (s.has_snap) {
    const uint64_t snap = usable(s.snap_tokens, true);
    if (snap > live) {
      from_snap = true;
      return snap;
    }
  }
  return live;
}

void scheduler::assign(std::shared_ptr<job> j) {
  const auto& prompt = j->req.prompt;
  slot* best = nullptr;
  uint64_t best_n = 0;
  bool best_snap = false;
  for (slot& s : slots_) {
    if (s.j) continue;
    bool snap = false;
    const uint64_t n = usable_prefix(s, prompt, snap);
    if (!best || n > best_n || (n == best_n && s.last_used < best->last_used)) {
      best = &s;
      best_n = n;
      best_snap = snap;
    }
  }
  slot& s = *best;  // a free slot exists: busy_ counted this job
  s.j = std::move(j);
  try {
    if (best_snap) {
      model_.restore_snapshot(s.id);
      s.tokens = s.snap_tokens;
    }
    if (best_n == 0) {
      model_.reset(s.id);
      s.tokens.clear();
    } else if (best_n < s.tokens.size()) {
      model_.truncate(s.id, best_n);
      s.tokens.resize(best_n);
    }
    sampling_params sp = s.j->req.sp;
    sp.stop_tokens.clear();
    if (!s.j->req.ignore_eos) sp.stop_tokens.push_back(static_cast<int32_t>(model_.eos()));
    if (!s.smp) s.smp = std::make_unique<sampler>(vocab_, sp);
    s.smp->set_params(std::move(sp));
    s.smp->reset();
    s.smp->set_prompt(prompt);
    s.out = std::make_unique<output_pipeline>(tok_, s.j->req);
  } catch (const std::exception& e) {
    s.prefill_pos = prompt.size();
    fail(s, 500, std::string("could not start the generation: ") + e.what(), "server_error", "internal_error");
    return;
  }
  model_.mark_prefill(s.id, prompt.size());  // the prompt's pieces are one official prefill (V4.1)
  s.prefill_pos = best_n;
  s.cached = best_n;
  s.generated = 0;
  s.pending = -1;
}

bool scheduler::still_running(slot& s) {
  job& j = *s.j;
  if (j.cancelled()) {
    ++m_.cancelled;
    end(s, error_result(499, "request cancelled", "server_error", "cancelled"));
    return false;
  }
  if (clock_type::now() >= j.deadline()) {
    ++m_.timed_out;
    end(s, error_result(504, "request timed out (--timeout-s)", "server_error", "timeout"));
    return false;
  }
  return true;
}

bool scheduler::try_chain() {
  slot* one = nullptr;
  for (slot& s : slots_)
    if (s.j) {
      if (one) return false;
      one = &s;
    }
  if (!one || one->pending < 0 || one->prefill_pos < one->j->req.prompt.size()) return false;
  slot& s = *one;
  const gen_request& req = s.j->req;
  const sampling_params& sp = req.sp;
  // pure greedy: the device's argmax, chained (chain_greedy); else — and pure greedy where the graph does not chain —
  // chosen on the device as the slot's sampler would (drawn with a temperature, top-k ≤ 2048, penalties; the argmax
  // when greedy), bit for bit, with the raw logits' logprobs where asked (chain_sampled), each id recorded in that
  // sampler
  const bool greedy = sp.pure_greedy();
  const bool on_device = o_.device_sampling && s.smp &&
                         s.smp->params().device_samplable(vocab_, gpu::kernels::sample_max_top_k,
                                                          int32_t(gpu::kernels::logprobs_max_top));
  if (!(greedy || on_device)) return false;
  // a queued request that a free slot could take ends a burst (the GPU engine has one slot: it waits anyway)
  auto queue_can_start = [&] {
    std::lock_guard lk(mu_);
    return aborting_ || (!waiting_.empty() && busy_ < o_.parallel);
  };
  if (queue_can_start()) return false;
  if (!still_running(s)) return true;  // ended (cancelled, timed out): this step is done
  const uint64_t left = req.max_tokens > s.generated ? req.max_tokens - s.generated : 0;
  const uint64_t ctx_left = o_.ctx > s.tokens.size() + 1 ? o_.ctx - s.tokens.size() - 1 : 0;
  const uint64_t room = std::min({chain_burst, left, ctx_left});
  const bool chain_greedy = greedy && model_.can_chain(s.id, room);
  const bool chosen = !chain_greedy && on_device && model_.can_sample(s.id, room);
  if (room < 2 || !(chain_greedy || chosen)) return false;
  const bool stop_eos = !req.ignore_eos;
  const uint32_t eos = model_.eos();
  uint32_t prev = static_cast<uint32_t>(s.pending);
  uint64_t n = 0;
  const auto t0 = clock_type::now();
  auto t_last = t0;
  step_logprobs lp;  // each step's, where the request asks for logprobs
  try {
    auto on_token = [&](uint32_t id) {
      s.tokens.push_back(prev);  // the step that produced id ran prev
      prev = id;
      ++n;
      // counted before the token is emitted: the last one ends the request, and a client that reads /metrics right
      // after its response must see its tokens
      const auto now = clock_type::now();
      m_.add_decode(1, std::chrono::duration<double>(now - t_last).count());
      m_.add_chained(1);
      t_last = now;
      if (chosen) s.smp->accept_drawn(static_cast<int32_t>(id));
      sample_result r;
      r.token = static_cast<int32_t>(id);
      r.stop = stop_eos && id == eos;
      if (req.top_logprobs >= 0) r.logprob = lp.logprob, r.top_logprobs = lp.top;
      emit(s, r);
      if (!s.j) return false;  // the request ended (stop, length)
      if (queue_can_start()) return false;
      return still_running(s);
    };
    if (chain_greedy) {
      model_.chain_greedy(s.id, prev, room, on_token);
    } else {
      model_.chain_sampled(s.id, prev, room, device_sampling::of(*s.smp, &lp), on_token);
    }
  } catch (const std::exception& e) {
    std::fprintf(stderr, "cmfx serve: generation failed: %s\n", e.what());
    if (s.j) fail(s, 500, std::string("generation failed: ") + e.what(), "server_error", "internal_error");
    m_.set_engine_text(model_.metrics_text());
    return true;
  }
  const double secs = seconds_since(t0);
  m_.add_step(secs, secs, 0.0, secs);
  if (s.j) update_bytes(s);
  m_.set_engine_text(model_.metrics_text());
  return true;
}

void scheduler::step_all() {
  if (try_chain()) return;
  const auto t_step = clock_type::now();
  std::vector<slot*> act;
  std::vector<uint32_t> ids;
  std::vector<engine_segment> segs;
  std::vector<uint8_t> finishing;  // the segment ends the prompt, or is a decode token: sample after it
  uint64_t prefill_tokens = 0, decode_tokens = 0;
  for (slot& s : slots_) {
    if (!s.j || !still_running(s)) continue;
    const auto& prompt = s.j->req.prompt;
    const uint64_t first = ids.size();
    if (s.prefill_pos < prompt.size()) {
      const size_t n = std::min<size_t>(o_.prefill_chunk, prompt.size() - s.prefill_pos);
      ids.insert(ids.end(), prompt.begin() + static_cast<std::ptrdiff_t>(s.prefill_pos),
                 prompt.begin() + static_cast<std::ptrdiff_t>(s.prefill_pos + n));
      finishing.push_back(s.prefill_pos + n == prompt.size());
      prefill_tokens += n;
    } else {
      ids.push_back(static_cast<uint32_t>(s.pending));
      finishing.push_back(1);
      ++decode_tokens;
    }
    segs.push_back({s.id, first, ids.size() - first});
    act.push_back(&s);
  }
  if (act.empty()) return;
  const auto t0 = clock_type::now();
  std::vector<float> logits;
  try {
    logits = model_.forward(ids, segs);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "cmfx serve: generation failed: %s\n", e.what());
    for (slot* s : act) fail(*s, 500, std::string("generation failed: ") + e.what(), "server_error", "internal_error");
    m_.set_engine_text(model_.metrics_text());
    return;
  }
  const double secs = seconds_since(t0);
  // Time is shared between the step's prefill and decode tokens in proportion to their counts.
  const double per_token = secs / double(prefill_tokens + decode_tokens);
  if (prefill_tokens) m_.add_prefill(prefill_tokens, per_token * double(prefill_tokens));
  const uint64_t V = vocab_;
  // Bookkeeping, then the sampling of every slot that reached a token, spread over the model's worker threads
  // (each slot has its own sampler; nothing else is touched), then, in slot order, the output pipeline and the
  // events. The pool is idle between forward calls, so this adds no threads.
  std::vector<size_t> fin;  // segment indices to sample
  std::vector<uint8_t> decode;
  for (size_t k = 0; k < act.size(); ++k) {
    slot& s = *act[k];
    const engine_segment& sg = segs[k];
    s.tokens.insert(s.tokens.end(), ids.begin() + static_cast<std::ptrdiff_t>(sg.first),
                    ids.begin() + static_cast<std::ptrdiff_t>(sg.first + sg.count));
    const bool was_prefill = s.prefill_pos < s.j->req.prompt.size();
    if (was_prefill) s.prefill_pos += sg.count;
    if (!finishing[k]) {
      update_bytes(s);
      continue;
    }
    if (was_prefill && o_.snapshot) {
      try {  // a snapshot is an optimisation: without one the request goes on (the GPU's first one allocates)
        model_.save_snapshot(s.id);
        s.snap_tokens = s.tokens;
        s.has_snap = true;
      } catch (const std::exception& e) {
        std::fprintf(stderr, "cmfx serve: no prompt snapshot for slot %u: %s\n", s.id, e.what());
        s.has_snap = false;
        s.snap_tokens.clear();
      }
    }
    fin.push_back(k);
    decode.push_back(!was_prefill);
  }
  const auto t_sample = clock_type::now();
  std::vector<sample_result> picked(fin.size());
  std::vector<std::string> errors(fin.size());
  model_.parallel(fin.size(), [&](size_t i) {
    const size_t k = fin[i];
    try {
      picked[i] = act[k]->smp->sample(std::span<const float>(logits.data() + k * V, V));
    } catch (const std::exception& ex) {
      errors[i] = ex.what();
    }
  });
  // Decode tokens: their share of the forward, plus the sampling's time per sampled token; counted before the tokens
  // are emitted (a token can end its request, and the client may read /metrics right after the response).
  const double sample_per_token = fin.empty() ? 0.0 : seconds_since(t_sample) / double(fin.size());
  for (size_t i = 0; i < fin.size(); ++i)
    if (decode[i] && errors[i].empty()) m_.add_decode(1, per_token + sample_per_token);
  for (size_t i = 0; i < fin.size(); ++i) {
    slot& s = *act[fin[i]];
    if (!errors[i].empty()) {
      fail(s, 500, "sampling failed: " + errors[i], "server_error", "internal_error");
      continue;
    }
    emit(s, picked[i]);
    if (s.j) update_bytes(s);
  }
  const double sample_s = seconds_since(t_sample);
  m_.add_step(secs, per_token * double(decode_tokens), sample_s, seconds_since(t_step));
  m_.set_engine_text(model_.metrics_text());
}

void scheduler::emit(slot& s, const sample_result& r) {
  job& j = *s.j;
  ++s.generated;
  gen_event ev;
  std::string reason;
  if (r.stop) {
    reason = "stop";
  } else {
    if (j.req.top_logprobs >= 0) {
      token_info ti{r.token, r.logprob, {}};
      ti.top.assign(r.top_logprobs.begin(), r.top_logprobs.end());
      ev.tokens.push_back(std::move(ti));
    }
    if (s.out->push(r.token, ev))
      reason = "stop";
    else if (s.generated >= j.req.max_tokens || s.tokens.size() + 1 >= o_.ctx)
      reason = "length";
  }
  if (reason.empty()) {
    j.push(std::move(ev));
    s.pending = r.token;
    return;
  }
  s.out->finish(ev);
  j.push(std::move(ev));
  gen_result res;
  res.finish_reason = (reason == "stop" && s.out->tool_calls() > 0) ? "tool_calls" : reason;
  end(s, std::move(res));
}

void scheduler::end(slot& s, gen_result r) {
  const auto& req = s.j->req;
  r.prompt_tokens = req.prompt.size();
  r.cached_tokens = s.cached;
  r.completion_tokens = s.generated;
  r.reasoning_tokens = s.out ? s.out->reasoning_tokens() : 0;
  m_.prompt_tokens += r.prompt_tokens;
  m_.cached_tokens += r.cached_tokens;
  m_.completion_tokens += r.completion_tokens;
  s.j->finish(std::move(r));
  s.j.reset();
  s.out.reset();
  s.last_used = ++tick_;
  update_bytes(s);
  std::lock_guard lk(mu_);
  --busy_;
  m_.busy_slots = busy_;
}

// The slot's state may be half-advanced: forget it so the next request starts clean.
void scheduler::fail(slot& s, int status, const std::string& message, const std::string& type,
                     const std::string& code) {
  ++m_.failed;
  try {
    model_.reset(s.id);
    model_.drop_snapshot(s.id);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "cmfx serve: could not reset slot %u: %s\n", s.id, e.what());
  }
  s.tokens.clear();
  s.has_snap = false;
  s.snap_tokens.clear();
  end(s, error_result(status, message, type, code));
}

void scheduler::update_bytes(slot& s) {
  s.bytes = model_.state_bytes(s.id);
  uint64_t total = 0;
  for (const slot& x : slots_) total += x.bytes;
  m_.state_bytes = total;
}

}  // namespace cmfx::driver::serve
