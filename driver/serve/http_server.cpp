// Routes, access control, body limits, errors and the request log of `cmfx serve` (see http_server.hpp).
#include "serve/http_server.hpp"

#include <netinet/in.h>
#include <sys/socket.h>

#include <chrono>
#include <cstdio>
#include <ctime>
#include <random>

#include "serve/http_log.hpp"

namespace cmfx::driver::serve {

using httplib::ContentReader;
using httplib::Request;
using httplib::Response;
using json = nlohmann::ordered_json;

namespace {

// Timing-independent comparison: the loop always runs over the whole key, whatever the client sent.
bool same_secret(std::string_view given, std::string_view key) {
  volatile unsigned char diff = given.size() == key.size() ? 0 : 1;
  for (size_t i = 0; i < key.size(); ++i) {
    const unsigned char g = i < given.size() ? static_cast<unsigned char>(given[i]) : 0;
    diff = static_cast<unsigned char>(diff | (g ^ static_cast<unsigned char>(key[i])));
  }
  return diff == 0;
}

std::string short_text(const std::string& s, size_t max) {
  std::string t = s.size() > max ? s.substr(0, max) + "..." : s;
  return dump_json(json(t));  // quoted, control characters escaped, invalid UTF-8 replaced
}

// cpp-httplib 0.11 (Debian's shared library) listens with a backlog of 5 (CPPHTTPLIB_LISTEN_BACKLOG, fixed when
// the library was built) and keeps its socket private. A burst of connections (16 clients starting at once on a
// busy 2-core machine) overflowed it: the kernel logged "Possible SYN flooding" and some clients got "connection
// reset". Calling listen() again on a listening socket only changes its backlog (Linux), so the server's socket
// — the one listening on our port — is found among the process's descriptors and given SOMAXCONN.
void widen_backlog(int port) {
  for (int fd = 0; fd < 1024; ++fd) {
    int listening = 0;
    socklen_t len = sizeof listening;
    if (getsockopt(fd, SOL_SOCKET, SO_ACCEPTCONN, &listening, &len) != 0 || !listening) continue;
    sockaddr_storage addr{};
    socklen_t alen = sizeof addr;
    if (getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &alen) != 0) continue;
    int p = -1;
    if (addr.ss_family == AF_INET) p = ntohs(reinterpret_cast<const sockaddr_in*>(&addr)->sin_port);
    if (addr.ss_family == AF_INET6) p = ntohs(reinterpret_cast<const sockaddr_in6*>(&addr)->sin6_port);
    if (p == port) (void)::listen(fd, SOMAXCONN);
  }
}

const char* allow_for(bool post) { return post ? "POST, OPTIONS" : "GET, HEAD, OPTIONS"; }

struct route {
  const char* pattern;
  bool post;       // POST route (else GET)
  bool needs_key;  // under --api-key
};

}  // namespace

http_server::http_server(const serve_args& a, std::string api_key, request_context rc, scheduler& s, metrics& m)
    : a_(a),
      api_key_(std::move(api_key)),
      rc_(std::move(rc)),
      sched_(s),
      m_(m),
      svr_(std::make_unique<httplib::Server>()) {
  const size_t threads = a_.http_threads ? a_.http_threads : size_t{a_.parallel} + a_.queue + 4;
  svr_->new_task_queue = [threads] { return new httplib::ThreadPool(threads); };
  svr_->set_payload_max_length(a_.max_body_bytes);
  svr_->set_read_timeout(10, 0);
  svr_->set_write_timeout(10, 0);
  if (!a_.cors_origin.empty())
    svr_->set_default_headers({{"Access-Control-Allow-Origin", a_.cors_origin}, {"Vary", "Origin"}});
  std::random_device rd;
  id_state_ = (uint64_t{rd()} << 32) ^ rd();
  routes();
}

http_server::~http_server() = default;

int http_server::bind() {
  const int port = a_.port == 0 ? svr_->bind_to_any_port(a_.host) : svr_->bind_to_port(a_.host, a_.port) ? a_.port : -1;
  if (port > 0) widen_backlog(port);
  return port;
}

bool http_server::listen() { return svr_->listen_after_bind(); }

void http_server::stop() { svr_->stop(); }

std::string http_server::new_id(const char* prefix) {
  std::lock_guard lk(id_mu_);
  // splitmix64 over a random start: unique within the process, unpredictable across restarts.
  uint64_t z = (id_state_ += 0x9E3779B97F4A7C15ull);
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  z ^= z >> 31;
  char buf[40];
  std::snprintf(buf, sizeof buf, "%s-%016llx", prefix, static_cast<unsigned long long>(z));
  return buf;
}

bool http_server::authorized(const Request& req) const {
  if (api_key_.empty()) return true;
  const std::string h = req.get_header_value("Authorization");
  if (h.size() < 7 || (h.compare(0, 7, "Bearer ") != 0 && h.compare(0, 7, "bearer ") != 0)) return false;
  size_t b = 7, e = h.size();
  while (b < e && h[b] == ' ') ++b;
  while (e > b && (h[e - 1] == ' ' || h[e - 1] == '\t')) --e;
  return same_secret(std::string_view(h).substr(b, e - b), api_key_);
}

