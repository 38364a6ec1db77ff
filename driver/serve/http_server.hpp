#pragma once
// The HTTP side of `cmfx serve` (cpp-httplib): routes, API-key check, CORS, bounded body reading, OpenAI-shaped
// errors for everything (404 unknown route, 405 wrong method, 413 body too large, 503 queue full / shutting
// down), the request log and the graceful drain. Generation endpoints are in http_generate.cpp.
#include <httplib.h>

#include <atomic>
#include <memory>
#include <string>

#include "serve/api_error.hpp"
#include "serve/metrics.hpp"
#include "serve/request_parse.hpp"
#include "serve/scheduler.hpp"
#include "serve/serve.hpp"

namespace cmfx::driver::serve {

class http_server {
 public:
  http_server(const serve_args& a, std::string api_key, request_context rc, scheduler& s, metrics& m);
  ~http_server();
  http_server(const http_server&) = delete;
  http_server& operator=(const http_server&) = delete;

  /// Binds host:port (port 0: any free port); returns the bound port, or -1.
  int bind();
  /// Serves until stop(); false if the server could not run.
  bool listen();
  /// Graceful shutdown, step 1: new requests get 503, /health answers 503.
  void begin_drain() noexcept { draining_ = true; }
  bool draining() const noexcept { return draining_; }
  /// Accepted generation requests whose response is not fully written yet.
  int in_flight() const noexcept { return in_flight_; }
  void stop();

 private:
  template <class F>
  void guarded(const httplib::Request& req, httplib::Response& res, const httplib::ContentReader* rd, bool needs_key,
               F&& fn);
  std::string read_body(const httplib::Request& req, httplib::Response& res, const httplib::ContentReader& rd);
  bool authorized(const httplib::Request& req) const;
  void set_error(httplib::Response& res, const api_error& e) const;
  void routes();
  void log_request(const httplib::Request& req, const httplib::Response& res);
  void generate(const httplib::Request& req, httplib::Response& res, const std::string& body, job_kind kind);
  void answer_blocking(httplib::Response& res, const std::shared_ptr<job>& j);
  void answer_stream(httplib::Response& res, const std::shared_ptr<job>& j);
  std::string new_id(const char* prefix);

  const serve_args& a_;
  std::string api_key_;
  request_context rc_;
  scheduler& sched_;
  metrics& m_;
  std::unique_ptr<httplib::Server> svr_;
  std::atomic<bool> draining_{false};
  std::atomic<int> in_flight_{0};
  std::mutex id_mu_;
  uint64_t id_state_ = 0;
};

}  // namespace cmfx::driver::serve
