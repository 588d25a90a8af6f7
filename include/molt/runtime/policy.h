// Migration policies (DESIGN.md §1, §3; the conditions A–D of the evaluation).
#pragma once

#include <string>
#include <vector>

namespace molt {

enum class Policy {
  kHold,              // A: never switches; killed, as the OS would, once over budget past a grace
  kSmall,             // B: always the smallest rung
  kReprefill,         // C: load the receiver beside the sender, re-read prompt + generated text
  kReleaseReprefill,  // free the sender first, then load the receiver and re-read (peak = receiver)
  kMolt,              // D: park the sender, load the receiver, carry the cache through a map
  kHeal,  // molt, then re-prefill natively in chunks between decode steps, layer by layer
  kAuto,  // chooses per migration from route, context length and map quality
};

const char* policy_name(Policy p);
// "hold" | "small" | "reprefill" | "release-reprefill" | "molt" | "heal" | "auto"; errors list
// them.
Policy parse_policy(const std::string& name);
const std::vector<std::string>& policy_names();

}  // namespace molt