void http_server::set_error(Response& res, const api_error& e) const {
  res.status = e.status;
  if (e.status == 401) res.set_header("WWW-Authenticate", "Bearer");
  if (e.status == 503) res.set_header("Retry-After", "1");
  res.set_content(dump_json(error_json(e)), "application/json");
}

// The body, read through our own receiver so that the limit also holds for chunked and compressed bodies
// (cpp-httplib 0.11 checks only Content-Length). Past the limit the rest is drained (up to 16× the limit) so the
// connection stays usable; beyond that the connection is closed.
std::string http_server::read_body(const Request& req, Response& res, const ContentReader& rd) {
  const uint64_t limit = a_.max_body_bytes;
  std::string body;
  uint64_t seen = 0;
  bool too_big = false;
  bool ok;
  if (req.is_multipart_form_data()) {
    ok = rd([](const httplib::MultipartFormData&) { return true; },
            [&](const char*, size_t n) { return (seen += n) <= 16 * limit; });
    if (!ok) res.set_header("Connection", "close");
    throw api_error(415, "Send the request as a JSON body (Content-Type: application/json).", "invalid_request_error",
                    {}, "unsupported_media_type");
  }
  ok = rd([&](const char* d, size_t n) {
    seen += n;
    if (too_big || body.size() + n > limit) {
      too_big = true;
      std::string().swap(body);
      return seen <= 16 * limit;
    }
    body.append(d, n);
    return true;
  });
  if (too_big || res.status == 413) {
    if (!ok && res.status != 413) res.set_header("Connection", "close");
    throw api_error(
        413,
        "The request body is larger than the server's limit of " + std::to_string(limit) + " bytes (--max-body-bytes).",
        "invalid_request_error", {}, "request_too_large");
  }
  if (!ok) {
    res.set_header("Connection", "close");
    throw bad_request("Could not read the request body.", {}, "invalid_body");
  }
  return body;
}

template <class F>
void http_server::guarded(const Request& req, Response& res, const ContentReader* rd, bool needs_key, F&& fn) {
  try {
    std::string body;
    if (rd) body = read_body(req, res, *rd);
    if (needs_key && !authorized(req))
      throw api_error(401,
                      req.has_header("Authorization") ? "Incorrect API key provided."
                                                      : "Missing API key: send the header 'Authorization: Bearer KEY'.",
                      "invalid_request_error", {}, "invalid_api_key");
    fn(body);
  } catch (const api_error& e) {
    set_error(res, e);
  } catch (const std::exception& e) {
    set_error(res,
              api_error(500, std::string("Internal server error: ") + e.what(), "server_error", {}, "internal_error"));
  }
}

