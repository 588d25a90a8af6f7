// An HTTP error in OpenAI's shape: {"error": {"message", "type", "param", "code"}} with a 4xx/5xx
// status. Thrown by request parsing and admission; the HTTP layer turns it into the response.
#pragma once

#include <nlohmann/json.hpp>
#include <stdexcept>
#include <string>

namespace molt::server {

struct ApiError : std::runtime_error {
  ApiError(int status, std::string message, std::string param = {},
           std::string code = "invalid_value", std::string type = "invalid_request_error")
      : std::runtime_error(message),
        status(status),
        param(std::move(param)),
        code(std::move(code)),
        type(std::move(type)) {}
  int status;
  std::string param, code, type;
};

inline nlohmann::json error_json(const std::string& message, const std::string& type,
                                 const std::string& param, const std::string& code) {
  nlohmann::json e = {{"message", message}, {"type", type}, {"param", nullptr}, {"code", nullptr}};
  if (!param.empty()) e["param"] = param;
  if (!code.empty()) e["code"] = code;
  return {{"error", e}};
}

inline nlohmann::json error_json(const ApiError& e) {
  return error_json(e.what(), e.type, e.param, e.code);
}

}  // namespace molt::server
