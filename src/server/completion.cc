// Completion requests into jobs, and jobs' events into OpenAI responses.
#include "server/completion.h"

#include <fmt/core.h>

#include <chrono>
#include <ctime>

#include "molt/common/error.h"
#include "molt/runtime/prompt.h"
#include "server/api_error.h"
#include "server/stop_text.h"

namespace molt::server {
namespace {

using nlohmann::json;

bool is_rung(const Ladder& ladder, const std::string& m) {
  for (int r = 0; r < ladder.size(); ++r) {
    if (ladder.rung(r).name() == m) return true;
  }
  return false;
}

std::string rung_names(const Ladder& ladder) {
  std::string s;
  for (int r = 0; r < ladder.size(); ++r) s += (r ? ", " : "") + ladder.rung(r).name();
  return s;
}

Prompt encode(const Ladder& ladder, const CompletionRequest& r) {
  const char* param = r.chat ? "messages" : "prompt";
  try {
    if (r.chat) return encode_chat(ladder, r.messages, param);
    if (!r.prompt_ids.empty()) return prompt_from_ids(ladder, r.prompt_ids, param);
    return encode_text(ladder, r.prompt, param);
  } catch (const Error& e) {
    throw ApiError(400, e.what(), param);
  }
}

// The response's shell: id, object, created, model; chunks and whole answers alike.
json shell(const PreparedCompletion& p, bool chunk) {
  const char* object =
      p.request.chat ? (chunk ? "chat.completion.chunk" : "chat.completion") : "text_completion";
  return {{"id", p.job.id},
          {"object", object},
          {"created", static_cast<int64_t>(std::time(nullptr))},
          {"model", p.model},
          {"system_fingerprint", "molt"}};
}

json choice(const PreparedCompletion& p, const std::string* text, bool first, const json& finish) {
  json c = {{"index", 0}, {"logprobs", nullptr}, {"finish_reason", finish}};
  if (p.request.chat) {
    json delta = json::object();
    if (first) delta["role"] = "assistant";
    if (text) delta["content"] = *text;
    c["delta"] = std::move(delta);
  } else {
    c["text"] = text ? *text : std::string();
  }
  return c;
}

json usage(const PreparedCompletion& p, int64_t completion_tokens) {
  return {{"prompt_tokens", p.prompt_tokens},
          {"completion_tokens", completion_tokens},
          {"total_tokens", p.prompt_tokens + completion_tokens}};
}

std::string finish_reason(const DoneEvent& d, bool stopped) {
  return stopped || d.reason != "max_tokens" ? "stop" : "length";
}

std::string sse(const json& j) {
  return "data: " + j.dump(-1, ' ', false, json::error_handler_t::replace) + "\n\n";
}

std::string join(const std::vector<std::string>& v) {
  std::string s;
  for (const std::string& x : v) s += (s.empty() ? "" : ",") + x;
  return s;
}

}  // namespace

PreparedCompletion prepare_completion(const Ladder& ladder, const json& body, bool chat,
                                      const SessionOptions& defaults, const CompletionLimits& lim,
                                      const std::string& id) {
  PreparedCompletion p;
  p.request = parse_completion_request(body, chat);
  const CompletionRequest& r = p.request;
  if (!r.model.empty() && r.model != ladder.name() && is_rung(ladder, r.model)) {
    throw ApiError(400,
                   fmt::format("'{}' is a rung of '{}': request the ladder, and the scheduler "
                               "chooses the rung each token runs on",
                               r.model, ladder.name()),
                   "model", "model_not_found");
  }
  if (!r.model.empty() && r.model != ladder.name()) {
    throw ApiError(400,
                   fmt::format("the model '{}' does not exist: this server serves '{}' (rungs {})",
                               r.model, ladder.name(), rung_names(ladder)),
                   "model", "model_not_found");
  }
  p.model = r.model.empty() ? ladder.name() : r.model;
  Prompt prompt = encode(ladder, r);
  const int64_t n = static_cast<int64_t>(prompt.ids.size());
  const char* param = chat ? "messages" : "prompt";
  if (lim.max_prompt_tokens > 0 && n > lim.max_prompt_tokens) {
    throw ApiError(400,
                   fmt::format("the prompt has {} tokens; this server takes at most {} "
                               "(--max-prompt-tokens)",
                               n, lim.max_prompt_tokens),
                   param, "context_length_exceeded");
  }
  if (n >= lim.context) {
    throw ApiError(400,
                   fmt::format("the prompt has {} tokens and leaves no room in the context of {}",
                               n, lim.context),
                   param, "context_length_exceeded");
  }
  const int64_t max = r.max_tokens.value_or(std::min(lim.default_max_tokens, lim.context - n));
  if (max > lim.context - n) {  // n < context: no overflow for any max_tokens
    throw ApiError(400,
                   fmt::format("the prompt ({} tokens) plus max_tokens ({}) exceed the context of "
                               "{} tokens",
                               n, max, lim.context),
                   "max_tokens", "context_length_exceeded");
  }
  SessionOptions o = defaults;
  o.max_tokens = max;
  o.sampling.temperature = r.sampling.temperature;
  o.sampling.top_p = r.sampling.top_p;
  o.sampling.seed = r.sampling.seed;
  o.stop_ids.insert(o.stop_ids.end(), prompt.stop_ids.begin(), prompt.stop_ids.end());
  if (r.ignore_eos) o.stop_at_eos = false;
  if (r.policy) o.policy = *r.policy;
  try {
    o.validate();
  } catch (const Error& e) {
    throw ApiError(400, e.what());
  }
  p.job.id = id;
  p.job.priority = r.priority;
  p.job.prompt = std::move(prompt.ids);
  p.job.options = std::move(o);
  p.prompt_tokens = n;
  if (r.echo) {
    if (!r.prompt_ids.empty() && ladder.tokenizer() == nullptr)
      throw ApiError(400, "'echo' needs a text prompt on a ladder without a tokenizer", "echo");
    p.prompt_text = r.prompt_ids.empty() ? r.prompt : ladder.tokenizer()->decode(r.prompt_ids);
  }
  return p;
}

bool stream_completion(const PreparedCompletion& p, Job& job,
                       const std::function<bool(std::string_view)>& write, CompletionSummary* out) {
  StopText stop(p.request.stop);
  bool first = true;
  std::string rung;
  int64_t tokens = 0;
  auto send = [&](const std::string* text, const json& finish, json molt) {
    json c = shell(p, true);
    std::string body;
    if (first && !p.request.chat && !p.prompt_text.empty())
      body = p.prompt_text + (text ? *text : std::string());
    c["choices"] = json::array({choice(p, body.empty() ? text : &body, first, finish)});
    first = false;
    c["molt"] = std::move(molt);
    return write(sse(c));
  };
  // The client is gone (a write failed): its tenant is cancelled at the engine's next round.
  auto gone = [&] {
    out->tokens = tokens;
    job.cancel();
    return false;
  };
  while (true) {
    std::optional<JobEvent> e = job.next(std::chrono::milliseconds(1000));
    if (!e) {  // nothing for a second (suspended, waiting): a comment finds a vanished client
      if (!write(": keepalive\n\n")) return gone();
      continue;
    }
    switch (e->kind) {
      case JobEvent::kToken: {
        if (stop.stopped()) continue;  // produced before the cancel took effect
        ++tokens;
        rung = e->token.rung;
        const std::string text = stop.feed(e->token.text);
        if (stop.stopped()) job.cancel();
        if (!send(&text, nullptr, {{"rung", rung}, {"index", e->token.index}})) return gone();
        continue;
      }
      case JobEvent::kMigration:
      case JobEvent::kHeal:
      case JobEvent::kPark:
      case JobEvent::kResume: {
        if (stop.stopped()) continue;
        static const char* const kKey[] = {"", "migration", "heal", "park", "resume"};
        json detail = e->detail;
        detail.erase("event");
        if (e->kind == JobEvent::kMigration) {
          ++out->migrations;
          rung = detail.value("to", rung);
        }
        if (!send(nullptr, nullptr, {{"rung", rung}, {kKey[e->kind], std::move(detail)}}))
          return gone();
        continue;
      }
      case JobEvent::kDone: {
        const std::string tail = stop.flush();
        if (!tail.empty() && !send(&tail, nullptr, {{"rung", rung}, {"index", tokens - 1}}))
          return gone();
        json done = e->detail;
        done.erase("event");
        done["tokens"] = tokens;
        out->finish_reason = finish_reason(e->done, stop.stopped());
        out->tokens = tokens;
        out->rungs = join(e->done.rungs_used);
        if (!send(nullptr, out->finish_reason, {{"rung", rung}, {"done", std::move(done)}}))
          return gone();
        if (p.request.include_usage) {
          json u = shell(p, true);
          u["choices"] = json::array();
          u["usage"] = usage(p, tokens);
          if (!write(sse(u))) return gone();
        }
        return write("data: [DONE]\n\n");
      }
      case JobEvent::kError: {
        out->status = e->status;
        out->tokens = tokens;
        out->finish_reason = "error";
        const std::string code = e->status == 503 ? "unavailable" : "internal_error";
        if (!write(sse(error_json(e->error, "server_error", "", code)))) return gone();
        return write("data: [DONE]\n\n");
      }
    }
  }
}

json complete(const PreparedCompletion& p, Job& job, CompletionSummary* out) {
  StopText stop(p.request.stop);
  std::string text = p.prompt_text;
  json rungs = json::array(), migrations = json::array(), events = json::array();
  int64_t tokens = 0;
  while (true) {
    std::optional<JobEvent> e = job.next(std::chrono::milliseconds(1000));
    if (!e) continue;
    if (e->kind == JobEvent::kToken) {
      if (stop.stopped()) continue;
      ++tokens;
      text += stop.feed(e->token.text);
      rungs.push_back(e->token.rung);
      if (stop.stopped()) job.cancel();
    } else if (e->kind == JobEvent::kError) {
      out->status = e->status;
      return error_json(e->error, "server_error", "",
                        e->status == 503 ? "unavailable" : "internal_error");
    } else if (e->kind != JobEvent::kDone) {
      if (stop.stopped()) continue;
      json d = e->detail;
      if (e->kind == JobEvent::kMigration) {
        d.erase("event");
        migrations.push_back(d);
      } else {
        events.push_back(d);
      }
    } else {
      text += stop.flush();
      out->finish_reason = finish_reason(e->done, stop.stopped());
      out->tokens = tokens;
      out->migrations = static_cast<int64_t>(migrations.size());
      out->rungs = join(e->done.rungs_used);
      json r = shell(p, false);
      json c = {{"index", 0}, {"logprobs", nullptr}, {"finish_reason", out->finish_reason}};
      if (p.request.chat) {
        c["message"] = {{"role", "assistant"}, {"content", text}, {"refusal", nullptr}};
      } else {
        c["text"] = text;
      }
      r["choices"] = json::array({c});
      r["usage"] = usage(p, tokens);
      json done = e->detail;
      done.erase("event");
      done["tokens"] = tokens;
      r["molt"] = {
          {"rungs", rungs}, {"migrations", migrations}, {"events", events}, {"done", done}};
      return r;
    }
  }
}

}  // namespace molt::server
