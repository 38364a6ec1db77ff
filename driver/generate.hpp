#pragma once
// Text generation on the CPU model graph, for `cmfx run -p` / `-i`:
//   prompt_cache   — the model state plus the token ids it holds, and a copy taken at the end of the last prompt;
//                    a new prompt runs only the tokens after the longest prefix either of them can keep;
//   text_printer   — where a turn's output goes (content on stdout, reasoning on stderr, tool calls as JSON lines);
//   generate_turn  — prefill, then sample → stream_decoder (whole UTF-8 characters) → stop strings → chat output
//                    parser, until EOS, a stop string or the token limit.
#include <functional>
#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "cmfx/sample/sampler.hpp"
#include "cmfx/text/chat.hpp"
#include "cmfx/text/tokenizer.hpp"
#include "model/device_sampling.hpp"
#include "model/dsv41_forward.hpp"
#include "model/dsv4_forward.hpp"

namespace cmfx::driver {

class gpu_runner;  // model/gpu_runner.hpp

/// Prompt tokens per forward call of a prefill on the CPU graphs (bounds the activations of a long prompt).
inline constexpr uint64_t prefill_chunk = 512;

/// The model behind a prompt_cache (the V4 or the V4.1 graph): a live state, a snapshot of it, forward on the live
/// state. generate.cpp implements it for both models.
class cache_backend {
 public:
  virtual ~cache_backend() = default;
  /// Runs ids on the live state; returns the last token's logits when `last`, else nothing.
  virtual std::vector<float> forward(std::span<const uint32_t> ids, bool last) = 0;
  virtual void truncate(uint64_t n) = 0;  // live state to position n (0: reset)
  /// Positions [0, end) of the live state are one prompt's prefill, run in several forward() calls (V4.1's stale
  /// index-key rule: dsv41_state::mark_prefill; V4 ignores it).
  virtual void mark_prefill(uint64_t end) = 0;
  /// How many leading positions of the live state (or of the snapshot) a new prompt may reuse
  /// (model/prefix_reuse.hpp).
  virtual uint64_t reuse_limit(bool snapshot) const = 0;
  virtual void save() = 0;                // snapshot = live
  virtual void restore() = 0;             // live = snapshot
  virtual void reset() = 0;               // live and snapshot to position 0
  virtual uint64_t vocab() const = 0;
  virtual uint64_t rollback_tokens() const = 0;  // how far truncate can roll back
  /// Prompt ids per forward() call of a prefill: prefill_chunk on the CPU graphs, whose activations grow with a
  /// call's ids; a whole prompt on a GPU graph, which runs a call in its own chunks (bounded scratch, the next chunk
  /// recorded while the device runs this one: model/chunk_pipeline.hpp).
  virtual uint64_t prefill_piece() const { return prefill_chunk; }
  /// Greedy steps chained on the device (gpu_graph::decode_greedy_each) where the backend can run `steps` of them
  /// from here; else chain_greedy is not called.
  virtual bool can_chain(uint64_t /*steps*/) const { return false; }
  virtual uint64_t chain_greedy(uint32_t /*first*/, uint64_t /*max*/, const std::function<bool(uint32_t)>& /*on_token*/) {
    return 0;
  }
  /// Steps whose tokens the device chooses (gpu_graph::decode_sampled_each: chained where the graph chains, else
  /// step by step with only the ids read back) where the device samples and `steps` fit the context; else
  /// chain_sampled is not called.
  virtual bool can_sample(uint64_t /*steps*/) const { return false; }
  virtual uint64_t chain_sampled(uint32_t /*first*/, uint64_t /*max*/, const device_sampling& /*ds*/,
                                 const std::function<bool(uint32_t)>& /*on_token*/) {
    return 0;
  }
};

class prompt_cache {
 public:
  explicit prompt_cache(dsv4_model& m);
  explicit prompt_cache(dsv41_model& m);
  /// The V4 graph on a Vulkan device: no rollback (a prefix is kept when the state ends there, or from the
  /// snapshot of the last prompt, a device-side copy of the state).
  explicit prompt_cache(gpu_runner& m);
  /// Prompt ids per forward() call of prefill (0, the default: the backend's, cache_backend::prefill_piece).
  void set_prefill_piece(uint64_t n) noexcept { piece_ = n; }

