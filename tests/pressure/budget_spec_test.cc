// Budget sources by spec: every form, the errors, and a pushed budget set from another thread.
#include "molt/pressure/budget_spec.h"

#include <gtest/gtest.h>

#include <chrono>
#include <cmath>
#include <thread>

#include "molt/common/error.h"

namespace molt {
namespace {

std::string error_of(const std::string& spec) {
  try {
    open_budget_source(spec);
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

TEST(BudgetSpec, EveryForm) {
  const BudgetQuery q;
  EXPECT_TRUE(std::isinf(open_budget_source("none")->budget_mib(q)));
  EXPECT_TRUE(std::isinf(open_budget_source("")->budget_mib(q)));
  EXPECT_EQ(open_budget_source("none")->describe(), "no limit");
  EXPECT_EQ(open_budget_source("fixed:96.5")->budget_mib(q), 96.5);
  EXPECT_TRUE(std::isinf(open_budget_source("push")->budget_mib(q)));
  EXPECT_EQ(open_budget_source("push:40")->budget_mib(q), 40);
  auto trace =
      open_budget_source(std::string("trace:") + MOLT_SOURCE_DIR + "/traces/spike_mid_answer.json");
  BudgetQuery at12;
  at12.step = 12;
  at12.reference_mib = 100;
  EXPECT_DOUBLE_EQ(trace->budget_mib(at12), 75);
  std::vector<std::string> notes;
  auto live = open_budget_source("live", &notes);
  EXPECT_FALSE(notes.empty());  // each live reader says what it reads or why not
  EXPECT_GT(live->budget_mib(q), 0);
}

TEST(BudgetSpec, ErrorsNameTheSpec) {
  EXPECT_NE(error_of("yolo").find("budget 'yolo': expected trace:FILE, live, fixed:MIB"),
            std::string::npos);
  EXPECT_NE(error_of("fixed:").find("'' is not a budget in MiB"), std::string::npos);
  EXPECT_NE(error_of("fixed:-3").find("'-3' is not a budget"), std::string::npos);
  EXPECT_NE(error_of("fixed:12x").find("'12x'"), std::string::npos);
  EXPECT_NE(error_of("push:nan").find("'nan'"), std::string::npos);
  EXPECT_NE(error_of("trace:").find("expected trace:FILE"), std::string::npos);
  EXPECT_NE(error_of("trace:/nonexistent/t.json").find("/nonexistent/t.json"), std::string::npos);
  EXPECT_NE(error_of("live:1").find("expected"), std::string::npos);
}

TEST(BudgetSpec, PushedFromAnotherThreadWakesIdle) {
  PushBudget b(std::numeric_limits<double>::infinity());
  EXPECT_THROW(b.set_mib(-1), Error);
  EXPECT_THROW(b.set_mib(NAN), Error);
  std::thread app([&b] {
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
    b.set_mib(12);
  });
  const auto t0 = std::chrono::steady_clock::now();
  b.idle(10000);  // returns on the push, long before the poll interval
  const double ms =
      std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
  app.join();
  EXPECT_LT(ms, 5000);
  EXPECT_EQ(b.budget_mib({}), 12);
  EXPECT_NE(b.describe().find("12.0 MiB"), std::string::npos);
}

}  // namespace
}  // namespace molt
