#include "molt/model/sampler.h"

#include <gtest/gtest.h>

#include <cmath>
#include <map>

#include "molt/common/error.h"

namespace molt {
namespace {

TEST(Sampler, GreedyPicksTheArgmax) {
  Sampler s({});
  std::vector<float> l = {0.1f, 2.5f, -1.0f, 2.4f};
  EXPECT_EQ(s.sample(l, {}), 1);
}

TEST(Sampler, RepetitionPenaltyDividesPositiveAndMultipliesNegative) {
  SamplingParams p;
  p.repetition_penalty = 2.0f;
  Sampler s(p);
  std::vector<float> l = {3.0f, 2.0f, -1.0f};
  const std::vector<int32_t> hist = {0, 2, 0};
  EXPECT_EQ(s.sample(l, hist), 1);  // 3 → 1.5 loses to 2
  EXPECT_FLOAT_EQ(l[0], 1.5f);
  EXPECT_FLOAT_EQ(l[2], -2.0f);
}

TEST(Sampler, TopKOneIsGreedy) {
  SamplingParams p;
  p.temperature = 5.0f;
  p.top_k = 1;
  p.seed = 3;
  Sampler s(p);
  for (int i = 0; i < 50; ++i) {
    std::vector<float> l = {0.0f, 0.3f, 0.2f, 0.1f};
    EXPECT_EQ(s.sample(l, {}), 1);
  }
}

TEST(Sampler, TopPKeepsTheSmallestNucleus) {
  // Probabilities at T=1: softmax(log(.5), log(.3), log(.2)) = .5 .3 .2; top-p .6 keeps {0, 1}.
  SamplingParams p;
  p.temperature = 1.0f;
  p.top_p = 0.6f;
  p.seed = 11;
  Sampler s(p);
  std::map<int32_t, int> counts;
  for (int i = 0; i < 4000; ++i) {
    std::vector<float> l = {std::log(0.5f), std::log(0.3f), std::log(0.2f)};
    ++counts[s.sample(l, {})];
  }
  EXPECT_EQ(counts[2], 0);
  EXPECT_NEAR(counts[0] / 4000.0, 0.5 / 0.8, 0.03);
}

TEST(Sampler, TemperatureSamplingFollowsTheDistribution) {
  SamplingParams p;
  p.temperature = 1.0f;
  p.seed = 5;
  Sampler s(p);
  std::map<int32_t, int> counts;
  const int n = 20000;
  for (int i = 0; i < n; ++i) {
    std::vector<float> l = {std::log(0.7f), std::log(0.2f), std::log(0.1f)};
    ++counts[s.sample(l, {})];
  }
  EXPECT_NEAR(counts[0] / double(n), 0.7, 0.02);
  EXPECT_NEAR(counts[1] / double(n), 0.2, 0.02);
  EXPECT_NEAR(counts[2] / double(n), 0.1, 0.02);
}

TEST(Sampler, SameSeedSameStream) {
  SamplingParams p;
  p.temperature = 0.8f;
  p.seed = 42;
  Sampler a(p), b(p);
  for (int i = 0; i < 100; ++i) {
    std::vector<float> l1 = {0.1f, 0.2f, 0.3f, 0.4f, 0.5f}, l2 = l1;
    EXPECT_EQ(a.sample(l1, {}), b.sample(l2, {}));
  }
}

TEST(Sampler, RejectsBadParameters) {
  SamplingParams p;
  p.top_p = 0.0f;
  EXPECT_THROW(Sampler{p}, Error);
  p = {};
  p.temperature = -1.0f;
  EXPECT_THROW(Sampler{p}, Error);
  p = {};
  p.repetition_penalty = 0.0f;
  EXPECT_THROW(Sampler{p}, Error);
}

}  // namespace
}  // namespace molt
