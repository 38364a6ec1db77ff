#pragma once
// The scheduler thread: it alone owns the model. Requests wait in a bounded FIFO queue; each iteration it moves
// waiting requests into free slots, then runs one step for every busy slot together (continuous batching): one
// forward_batch over each slot's next prefill chunk (--prefill-chunk prompt tokens) or its one pending decode
// token, then each slot that reached a token samples it. So prefill of a new request is interleaved with the
// decode steps of the others, and a new request joins at the next iteration.
//
// Prefix reuse: a free slot keeps its token vector and state (and, with the snapshot option, a copy of the state
// at the end of its last prompt). A new request goes to the free slot that shares the longest usable prefix with
// its prompt; the state is rolled back to that prefix (engine::truncate, within engine::rollback_tokens of the
// end) or reset, and only the rest of the prompt is prefilled.
//
// The model is a serve::engine (engine.hpp): a V4 / V4.1 CPU graph (many slots, one forward_batch per step) or a
// model on a Vulkan device (one slot).
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <memory>
#include <mutex>
#include <thread>
#include <vector>

#include "cmfx/text/tokenizer.hpp"
#include "serve/engine.hpp"
#include "serve/job.hpp"
#include "serve/metrics.hpp"
#include "serve/output.hpp"

namespace cmfx::driver::serve {

struct scheduler_options {
  unsigned parallel = 1;
  unsigned queue = 16;
  uint64_t ctx = 4096;
  uint64_t prefill_chunk = 256;
  bool snapshot = true;
  bool device_sampling = true;  ///< a lone sampled request chains its draws on the device where the engine can
};

enum class submit_status { ok, queue_full, shutting_down };

class scheduler {
 public:
  /// o.parallel must not exceed model.max_slots().
  scheduler(engine& model, const tokenizer& tok, scheduler_options o, metrics& m);
  ~scheduler();
  scheduler(const scheduler&) = delete;
  scheduler& operator=(const scheduler&) = delete;

  /// Queues a request (never blocks): queue_full when parallel + queue requests are already in the server.
  submit_status submit(std::shared_ptr<job> j);
  /// Requests waiting or generating.
  size_t load() const;
  /// Lets the queued and running requests finish, then stops the thread (new submits get shutting_down).
  void stop();
  /// Cancels every queued and running request (they end with an error), then stops the thread.
  void abort();

 private:
  struct slot {
    unsigned id = 0;                    // the engine's slot index
    std::vector<uint32_t> tokens;       // what the slot's live state in the engine holds
    std::vector<uint32_t> snap_tokens;  // what its snapshot holds (snapshot option)
    bool has_snap = false;
    std::unique_ptr<sampler> smp;
    std::shared_ptr<job> j;  // the request it serves, or null (free)
    std::unique_ptr<output_pipeline> out;
    size_t prefill_pos = 0;  // next prompt index to run
    uint64_t generated = 0;
    uint64_t cached = 0;   // prompt tokens reused
    int32_t pending = -1;  // sampled, not yet run through the model
    uint64_t last_used = 0;
    uint64_t bytes = 0;
  };

  void loop();
  void expire_waiting();
  void assign(std::shared_ptr<job> j);
  uint64_t usable_prefix(const slot& s, const std::vector<int32_t>& prompt, bool& from_snap) const;
  /// One continuous-batching step: every active slot contributes its next prefill chunk or its pending token to
  /// one engine::forward call; then the slots that reached a token sample it (in parallel) and emit it.
  void step_all();
  /// One slot decoding with pure greedy sampling and no logprobs on an engine that chains greedy steps on the
  /// device: a burst of chained steps, each id through emit() as it comes, until the request ends, a queued
  /// request could start in a free slot, or chain_burst ids (a burst drops the one step it ran ahead, and queued
  /// requests' deadlines are checked between bursts). False (nothing run) where that does not apply.
  bool try_chain();
  static constexpr uint64_t chain_burst = 64;
  /// Cancellation and deadline checks before a step; false when the slot was ended.
  bool still_running(slot& s);
  /// A token the slot's sampler chose: output pipeline, event to the client, end on stop / length.
  void emit(slot& s, const sample_result& r);
  void end(slot& s, gen_result r);
  void fail(slot& s, int status, const std::string& message, const std::string& type, const std::string& code);
  void update_bytes(slot& s);

  engine& model_;
  const tokenizer& tok_;
  scheduler_options o_;
  metrics& m_;
  uint64_t vocab_;
  std::vector<slot> slots_;
  uint64_t tick_ = 0;

  mutable std::mutex mu_;
  std::condition_variable cv_;
  std::deque<std::shared_ptr<job>> waiting_;
  size_t busy_ = 0;
  bool stopping_ = false, aborting_ = false;
  std::thread thread_;
};

}  // namespace cmfx::driver::serve
