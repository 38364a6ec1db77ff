#pragma once
// Errors in OpenAI's shape: {"error": {"message", "type", "param", "code"}} with an HTTP status.
#include <nlohmann/json.hpp>
#include <stdexcept>
#include <string>

namespace cmfx::driver::serve {

struct api_error : std::runtime_error {
  int status;
  std::string type, param, code;  // empty param / code → null
  api_error(int st, std::string message, std::string type_, std::string param_ = {}, std::string code_ = {})
      : std::runtime_error(std::move(message)),
        status(st),
        type(std::move(type_)),
        param(std::move(param_)),
        code(std::move(code_)) {}
};

/// 400 invalid_request_error naming the offending parameter.
inline api_error bad_request(std::string message, std::string param = {}, std::string code = {}) {
  return api_error(400, std::move(message), "invalid_request_error", std::move(param), std::move(code));
}

inline nlohmann::ordered_json error_json(const std::string& message, const std::string& type, const std::string& param,
                                         const std::string& code) {
  nlohmann::ordered_json e;
  e["message"] = message;
  e["type"] = type;
  e["param"] = param.empty() ? nlohmann::ordered_json() : nlohmann::ordered_json(param);
  e["code"] = code.empty() ? nlohmann::ordered_json() : nlohmann::ordered_json(code);
  return nlohmann::ordered_json{{"error", std::move(e)}};
}
inline nlohmann::ordered_json error_json(const api_error& e) { return error_json(e.what(), e.type, e.param, e.code); }

/// JSON text that never throws on invalid UTF-8 (replaced by U+FFFD).
template <class J>
std::string dump_json(const J& j) {
  return j.dump(-1, ' ', false, J::error_handler_t::replace);
}

}  // namespace cmfx::driver::serve
