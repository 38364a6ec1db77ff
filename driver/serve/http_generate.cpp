// POST /v1/chat/completions and /v1/completions: validate, queue, then answer with one JSON body or an SSE stream
// (`data: {chunk}\n\n` … `data: [DONE]\n\n`). A stream whose client went away cancels its job, which frees the slot.
#include <chrono>
#include <ctime>
#include <memory>

#include "serve/http_log.hpp"
#include "serve/http_server.hpp"
#include "serve/responses.hpp"

namespace cmfx::driver::serve {

using httplib::Request;
using httplib::Response;
using json = nlohmann::ordered_json;

namespace {

std::string sse(const json& j) { return "data: " + dump_json(j) + "\n\n"; }

// CPU time of the calling thread: what the HTTP side takes from the model threads on a busy machine (wall time
// would also count the time the thread waited for a core).
double thread_cpu_seconds() {
  timespec t{};
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &t);
  return double(t.tv_sec) + 1e-9 * double(t.tv_nsec);
}

// Decrements the in-flight count on scope exit unless the response took it over (streams: the releaser).
class flight_guard {
 public:
  explicit flight_guard(std::atomic<int>& n) : n_(&n) { ++*n_; }
  ~flight_guard() {
    if (n_) --*n_;
  }
  flight_guard(const flight_guard&) = delete;
  flight_guard& operator=(const flight_guard&) = delete;
  void release() noexcept { n_ = nullptr; }

 private:
  std::atomic<int>* n_;
};

struct stream_state {
  std::shared_ptr<job> j;
  response_meta meta;
  std::unique_ptr<text_chunks> text;  // the per-token chunks' fast path
  bool started = false;
  size_t tool_index = 0, text_offset = 0;
};

api_error job_error(const gen_result& r) {
  // 499 (cancelled) reaches a waiting client only when the server aborts: report it as unavailable.
  if (r.error_status == 499)
    return api_error(503, "The request was cancelled: the server is shutting down.", "server_error", {}, "cancelled");
  return api_error(r.error_status, r.error_message, r.error_type, {}, r.error_code);
}

void note_result(const gen_result& r) {
  request_log& l = current_request_log();
  l.completion_tokens = static_cast<int64_t>(r.completion_tokens);
  l.cached_tokens = static_cast<int64_t>(r.cached_tokens);
  if (r.error_status) l.note = r.error_code;
}

}  // namespace

void http_server::generate(const Request&, Response& res, const std::string& body, job_kind kind) {
  // Counted before the draining check, so that the drain either waits for this request or this request sees it.
  flight_guard flight(in_flight_);
  if (draining_) throw api_error(503, "The server is shutting down.", "server_error", {}, "shutting_down");
  const json b = parse_body(body);
  gen_request r = kind == job_kind::chat ? parse_chat_request(b, rc_, new_id("chatcmpl"))
                                         : parse_completion_request(b, rc_, new_id("cmpl"));
  request_log& l = current_request_log();
  l.prompt_tokens = static_cast<int64_t>(r.prompt.size());
  if (a_.log_prompts) l.prompt_text = r.log_text;
  const auto deadline =
      std::chrono::steady_clock::now() +
      std::chrono::duration_cast<std::chrono::steady_clock::duration>(std::chrono::duration<double>(a_.timeout_s));
  auto j = std::make_shared<job>(std::move(r), deadline);
  switch (sched_.submit(j)) {
    case submit_status::ok:
      break;
    case submit_status::queue_full:
      throw api_error(503,
                      "The server is busy: every slot is generating and the queue is full (--parallel, --queue). "
                      "Retry later.",
                      "server_error", {}, "queue_full");
    case submit_status::shutting_down:
      throw api_error(503, "The server is shutting down.", "server_error", {}, "shutting_down");
  }
  if (j->req.stream) {
    answer_stream(res, j);
    flight.release();  // the stream's releaser decrements
  } else {
    answer_blocking(res, j);
  }
}

void http_server::answer_blocking(Response& res, const std::shared_ptr<job>& j) {
  accumulated acc;
  gen_result r;
  std::vector<gen_event> evs;
  for (;;) {
    const bool done = j->wait(evs, r, std::chrono::milliseconds(1000));
    for (auto& e : evs) acc.add(std::move(e));
    evs.clear();
    if (done) break;
  }
  note_result(r);
  if (r.error_status) throw job_error(r);
  const response_meta meta{&j->req, static_cast<int64_t>(std::time(nullptr)), rc_.tok};
  const json out = j->req.kind == job_kind::chat ? chat_response(meta, acc, r) : completion_response(meta, acc, r);
  res.set_content(dump_json(out), "application/json");
}

void http_server::answer_stream(Response& res, const std::shared_ptr<job>& j) {
  auto st = std::make_shared<stream_state>();
  st->j = j;
  st->meta = response_meta{&j->req, static_cast<int64_t>(std::time(nullptr)), rc_.tok};
  st->text = std::make_unique<text_chunks>(st->meta);
  res.set_header("Cache-Control", "no-cache");
  res.set_header("X-Accel-Buffering", "no");
  res.set_chunked_content_provider(
      "text/event-stream",
      [st, this](size_t, httplib::DataSink& sink) -> bool {
        // Runs outside cpp-httplib's exception guard: nothing may escape.
        try {
          job& jb = *st->j;
          if (!sink.is_writable()) {
            jb.cancel();
            current_request_log().note = "client_gone";
            return false;
          }
          const bool chat = jb.req.kind == job_kind::chat;
          std::string out;
          if (!st->started) {
            st->started = true;
            if (chat) out += sse(chat_chunk(st->meta, nullptr, true, nullptr, st->tool_index));
          }
          std::vector<gen_event> evs;
          gen_result r;
          const bool done = jb.wait(evs, r, std::chrono::milliseconds(out.empty() ? 250 : 0));
          const double cpu0 = thread_cpu_seconds();  // JSON + socket write, for /metrics
          for (const auto& e : evs)
            if (!st->text->render(e, out))
              out += sse(chat ? chat_chunk(st->meta, &e, false, nullptr, st->tool_index)
                              : completion_chunk(st->meta, &e, nullptr, st->text_offset));
          if (done) {
            note_result(r);
            if (r.error_status) {
              out += sse(error_json(job_error(r)));
            } else {
              const char* fr = r.finish_reason.c_str();
              out += sse(chat ? chat_chunk(st->meta, nullptr, false, fr, st->tool_index)
                              : completion_chunk(st->meta, nullptr, fr, st->text_offset));
              if (jb.req.include_usage) out += sse(usage_chunk(st->meta, r));
            }
            out += "data: [DONE]\n\n";
          }
          if (!out.empty() && !sink.write(out.data(), out.size())) {
            jb.cancel();
            current_request_log().note = "client_gone";
            return false;
          }
          if (!out.empty()) m_.add_stream_write(1, thread_cpu_seconds() - cpu0);
          if (done) sink.done();
          return true;
        } catch (...) {
          st->j->cancel();
          return false;
        }
      },
      [this, j](bool) {
        j->cancel();  // no-op once finished; frees the slot if the client went away
        --in_flight_;
      });
}

}  // namespace cmfx::driver::serve
