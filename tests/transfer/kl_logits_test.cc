// KL(p ‖ q) of two logit vectors: the one implementation (runtime's seam KL uses it too).
#include <gtest/gtest.h>

#include <cmath>
#include <vector>

#include "molt/common/error.h"
#include "molt/transfer/eval.h"

namespace molt {
namespace {

TEST(KlLogits, ZeroForEqualDistributionsAndExactOtherwise) {
  const std::vector<float> a = {1, 2, 3, 4}, b = {4, 3, 2, 1};
  EXPECT_NEAR(kl_logits(a, a), 0.0, 1e-12);
  // Shifting every logit leaves the distribution as it is.
  EXPECT_NEAR(kl_logits(a, std::vector<float>{11, 12, 13, 14}), 0.0, 1e-12);
  double z = 0;
  for (float x : a) z += std::exp(double(x));
  double want = 0;
  for (size_t i = 0; i < 4; ++i) want += std::exp(double(a[i])) / z * (double(a[i]) - b[i]);
  EXPECT_NEAR(kl_logits(a, b), want, 1e-12);
  EXPECT_GT(kl_logits(a, b), 0.5);
}

TEST(KlLogits, VocabCountsTheFirstEntriesOnly) {
  const std::vector<float> a = {1, 2, 3, 4}, c = {1, 2, 3, 4, 100};
  EXPECT_NEAR(kl_logits(a, c, 4), 0.0, 1e-12);  // padded model rows are not tokens
  EXPECT_THROW(kl_logits(a, c), Error);         // whole spans must match
  try {
    kl_logits(a, c, 5);
    FAIL() << "no error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("vocabulary of 5"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace molt
