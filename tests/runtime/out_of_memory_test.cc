// A receiver that cannot be loaded for lack of memory (RLIMIT_AS in a forked child,
// ladder/address_limit.h) takes the same way out as an unreadable one (faults_test.cc): the
// answer so far is kept and the generation parks with a clear note. Never a crash.
#include <gtest/gtest.h>

#include <limits>

#include "ladder/address_limit.h"
#include "molt/common/error.h"
#include "molt/runtime/generation.h"
#include "runtime_fixture.h"

namespace molt {
namespace {

using test::footprint_mib;
using test::runtime_ladder;

TEST(OutOfMemory, AReceiverThatDoesNotFitParksWithTheAnswerKept) {
  if (test::sanitized()) GTEST_SKIP() << "RLIMIT_AS and sanitizers do not mix";
  if (test::under_emulation()) GTEST_SKIP() << test::kEmulatedAddressLimit;
  auto l = Ladder::open(runtime_ladder().without_maps);
  SessionOptions o;
  o.policy = Policy::kReleaseReprefill;  // the sender goes first: then m, then s, are tried
  o.max_tokens = 10;
  o.stop_at_eos = false;
  o.max_parked_steps = 5;
  const int64_t cap = static_cast<int64_t>(test::test_prompt().size()) + o.max_tokens;
  FunctionBudget b([&](const BudgetQuery& q) {
    return q.step < 4 ? std::numeric_limits<double>::infinity() : footprint_mib(*l, 1, cap) * 1.05;
  });
  Generation g(*l, &b, test::test_prompt(), o);
  // Four tokens on l here; the squeeze comes at the next step, in the child. It runs no BLAS
  // or OpenMP: loads fail before any forward pass.
  while (g.tokens() < 4) g.step();
  ASSERT_EQ(l->rung(0).state(), RungState::kLoaded);
  const size_t l_bytes = l->rung(0).footprint().weight_bytes;
  const test::ChildRun c = test::in_child([&](std::string& report) {
    // Once l's mapping is gone there is room for neither m nor s.
    const size_t limit = test::vm_bytes() - l_bytes + 256 * 1024;
    if (!test::check(test::set_as_limit(limit), "setrlimit(RLIMIT_AS)", report)) return false;
    bool parked = false;
    for (int i = 0; i < 3 && !parked && !g.finished(); ++i) {
      const Step s = g.step();
      if (s.token) report += "token after the squeeze\n";
      if (s.park) {
        parked = true;
        report += "park: " + s.park->note + "\n";
      }
    }
    bool ok = test::check(parked, "the generation parked", report);
    ok &= test::check(g.tokens() == 4, "the four tokens so far are kept", report);
    for (int r = 0; r < l->size(); ++r) {
      ok &= test::check(l->rung(r).state() == RungState::kReleased,
                        "rung '" + l->rung(r).name() + "' is released", report);
    }
    ok &= test::check(l->resident_bytes() == 0, "the ladder counts 0 resident bytes", report);
    return ok;
  });
  RecordProperty("child_report", c.report);
  EXPECT_EQ(c.status, 0) << c.report;
  EXPECT_NE(c.report.find("rung 'm' failed to load"), std::string::npos) << c.report;
  EXPECT_NE(c.report.find("rung 's' failed to load"), std::string::npos) << c.report;
  EXPECT_NE(c.report.find("Cannot allocate memory"), std::string::npos) << c.report;
}

}  // namespace
}  // namespace molt
