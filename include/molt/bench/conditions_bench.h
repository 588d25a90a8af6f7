// The conditions of the evaluation (DESIGN.md §6; issue "molt bench run"): every policy on the
// same prompts under the same pressure traces, each generation driven through the one loop
// (Generation::step), with what a user would see: killed, tokens lost or duplicated at a seam,
// the stall at each seam (ms, and in the receiver's decode steps), seam and transfer
// divergence, the answer's quality after the pressure began (NLL under the top rung read
// natively, and agreement with the answer given without pressure), the accounted peak and the
// worst overshoot of the budget. Spread over prompts: median with a bootstrap interval.
#pragma once

#include <cstdint>
#include <functional>
#include <nlohmann/json_fwd.hpp>
#include <span>
#include <string>
#include <vector>

#include "molt/ladder/ladder.h"
#include "molt/runtime/policy.h"
#include "molt/transfer/transfer.h"

namespace molt {

class Tokenizer;

struct BenchPrompt {
  std::string name;  // "prose-3", "chat-1"
  std::string kind;  // "prose" (held-out text to continue) or "chat" (a ChatML question)
  std::vector<int32_t> ids;
};

// `prose` paragraphs of held-out text (the first up to 160 tokens of paragraphs of at least 48,
// spread evenly over `text`) and `chat` ChatML questions from a needle file (its chat items at
// `chat_context` tokens, then at twice that). Errors name the file when it has too few.
std::vector<BenchPrompt> bench_prompts(const Tokenizer& tok, const std::string& text_file,
                                       const std::string& needles_file, int prose, int chat,
                                       int64_t chat_context = 256);

// An ablation: one mechanism of a policy removed or changed on its own, run on the same prompts
// and traces as the conditions and compared with `baseline` prompt by prompt.
struct Ablation {
  std::string name;         // "molt, depth remap"
  std::string description;  // what was removed, for the page
  Policy policy = Policy::kMolt;
  std::string manifest;           // another ladder.json (other maps); "" = the conditions' ladder
  TransferOptions transfer;       // recompute r, anchors a
  std::string baseline = "molt";  // the condition it is paired with
};

struct ConditionsOptions {
  std::vector<Policy> policies = {
      Policy::kHold, Policy::kSmall, Policy::kReprefill, Policy::kReleaseReprefill,
      Policy::kMolt, Policy::kHeal,  Policy::kAuto};
  std::vector<Ablation> ablations;
  int64_t max_tokens = 48;
  int bootstrap = 1000;  // resamples for each interval
  uint64_t seed = 1;     // of the bootstrap
};

// Median over `xs` and a 95% percentile-bootstrap interval of the median ({} when empty).
struct Spread {
  double median = 0, lo = 0, hi = 0;
  int64_t n = 0;
};
Spread bootstrap_median(std::vector<double> xs, int resamples, uint64_t seed);

// {"policies", "ablations": [{name, description, baseline}], "traces": [{name, description}],
// "prompts": [{name, kind, tokens}], "runs": [...one per condition × trace × prompt, "condition"
// naming the policy or the ablation; the first prompt's also hold "series", per session step
// [step, budget MiB, accounted MiB, rung]...], "summary": [...per condition × trace, and "all"...;
// an ablation's rows add "paired": its difference from its baseline prompt by prompt]}.
// `progress(done, total)` after each generation.
nlohmann::json run_conditions(Ladder& ladder, std::span<const BenchPrompt> prompts,
                              std::span<const std::string> trace_files, const ConditionsOptions& o,
                              const std::function<void(int64_t, int64_t)>& progress = {});

}  // namespace molt
