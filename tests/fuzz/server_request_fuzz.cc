// Fuzzes the request bodies of `molt serve` (src/server/request.cc, completion.cc): the bytes are
// read as the server reads a POST body (parse_request_body), then as a chat and as a plain
// completion request (parse_completion_request), then prepared against the tiny ladder
// (prepare_completion: model, prompt encoding, limits) under two sets of limits. ApiError is the
// server's refusal (a 4xx); anything else escaping would be a 500 "internal error" there, and
// libFuzzer reports it as a crash.
#include <nlohmann/json.hpp>

#include "fuzz_util.h"
#include "molt/ladder/ladder.h"
#include "molt/runtime/options.h"
#include "server/api_error.h"
#include "server/completion.h"
#include "server/request.h"

namespace {

using molt::server::ApiError;
using molt::server::CompletionLimits;
using molt::server::CompletionRequest;
using molt::server::PreparedCompletion;

const molt::Ladder* g_ladder = nullptr;

void refused(const ApiError& e) {
  MOLT_FUZZ_CHECK(e.status >= 400 && e.status < 500, "ApiError status %d: %s", e.status, e.what());
  if (std::getenv("MOLT_FUZZ_VERBOSE") != nullptr) std::fprintf(stderr, "ApiError: %s\n", e.what());
}

void check_request(const CompletionRequest& r, bool chat) {
  MOLT_FUZZ_CHECK(r.chat == chat, "chat flag not kept");
  MOLT_FUZZ_CHECK(!chat || !r.messages.empty(), "a chat request without messages");
  MOLT_FUZZ_CHECK(chat || r.prompt_ids.empty() || r.prompt.empty(), "both text and ids");
  MOLT_FUZZ_CHECK(!r.max_tokens || *r.max_tokens >= 1, "max_tokens %lld",
                  static_cast<long long>(*r.max_tokens));
  MOLT_FUZZ_CHECK(r.stop.size() <= 4, "%zu stop sequences", r.stop.size());
  for (const std::string& s : r.stop) MOLT_FUZZ_CHECK(!s.empty(), "an empty stop sequence");
  MOLT_FUZZ_CHECK(r.sampling.temperature >= 0 && r.sampling.temperature <= 2, "temperature %g",
                  static_cast<double>(r.sampling.temperature));
  MOLT_FUZZ_CHECK(r.sampling.top_p > 0 && r.sampling.top_p <= 1, "top_p %g",
                  static_cast<double>(r.sampling.top_p));
}

void check_prepared(const PreparedCompletion& p, const CompletionLimits& lim) {
  const molt::Ladder& ladder = *g_ladder;
  MOLT_FUZZ_CHECK(p.model == ladder.name(), "model '%s'", p.model.c_str());
  const auto n = static_cast<int64_t>(p.job.prompt.size());
  MOLT_FUZZ_CHECK(n > 0 && n == p.prompt_tokens, "prompt of %lld tokens, %lld counted",
                  static_cast<long long>(n), static_cast<long long>(p.prompt_tokens));
  MOLT_FUZZ_CHECK(n < lim.context && (lim.max_prompt_tokens == 0 || n <= lim.max_prompt_tokens),
                  "prompt of %lld tokens admitted", static_cast<long long>(n));
  const int64_t max = p.job.options.max_tokens;
  MOLT_FUZZ_CHECK(max >= 1 && max <= lim.context - n, "max_tokens %lld with a prompt of %lld",
                  static_cast<long long>(max), static_cast<long long>(n));
  for (int32_t id : p.job.prompt) {
    MOLT_FUZZ_CHECK(id >= 0 && id < ladder.vocab_size(), "token id %d", id);
  }
  MOLT_FUZZ_CHECK(p.request.echo || p.prompt_text.empty(), "prompt text without echo");
}

void one(const nlohmann::json& body, bool chat, const CompletionLimits& lim) {
  try {
    check_request(molt::server::parse_completion_request(body, chat), chat);
  } catch (const ApiError& e) {
    refused(e);
  }
  try {
    const PreparedCompletion p = molt::server::prepare_completion(
        *g_ladder, body, chat, molt::SessionOptions{}, lim, chat ? "chatcmpl-fuzz" : "cmpl-fuzz");
    check_prepared(p, lim);
  } catch (const ApiError& e) {
    refused(e);
  }
}

}  // namespace

extern "C" int LLVMFuzzerInitialize(int*, char***) {
  // Opening reads the manifest, the configs, the safetensors headers and the tokenizer; no
  // weights. Never destroyed (libFuzzer exits without running every destructor in order).
  g_ladder = molt::Ladder::open(MOLT_SOURCE_DIR "/models/tiny-ladder/ladder.json").release();
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  nlohmann::json body;
  try {
    body = molt::server::parse_request_body(std::string(molt::fuzz::as_text(data, size)));
  } catch (const ApiError& e) {
    refused(e);
    return 0;
  }
  // Small limits (the prompt cap and the context bite), then the server's own: the rungs'
  // smallest context, no prompt cap, 256 tokens by default.
  static const CompletionLimits small{64, 48, 16};
  static const CompletionLimits server = [] {
    CompletionLimits l;
    l.context = INT64_MAX;
    for (int r = 0; r < g_ladder->size(); ++r)
      l.context = std::min(l.context, g_ladder->rung(r).config().max_position_embeddings);
    return l;
  }();
  for (bool chat : {true, false}) {
    one(body, chat, small);
    one(body, chat, server);
  }
  return 0;
}
