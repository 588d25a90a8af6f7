#include "molt/runtime/policy.h"

#include <fmt/format.h>

#include "molt/common/error.h"

namespace molt {

const char* policy_name(Policy p) {
  switch (p) {
    case Policy::kHold:
      return "hold";
    case Policy::kSmall:
      return "small";
    case Policy::kReprefill:
      return "reprefill";
    case Policy::kReleaseReprefill:
      return "release-reprefill";
    case Policy::kMolt:
      return "molt";
    case Policy::kHeal:
      return "heal";
    case Policy::kAuto:
      return "auto";
  }
  return "?";
}

const std::vector<std::string>& policy_names() {
  static const std::vector<std::string> names = {"hold", "small", "reprefill", "release-reprefill",
                                                 "molt", "heal",  "auto"};
  return names;
}

Policy parse_policy(const std::string& name) {
  for (Policy p : {Policy::kHold, Policy::kSmall, Policy::kReprefill, Policy::kReleaseReprefill,
                   Policy::kMolt, Policy::kHeal, Policy::kAuto}) {
    if (name == policy_name(p)) return p;
  }
  fail("policy '{}' is not one of {}", name, fmt::join(policy_names(), ", "));
}

}  // namespace molt
