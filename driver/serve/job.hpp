#pragma once
// One generation request as the scheduler sees it (gen_request), what each scheduler step produces for it
// (gen_event), how it ended (gen_result), and the channel between the scheduler thread (producer) and the HTTP
// thread that answers the client (consumer).
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <mutex>
#include <string>
#include <vector>

#include "cmfx/sample/sampler.hpp"
#include "cmfx/text/chat.hpp"

namespace cmfx::driver::serve {

enum class job_kind { chat, completion };

struct gen_request {
  job_kind kind = job_kind::chat;
  std::vector<int32_t> prompt;    // token ids, BOS included
  sampling_params sp;             // seed, temperature, …, logprobs (stop_tokens set by the scheduler)
  std::vector<std::string> stop;  // stop strings
  uint64_t max_tokens = 16;       // completion tokens (already capped by the context)
  bool ignore_eos = false;
  chat_mode mode = chat_mode::chat;  // chat: how the prompt ended (thinking: output starts in the reasoning)
  bool stream = false;
  bool include_usage = false;  // stream_options.include_usage
  int top_logprobs = -1;       // -1: no logprobs; else alternatives per token
  bool tokens_as_ids = false;  // return_tokens_as_token_ids (vLLM): logprob tokens as "token_id:<id>"
  std::string id;              // response id (chatcmpl-… / cmpl-…); tool-call ids derive from it
  std::string model;           // model id echoed in responses
  std::string log_text;        // prompt text for --log-prompts
};

struct token_info {
  int32_t id = 0;
  float logprob = 0.0f;
  std::vector<token_logprob> top;
};

/// What one step released: reasoning/content text, finished tool calls, and the sampled tokens' logprobs.
struct gen_event {
  std::string reasoning, content;
  std::vector<chat_tool_call> tool_calls;
  std::vector<token_info> tokens;  // only with logprobs
  bool empty() const noexcept { return reasoning.empty() && content.empty() && tool_calls.empty() && tokens.empty(); }
};

struct gen_result {
  std::string finish_reason;  // stop | length | tool_calls
  uint64_t prompt_tokens = 0, cached_tokens = 0, completion_tokens = 0, reasoning_tokens = 0;
  int error_status = 0;  // non-zero: the request failed (timeout, cancelled, internal error)
  std::string error_message, error_type, error_code;
};

class job {
 public:
  job(gen_request r, std::chrono::steady_clock::time_point deadline) : req(std::move(r)), deadline_(deadline) {}
  job(const job&) = delete;
  job& operator=(const job&) = delete;

  const gen_request req;
  std::chrono::steady_clock::time_point deadline() const noexcept { return deadline_; }

  /// The client went away: the scheduler frees the slot at its next step.
  void cancel() noexcept { cancelled_.store(true, std::memory_order_relaxed); }
  bool cancelled() const noexcept { return cancelled_.load(std::memory_order_relaxed); }

  // Producer (scheduler thread).
  void push(gen_event&& e) {
    if (e.empty()) return;
    {
      std::lock_guard lk(m_);
      events_.push_back(std::move(e));
    }
    cv_.notify_all();
  }
  void finish(gen_result r) {
    {
      std::lock_guard lk(m_);
      if (done_) return;
      result_ = std::move(r);
      done_ = true;
    }
    cv_.notify_all();
  }
  bool finished() const {
    std::lock_guard lk(m_);
    return done_;
  }

  /// Consumer: waits up to `timeout` for events or the end; moves the pending events into out. Returns true (and
  /// fills res) once the job has finished and every event was taken.
  bool wait(std::vector<gen_event>& out, gen_result& res, std::chrono::milliseconds timeout) {
    std::unique_lock lk(m_);
    cv_.wait_for(lk, timeout, [&] { return done_ || !events_.empty(); });
    for (auto& e : events_) out.push_back(std::move(e));
    events_.clear();
    if (done_) res = result_;
    return done_;
  }

 private:
  std::chrono::steady_clock::time_point deadline_;
  std::atomic<bool> cancelled_{false};
  mutable std::mutex m_;
  std::condition_variable cv_;
  std::vector<gen_event> events_;
  bool done_ = false;
  gen_result result_;
};

}  // namespace cmfx::driver::serve