  /// Makes the state hold `prompt` (non-empty) and returns the logits of its last token. The state keeps the
  /// longest common prefix of its tokens (or of the snapshot's: the previous prompt) and `prompt` when it can get
  /// there — it already ends there, or the state's truncate can roll back to it — and runs only the rest (at least
  /// one token). `reused` receives the number of prompt tokens that were not run again.
  std::vector<float> prefill(const std::vector<uint32_t>& prompt, uint64_t& reused);
  /// Runs one more token; returns its logits.
  std::vector<float> step(uint32_t id);
  /// Greedy decode without the logits, chained on the device where the backend can run `max` steps that way:
  /// runs `first`, hands each argmax to on_token and runs it next, until on_token returns false or `max` ids were
  /// handed over. Returns false, running nothing, where the backend cannot chain (the caller steps instead).
  bool chain_greedy(uint32_t first, uint64_t max, const std::function<bool(uint32_t)>& on_token);
  /// The same with the tokens drawn on the device by `smp`'s settings from its RNG state (its params() must be
  /// device_samplable); each handed-over id is recorded in smp (accept_drawn) before on_token sees it. Returns
  /// false, running nothing, where the backend cannot.
  bool chain_sampled(uint32_t first, uint64_t max, sampler& smp, const std::function<bool(uint32_t)>& on_token);
  /// Forgets everything.
  void reset();
  const std::vector<uint32_t>& tokens() const noexcept { return live_ids_; }
  uint64_t vocab() const noexcept { return b_->vocab(); }

 private:
  /// Runs a chain (run(cb): the backend hands each id to cb) with on_id per id, keeping live_ids_ in step with the
  /// state: `first`, then every id handed over but the last.
  void track_chain(uint32_t first, const std::function<void(const std::function<bool(uint32_t)>&)>& run,
                   const std::function<bool(uint32_t)>& on_id);
  std::unique_ptr<cache_backend> b_;
  std::vector<uint32_t> live_ids_, snap_ids_;
  uint64_t piece_ = 0;
};

/// Content goes to stdout as it streams (flushed per token). Reasoning goes to stderr between a "[thinking]" and a
/// "[/thinking]" line (also dimmed when stderr is a terminal), so stdout carries only the answer. Each tool call
/// is one JSON line on stdout: {"tool_call":{"id":…,"name":…,"arguments":…}}.
class text_printer {
 public:
  text_printer();
  void content(std::string_view s);
  void reasoning(std::string_view s);
  void tool_call(const chat_tool_call& c);
  /// Closes an open reasoning block and ends stdout's line.
  void end_turn();

 private:
  void close_reasoning();
  bool dim_ = false;
  bool in_reasoning_ = false;
  char last_out_ = '\n', last_err_ = '\n';
};

struct turn_settings {
  sampling_params sampling;       // stop_tokens: EOS
  uint64_t max_tokens = 0;
  std::vector<std::string> stops; // stop strings (the text before one is kept, the string itself is not)
  bool raw = false;               // no chat output parser: the decoded text is the content
  /// Sampled tokens drawn on the device where the backend can (the same choices: cmfx::sampler's, bit for bit);
  /// false: the logits are read back and sampled on the host (`cmfx run --sampling host`).
  bool device_sampling = true;
  chat_mode mode = chat_mode::chat;
};

struct turn_result {
  std::string content, reasoning;
  std::vector<chat_tool_call> tool_calls;
  std::vector<int32_t> ids;  // every sampled id, a final EOS included
  uint64_t prompt_tokens = 0, reused = 0;
  double prefill_s = 0.0, decode_s = 0.0;
  std::string finish;        // "eos" | "stop" | "length"
  /// How the ids after the first were chosen: "greedy chained on the device", "sampled on the device" (chained),
  /// or "step by step" (logits read back, the host's sampler).
  std::string decode_how = "step by step";
};

turn_result generate_turn(prompt_cache& cache, const tokenizer& tok, const std::vector<uint32_t>& prompt,
                          const turn_settings& s, text_printer& out);

}  // namespace cmfx::driver
