// Field-by-field reading of OpenAI completion requests.
#include "server/request.h"

#include <fmt/core.h>

#include <cmath>
#include <nlohmann/json.hpp>
#include <random>

#include "molt/common/error.h"
#include "server/api_error.h"

namespace molt::server {
namespace {

using nlohmann::json;

[[noreturn]] void wrong_type(const std::string& param, const char* want, const json& got) {
  throw ApiError(400, fmt::format("'{}' must be {} (got {})", param, want, got.type_name()), param,
                 "invalid_type");
}

[[noreturn]] void out_of_range(const std::string& param, const std::string& why) {
  throw ApiError(400, fmt::format("'{}' {}", param, why), param, "invalid_value");
}

// A field that may be absent or null (OpenAI treats null as "not given").
const json* field(const json& body, const char* name) {
  auto it = body.find(name);
  if (it == body.end() || it->is_null()) return nullptr;
  return &*it;
}

// `param` names the field in errors when it is nested ("stream_options.include_usage").
bool read_bool(const json& body, const char* name, bool fallback, const char* param = nullptr) {
  const json* v = field(body, name);
  if (v == nullptr) return fallback;
  if (!v->is_boolean()) wrong_type(param ? param : name, "a boolean", *v);
  return v->get<bool>();
}

std::optional<double> read_number(const json& body, const char* name, double lo, double hi) {
  const json* v = field(body, name);
  if (v == nullptr) return std::nullopt;
  if (!v->is_number()) wrong_type(name, "a number", *v);
  const double x = v->get<double>();
  if (!std::isfinite(x) || x < lo || x > hi)
    out_of_range(name, fmt::format("must be between {} and {} (got {})", lo, hi, x));
  return x;
}

std::optional<int64_t> read_int(const json& body, const char* name) {
  const json* v = field(body, name);
  if (v == nullptr) return std::nullopt;
  if (!v->is_number_integer()) wrong_type(name, "an integer", *v);
  if (v->is_number_unsigned() && v->get<uint64_t>() > uint64_t{INT64_MAX})
    out_of_range(name, "is too large");
  return v->get<int64_t>();
}

// "content": a string, or an array of parts of which only {"type": "text"} ones are read.
std::string read_content(const json& m, const std::string& param) {
  const json* c = field(m, "content");
  if (c == nullptr) return {};
  if (c->is_string()) return c->get<std::string>();
  if (!c->is_array()) wrong_type(param, "a string or an array of content parts", *c);
  std::string text;
  for (size_t i = 0; i < c->size(); ++i) {
    const json& part = (*c)[i];
    const std::string p = fmt::format("{}[{}]", param, i);
    if (!part.is_object()) wrong_type(p, "an object", part);
    const json* type = field(part, "type");
    if (type == nullptr || !type->is_string()) wrong_type(p + ".type", "a string", part);
    if (type->get<std::string>() != "text") {
      throw ApiError(400,
                     fmt::format("'{}.type': only text parts are supported (got '{}')", p,
                                 type->get<std::string>()),
                     p + ".type", "unsupported_value");
    }
    const json* t = field(part, "text");
    if (t == nullptr || !t->is_string()) wrong_type(p + ".text", "a string", t ? *t : json());
    text += t->get<std::string>();
  }
  return text;
}

std::vector<ChatMessage> read_messages(const json& body) {
  const json* ms = field(body, "messages");
  if (ms == nullptr)
    throw ApiError(400, "'messages' is required", "messages", "missing_required_parameter");
  if (!ms->is_array()) wrong_type("messages", "an array", *ms);
  if (ms->empty()) out_of_range("messages", "must hold at least one message");
  std::vector<ChatMessage> out;
  for (size_t i = 0; i < ms->size(); ++i) {
    const json& m = (*ms)[i];
    const std::string p = fmt::format("messages[{}]", i);
    if (!m.is_object()) wrong_type(p, "an object", m);
    const json* role = field(m, "role");
    if (role == nullptr)
      throw ApiError(400, "'" + p + ".role' is required", p + ".role",
                     "missing_required_parameter");
    if (!role->is_string()) wrong_type(p + ".role", "a string", *role);
    std::string r = role->get<std::string>();
    if (r == "developer") r = "system";  // OpenAI's newer name for the system turn
    if (r != "system" && r != "user" && r != "assistant" && r != "tool") {
      out_of_range(p + ".role",
                   fmt::format("must be system, developer, user, assistant or tool (got '{}')", r));
    }
    out.push_back({r, read_content(m, p + ".content")});
  }
  return out;
}

void read_prompt(const json& body, CompletionRequest& r) {
  const json* p = field(body, "prompt");
  if (p == nullptr)
    throw ApiError(400, "'prompt' is required", "prompt", "missing_required_parameter");
  if (p->is_string()) {
    r.prompt = p->get<std::string>();
    return;
  }
  if (!p->is_array()) wrong_type("prompt", "a string or an array of token ids", *p);
  if (p->size() == 1 && (*p)[0].is_string()) {
    r.prompt = (*p)[0].get<std::string>();
    return;
  }
  for (size_t i = 0; i < p->size(); ++i) {
    const json& id = (*p)[i];
    if (!id.is_number_integer()) {
      wrong_type(fmt::format("prompt[{}]", i), "a token id (one prompt per request)", id);
    }
    const int64_t v = id.get<int64_t>();
    if (v < 0 || v > INT32_MAX) out_of_range(fmt::format("prompt[{}]", i), "is not a token id");
    r.prompt_ids.push_back(static_cast<int32_t>(v));
  }
  if (r.prompt_ids.empty()) out_of_range("prompt", "must not be empty");
}

std::vector<std::string> read_stop(const json& body) {
  const json* s = field(body, "stop");
  if (s == nullptr) return {};
  std::vector<std::string> out;
  if (s->is_string()) {
    out.push_back(s->get<std::string>());
  } else if (s->is_array()) {
    if (s->size() > 4) out_of_range("stop", "may hold at most 4 sequences");
    for (size_t i = 0; i < s->size(); ++i) {
      if (!(*s)[i].is_string()) wrong_type(fmt::format("stop[{}]", i), "a string", (*s)[i]);
      out.push_back((*s)[i].get<std::string>());
    }
  } else {
    wrong_type("stop", "a string or an array of strings", *s);
  }
  for (const std::string& x : out) {
    if (x.empty()) out_of_range("stop", "sequences must not be empty");
  }
  return out;
}

void read_molt(const json& body, CompletionRequest& r) {
  const json* m = field(body, "molt");
  if (m == nullptr) return;
  if (!m->is_object()) wrong_type("molt", "an object", *m);
  if (const json* p = field(*m, "priority")) {
    if (!p->is_string()) wrong_type("molt.priority", "a string", *p);
    const std::string v = p->get<std::string>();
    if (v == "foreground") {
      r.priority = sched::Priority::kForeground;
    } else if (v == "background") {
      r.priority = sched::Priority::kBackground;
    } else {
      out_of_range("molt.priority", fmt::format("must be foreground or background (got '{}')", v));
    }
  }
  if (const json* p = field(*m, "policy")) {
    if (!p->is_string()) wrong_type("molt.policy", "a string", *p);
    const std::string v = p->get<std::string>();
    if (v == "hold" || v == "small") {
      out_of_range("molt.policy", "must migrate: molt, heal, reprefill, release-reprefill or auto");
    }
    try {
      r.policy = parse_policy(v);
    } catch (const Error& e) {
      out_of_range("molt.policy", e.what());
    }
  }
}

}  // namespace

json parse_request_body(const std::string& body) {
  if (body.empty())
    throw ApiError(400, "the request has no body (a JSON object)", "", "invalid_json");
  try {
    return json::parse(body);
  } catch (const json::exception& e) {  // parse_error, and out_of_range for 1e400
    throw ApiError(400, fmt::format("the body is not valid JSON: {}", e.what()), "",
                   "invalid_json");
  }
}

CompletionRequest parse_completion_request(const json& body, bool chat) {
  if (!body.is_object())
    throw ApiError(400, fmt::format("the body must be a JSON object (got {})", body.type_name()));
  CompletionRequest r;
  r.chat = chat;
  if (const json* m = field(body, "model")) {
    if (!m->is_string()) wrong_type("model", "a string", *m);
    r.model = m->get<std::string>();
  }
  if (chat) {
    r.messages = read_messages(body);
  } else {
    read_prompt(body, r);
    r.echo = read_bool(body, "echo", false);
  }
  // max_completion_tokens is the newer name; either may be given.
  std::optional<int64_t> max = read_int(body, "max_completion_tokens");
  if (!max) max = read_int(body, "max_tokens");
  if (max && *max < 1) out_of_range("max_tokens", fmt::format("must be at least 1 (got {})", *max));
  r.max_tokens = max;
  if (auto n = read_int(body, "n"); n && *n != 1) out_of_range("n", "must be 1 (one choice)");
  r.sampling.temperature = static_cast<float>(read_number(body, "temperature", 0, 2).value_or(1));
  r.sampling.top_p = static_cast<float>(read_number(body, "top_p", 0, 1).value_or(1));
  if (r.sampling.top_p <= 0) out_of_range("top_p", "must be greater than 0");
  read_number(body, "presence_penalty", -2, 2);  // accepted, not applied (see docs/SERVER.md)
  read_number(body, "frequency_penalty", -2, 2);
  if (auto seed = read_int(body, "seed")) {
    r.sampling.seed = static_cast<uint64_t>(*seed);
    r.seeded = true;
  } else {
    r.sampling.seed = std::random_device{}();
  }
  r.stop = read_stop(body);
  r.ignore_eos = read_bool(body, "ignore_eos", false);
  r.stream = read_bool(body, "stream", false);
  if (const json* so = field(body, "stream_options")) {
    if (!so->is_object()) wrong_type("stream_options", "an object", *so);
    r.include_usage = read_bool(*so, "include_usage", false, "stream_options.include_usage");
  }
  read_molt(body, r);
  return r;
}

}  // namespace molt::server
