// One completion request end to end: checked and encoded into a job (prompt, options, limits),
// then answered from the job's events, streamed as server-sent events or as one JSON object.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <string_view>

#include "molt/ladder/ladder.h"
#include "molt/runtime/options.h"
#include "server/job.h"
#include "server/request.h"

namespace molt::server {

struct CompletionLimits {
  int64_t context = 0;  // prompt + max_tokens must fit (the rungs' smallest context)
  int64_t max_prompt_tokens = 0;
  int64_t default_max_tokens = 256;
};

struct PreparedCompletion {
  CompletionRequest request;
  JobSpec job;
  std::string model;  // as the response names it
  int64_t prompt_tokens = 0;
  std::string prompt_text;  // completions with echo
};

// Throws ApiError (400) for a bad model, prompt or length.
PreparedCompletion prepare_completion(const Ladder& ladder, const nlohmann::json& body, bool chat,
                                      const SessionOptions& defaults, const CompletionLimits& lim,
                                      const std::string& id);

// What a response learned, for the request's log line.
struct CompletionSummary {
  int64_t tokens = 0, migrations = 0;
  std::string rungs, finish_reason;
  int status = 200;
};

// Writes SSE text through `write` (false: the client is gone, and the job is cancelled) until
// the job ends. Returns false when the client went away.
bool stream_completion(const PreparedCompletion& p, Job& job,
                       const std::function<bool(std::string_view)>& write, CompletionSummary* out);

// Waits for the whole answer; on an error event, *status gets its HTTP status.
nlohmann::json complete(const PreparedCompletion& p, Job& job, CompletionSummary* out);

}  // namespace molt::server