void http_server::routes() {
  httplib::Server& s = *svr_;
  s.set_pre_routing_handler([](const Request&, Response&) {
    request_log& l = current_request_log();
    l = request_log{};
    l.start = std::chrono::steady_clock::now();
    l.started = true;
    return httplib::Server::HandlerResponse::Unhandled;
  });
  s.set_logger([this](const Request& req, const Response& res) {
    try {  // runs outside cpp-httplib's exception guard
      log_request(req, res);
    } catch (...) {
    }
  });
  s.set_exception_handler([this](const Request&, Response& res, std::exception_ptr) {
    set_error(res, api_error(500, "Internal server error.", "server_error", {}, "internal_error"));
  });
  s.set_error_handler(httplib::Server::HandlerWithResponse([](const Request& req, Response& res) {
    if (!res.body.empty() || res.content_provider_) return httplib::Server::HandlerResponse::Unhandled;
    std::string msg = "HTTP error " + std::to_string(res.status);
    if (res.status == 400) msg = "Bad request: the HTTP request could not be parsed.";
    if (res.status == 404) msg = "Unknown route: " + req.method + " " + req.path.substr(0, 200);
    if (res.status == 413) msg = "The request is too large.";
    if (res.status == 414) msg = "The request URI is too long.";
    const std::string type = res.status >= 500 ? "server_error" : "invalid_request_error";
    res.set_content(dump_json(error_json(msg, type, {}, res.status == 404 ? "not_found" : "")), "application/json");
    return httplib::Server::HandlerResponse::Handled;
  }));

  const bool key_metrics = !api_key_.empty();
  const route known[] = {
      {"/health", false, false},        {"/metrics", false, key_metrics},     {"/v1/models", false, true},
      {"/v1/models/(.+)", false, true}, {"/v1/chat/completions", true, true}, {"/v1/completions", true, true}};

  s.Get("/health", [this](const Request& req, Response& res) {
    guarded(req, res, nullptr, false, [&](const std::string&) {
      if (draining_) {
        res.status = 503;
        res.set_content(R"({"status":"shutting_down"})", "application/json");
        return;
      }
      res.set_content(R"({"status":"ok"})", "application/json");
    });
  });
  s.Get("/metrics", [this, key_metrics](const Request& req, Response& res) {
    guarded(req, res, nullptr, key_metrics,
            [&](const std::string&) { res.set_content(m_.prometheus(), "text/plain; version=0.0.4; charset=utf-8"); });
  });
  auto model_obj = [this] {
    return json{
        {"id", rc_.model_name}, {"object", "model"}, {"created", 0}, {"owned_by", "cmfx"}, {"max_model_len", rc_.ctx}};
  };
  s.Get("/v1/models", [this, model_obj](const Request& req, Response& res) {
    guarded(req, res, nullptr, true, [&](const std::string&) {
      res.set_content(dump_json(json{{"object", "list"}, {"data", json::array({model_obj()})}}), "application/json");
    });
  });
  s.Get("/v1/models/(.+)", [this, model_obj](const Request& req, Response& res) {
    guarded(req, res, nullptr, true, [&](const std::string&) {
      const std::string id = req.matches.size() > 1 ? std::string(req.matches[1]) : std::string();
      if (id != rc_.model_name)
        throw api_error(404, "The model '" + id.substr(0, 200) + "' does not exist.", "invalid_request_error", "model",
                        "model_not_found");
      res.set_content(dump_json(model_obj()), "application/json");
    });
  });
  for (const auto kind : {job_kind::chat, job_kind::completion}) {
    const char* path = kind == job_kind::chat ? "/v1/chat/completions" : "/v1/completions";
    s.Post(path, [this, kind](const Request& req, Response& res, const ContentReader& rd) {
      guarded(req, res, &rd, true, [&](const std::string& body) { generate(req, res, body, kind); });
    });
  }

  // Known paths with another method: 405 (after the key check on /v1); OPTIONS: 204 (+ CORS preflight answers).
  for (const route& r : known) {
    const std::string allow = allow_for(r.post);
    auto not_allowed = [this, r, allow](const Request& req, Response& res, const ContentReader* rd) {
      guarded(req, res, rd, r.needs_key, [&](const std::string&) {
        res.set_header("Allow", allow);
        throw api_error(
            405,
            "Method " + req.method + " is not allowed on " + req.path.substr(0, 200) + " (allowed: " + allow + ").",
            "invalid_request_error", {}, "method_not_allowed");
      });
    };
    auto with_body = [not_allowed](const Request& req, Response& res, const ContentReader& rd) {
      not_allowed(req, res, &rd);
    };
    if (r.post)
      s.Get(r.pattern, [not_allowed](const Request& req, Response& res) { not_allowed(req, res, nullptr); });
    else
      s.Post(r.pattern, with_body);
    s.Put(r.pattern, with_body);
    s.Patch(r.pattern, with_body);
    s.Delete(r.pattern, with_body);
    s.Options(r.pattern, [this, allow](const Request&, Response& res) {
      res.status = 204;
      res.set_header("Allow", allow);
      if (!a_.cors_origin.empty()) {
        res.set_header("Access-Control-Allow-Methods", allow);
        res.set_header("Access-Control-Allow-Headers", "Authorization, Content-Type");
        res.set_header("Access-Control-Max-Age", "600");
      }
    });
  }
  // Everything else: 404 (bodies drained within the limit first; /v1/* answers 401 first without the key).
  auto unknown = [this](const Request& req, Response& res, const ContentReader* rd) {
    const bool v1 = req.path.compare(0, 4, "/v1/") == 0 || req.path == "/v1";
    guarded(req, res, rd, v1, [&](const std::string&) {
      throw api_error(404, "Unknown route: " + req.method + " " + req.path.substr(0, 200), "invalid_request_error", {},
                      "not_found");
    });
  };
  auto unknown_body = [unknown](const Request& req, Response& res, const ContentReader& rd) { unknown(req, res, &rd); };
  s.Get(".*", [unknown](const Request& req, Response& res) { unknown(req, res, nullptr); });
  s.Options(".*", [unknown](const Request& req, Response& res) { unknown(req, res, nullptr); });
  s.Post(".*", unknown_body);
  s.Put(".*", unknown_body);
  s.Patch(".*", unknown_body);
  s.Delete(".*", unknown_body);
}

// One line per request on stderr: client, method, path, status, tokens, milliseconds. Never headers (the API key),
// never the prompt unless --log-prompts.
void http_server::log_request(const Request& req, const Response& res) {
  m_.count_request(res.status);
  request_log& l = current_request_log();
  std::string line = "cmfx serve: " + req.remote_addr + " " + req.method + " " + short_text(req.path, 200) + " " +
                     std::to_string(res.status);
  if (l.prompt_tokens >= 0) line += " prompt=" + std::to_string(l.prompt_tokens);
  if (l.cached_tokens >= 0) line += " cached=" + std::to_string(l.cached_tokens);
  if (l.completion_tokens >= 0) line += " completion=" + std::to_string(l.completion_tokens);
  if (l.started) {
    char ms[32];
    std::snprintf(ms, sizeof ms, " ms=%.1f",
                  std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - l.start).count());
    line += ms;
  }
  if (!l.note.empty()) line += " " + l.note;
  if (a_.log_prompts && !l.prompt_text.empty()) line += " prompt_text=" + short_text(l.prompt_text, 4096);
  line += '\n';
  std::fwrite(line.data(), 1, line.size(), stderr);
  l = request_log{};
}

}  // namespace cmfx::driver::serve
