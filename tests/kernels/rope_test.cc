#include <gtest/gtest.h>

#include <cmath>
#include <vector>

#include "kernels_test_util.h"
#include "molt/common/error.h"
#include "molt/kernels/ops.h"

namespace molt {
namespace {

using test::random_floats;

// Rotate-half RoPE in double, with the angle built in f32 as transformers does
// (inv_freq = 1 / base ** (arange(0, d, 2).float() / d); angle = pos.float() * inv_freq).
std::vector<double> reference(const RopeSpec& spec, int64_t pos, const std::vector<float>& x,
                              int64_t n_heads) {
  const int64_t d = spec.head_dim, half = d / 2;
  std::vector<double> out(x.begin(), x.end());
  for (int64_t h = 0; h < n_heads; ++h) {
    for (int64_t i = 0; i < half; ++i) {
      const float e = static_cast<float>(2 * i) / static_cast<float>(d);
      const float inv = 1.0f / static_cast<float>(std::pow(spec.theta, static_cast<double>(e)));
      const double angle = static_cast<float>(pos) * inv;
      const double a = x[static_cast<size_t>(h * d + i)],
                   b = x[static_cast<size_t>(h * d + i + half)];
      out[static_cast<size_t>(h * d + i)] = a * std::cos(angle) - b * std::sin(angle);
      out[static_cast<size_t>(h * d + i + half)] = b * std::cos(angle) + a * std::sin(angle);
    }
  }
  return out;
}

TEST(Rope, MatchesReferenceAcrossShapes) {
  for (int64_t d : {20, 64, 128}) {
    for (double theta : {10000.0, 1e6}) {
      for (int64_t pos : {0, 1, 7, 500, 32767}) {
        const RopeSpec spec{d, theta};
        auto x = random_floats(static_cast<size_t>(3 * d), static_cast<uint32_t>(d + pos));
        const auto ref = reference(spec, pos, x, 3);
        rope_apply(spec, pos, x.data(), 3);
        for (size_t i = 0; i < x.size(); ++i) {
          ASSERT_NEAR(x[i], ref[i], 1e-6) << "d=" << d << " theta=" << theta << " pos=" << pos;
        }
      }
    }
  }
}

TEST(Rope, PositionZeroIsIdentity) {
  auto x = random_floats(128, 1);
  const auto x0 = x;
  rope_apply({64, 1e6}, 0, x.data(), 2);
  EXPECT_EQ(x, x0);
}

TEST(Rope, InverseUndoesRotation) {
  for (int64_t d : {20, 64, 128}) {
    for (int64_t pos : {1, 123, 4095, 100000}) {
      auto x = random_floats(static_cast<size_t>(5 * d), 2);
      const auto x0 = x;
      rope_apply({d, 1e6}, pos, x.data(), 5);
      rope_apply({d, 1e6}, pos, x.data(), 5, /*inverse=*/true);
      for (size_t i = 0; i < x.size(); ++i) ASSERT_NEAR(x[i], x0[i], 2e-6) << d << " " << pos;
    }
  }
}

TEST(Rope, ScoresDependOnRelativePositionOnly) {
  // <rope(q, m), rope(k, n)> = <rope(q, m + s), rope(k, n + s)>: what lets a cache be
  // un-rotated and re-rotated at all.
  const RopeSpec spec{64, 10000.0};
  const auto q = random_floats(64, 3), k = random_floats(64, 4);
  auto score = [&](int64_t m, int64_t n) {
    auto a = q, b = k;
    rope_apply(spec, m, a.data(), 1);
    rope_apply(spec, n, b.data(), 1);
    double s = 0;
    for (size_t i = 0; i < 64; ++i) s += static_cast<double>(a[i]) * b[i];
    return s;
  };
  EXPECT_NEAR(score(10, 3), score(110, 103), 1e-4);
  EXPECT_NEAR(score(5, 5), score(0, 0), 1e-4);
}

TEST(Rope, RejectsOddHeadDim) {
  float x[3] = {};
  try {
    rope_apply({3, 10000.0}, 1, x, 1);
    FAIL() << "no error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("rope_apply: head_dim 3"), std::string::npos);
  }
  EXPECT_THROW(rope_apply({4, 0.0}, 1, x, 1), Error);
}

}  // namespace
}  // namespace molt
