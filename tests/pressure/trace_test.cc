// Pressure traces: lookup, relative budgets, validation messages, the bundled trace.
#include "molt/pressure/trace.h"

#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include "molt/common/error.h"
#include "molt/pressure/budget.h"
#include "test_util.h"

namespace molt {
namespace {

std::string error_of(const std::string& text) {
  try {
    PressureTrace::parse(nlohmann::json::parse(text), "t.json");
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

TEST(Trace, StepFunctionWithAbsoluteAndRelativePoints) {
  const PressureTrace t = PressureTrace::parse(nlohmann::json::parse(R"({
      "name": "x", "unit": "tokens",
      "points": [{"at": 0, "budget_mib": 100}, {"at": 5, "budget_frac": 0.5}, {"at": 9.5, "budget_mib": 7}]})"),
                                               "t.json");
  EXPECT_EQ(t.name, "x");
  EXPECT_EQ(t.unit, TraceUnit::kTokens);
  EXPECT_DOUBLE_EQ(t.budget_mib(0, 40), 100);
  EXPECT_DOUBLE_EQ(t.budget_mib(4.99, 40), 100);
  EXPECT_DOUBLE_EQ(t.budget_mib(5, 40), 20);
  EXPECT_DOUBLE_EQ(t.budget_mib(9, 40), 20);
  EXPECT_DOUBLE_EQ(t.budget_mib(9.5, 40), 7);
  EXPECT_DOUBLE_EQ(t.budget_mib(1e9, 40), 7);
}

TEST(Trace, ClocksByUnit) {
  TraceBudget tokens(PressureTrace::parse(
      nlohmann::json::parse(
          R"({"name": "a", "unit": "tokens", "points": [{"at": 0, "budget_mib": 1}, {"at": 3, "budget_mib": 2}]})"),
      "a"));
  TraceBudget ms(PressureTrace::parse(
      nlohmann::json::parse(
          R"({"name": "b", "unit": "ms", "points": [{"at": 0, "budget_mib": 1}, {"at": 3, "budget_mib": 2}]})"),
      "b"));
  BudgetQuery q;
  q.step = 3;
  q.elapsed_ms = 1;
  EXPECT_EQ(tokens.budget_mib(q), 2);
  EXPECT_EQ(ms.budget_mib(q), 1);
  q.elapsed_ms = 3;
  EXPECT_EQ(ms.budget_mib(q), 2);
  EXPECT_NE(tokens.describe().find("unit tokens"), std::string::npos);
}

TEST(Trace, BadTracesNameFileAndField) {
  EXPECT_NE(error_of("[1]").find("t.json: is a JSON array, expected an object"), std::string::npos);
  EXPECT_NE(error_of(R"({"unit": "tokens", "points": []})").find("field 'name'"),
            std::string::npos);
  EXPECT_NE(error_of(R"({"name": "x", "unit": "s", "points": []})").find("unit 's' is not"),
            std::string::npos);
  EXPECT_NE(error_of(R"({"name": "x", "unit": "ms", "points": []})").find("lists no points"),
            std::string::npos);
  EXPECT_NE(error_of(R"({"name": "x", "unit": "ms"})").find("field 'points' must be an array"),
            std::string::npos);
  EXPECT_NE(error_of(R"({"name": "x", "unit": "ms", "points": [{"at": 1, "budget_mib": 5}]})")
                .find("points[0].at: the first point must be at 0"),
            std::string::npos);
  EXPECT_NE(
      error_of(
          R"({"name": "x", "unit": "ms", "points": [{"at": 0, "budget_mib": 5}, {"at": 0, "budget_mib": 4}]})")
          .find("points[1].at: 0 is not after points[0].at 0"),
      std::string::npos);
  EXPECT_NE(
      error_of(
          R"({"name": "x", "unit": "ms", "points": [{"at": 0, "budget_mib": 5, "budget_frac": 1}]})")
          .find("points[0]: give exactly one of 'budget_mib' or 'budget_frac'"),
      std::string::npos);
  EXPECT_NE(
      error_of(R"({"name": "x", "unit": "ms", "points": [{"at": 0}]})").find("give exactly one"),
      std::string::npos);
  EXPECT_NE(error_of(R"({"name": "x", "unit": "ms", "points": [{"at": 0, "budget_mib": -1}]})")
                .find("points[0].budget_mib: -1 is negative"),
            std::string::npos);
  EXPECT_NE(error_of(R"({"name": "x", "unit": "ms", "points": [{"at": "0", "budget_mib": 1}]})")
                .find("points[0].at: is a string, expected a number"),
            std::string::npos);
  EXPECT_NE(error_of(R"({"name": "x", "unit": "ms", "points": [{"budget_mib": 1}]})")
                .find("missing field 'at'"),
            std::string::npos);
  try {
    PressureTrace::load("/nonexistent/trace.json");
    ADD_FAILURE();
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("/nonexistent/trace.json: pressure trace not found"),
              std::string::npos);
  }
}

TEST(Trace, SpikeMidAnswerFallsBelowTheTopRungInTwoStepsThenRecovers) {
  const PressureTrace t =
      PressureTrace::load(std::string(MOLT_SOURCE_DIR) + "/traces/spike_mid_answer.json");
  EXPECT_EQ(t.name, "spike_mid_answer");
  EXPECT_EQ(t.unit, TraceUnit::kTokens);
  ASSERT_EQ(t.points.size(), 4u);
  for (const TracePoint& p : t.points) EXPECT_TRUE(p.relative);
  EXPECT_GT(t.points[0].value, 1.0);                // the top rung fits at first
  EXPECT_LT(t.points[1].value, 1.0);                // first cut: below the top rung
  EXPECT_LT(t.points[2].value, t.points[1].value);  // second cut: lower still
  EXPECT_GT(t.points[1].at, 0);                     // both land mid-answer
  EXPECT_GT(t.points[3].value, 1.0);                // memory returns
}

}  // namespace
}  // namespace molt
