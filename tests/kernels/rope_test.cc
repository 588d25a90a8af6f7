#include <gtest/gtest.h>

#include <cmath>
#include <utility>
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

TEST(Rope, CosSinTableRotatesBitForBitLikeRopeApply) {
  // rope_apply is rope_cos_sin + rope_rotate: one table of a position serves many rows.
  const RopeSpec spec{64, 1e6};
  for (int64_t pos : {0, 3, 999, 32767}) {
    std::vector<float> cs(64);
    rope_cos_sin(spec, pos, cs.data(), cs.data() + 32);
    for (bool inverse : {false, true}) {
      auto a = random_floats(4 * 64, static_cast<uint32_t>(pos + 9)), b = a;
      rope_apply(spec, pos, a.data(), 4, inverse);
      rope_rotate(64, cs.data(), cs.data() + 32, b.data(), 4, inverse);
      ASSERT_EQ(a, b) << pos << " " << inverse;
    }
  }
}

// The rotation on every compiled SIMD target equals the reference formula with each product and
// sum rounded on its own (no FMA), bit for bit; head_dim 8, 24 and 36 leave a scalar tail.
class RopePerTarget : public test::PerSimdTarget {};

TEST_P(RopePerTarget, RotationIsTheUnfusedFormulaBitForBit) {
  for (int64_t d : {8, 24, 36, 64, 128}) {
    const RopeSpec spec{d, 1e6};
    const int64_t half = d / 2;
    std::vector<float> cs(static_cast<size_t>(d));
    rope_cos_sin(spec, 1234, cs.data(), cs.data() + half);
    for (bool inverse : {false, true}) {
      auto got = random_floats(static_cast<size_t>(3 * d), static_cast<uint32_t>(d)), want = got;
      rope_rotate(d, cs.data(), cs.data() + half, got.data(), 3, inverse);
      for (int64_t h = 0; h < 3; ++h) {
        float* v = want.data() + h * d;
        for (int64_t i = 0; i < half; ++i) {
          const float c = cs[static_cast<size_t>(i)], s = inverse ? -cs[i + half] : cs[i + half];
          const float a = v[i], b = v[i + half];
          volatile float ac = a * c, bs = (-b) * s, bc = b * c, as = a * s;  // never fused
          v[i] = ac + bs;
          v[i + half] = bc + as;
        }
      }
      ASSERT_EQ(got, want) << "head_dim " << d << (inverse ? " inverse" : "");
    }
  }
}

MOLT_INSTANTIATE_PER_SIMD_TARGET(RopePerTarget);

TEST(Rope, ShiftMovesAKeyToItsNativeRotationAtTheNewPosition) {
  // Keys rotated at `from`, shifted to `to`, against the un-rotated key rotated at `to`: one
  // rotation's f32 round-off, at positions where the f32 angle itself is coarse.
  for (int64_t d : {16, 64, 128}) {
    const RopeSpec spec{d, 1e6};
    for (auto [from, to] :
         {std::pair<int64_t, int64_t>{100, 37}, {32767, 1}, {5000, 4999}, {7, 7}, {3, 900}}) {
      const auto raw = random_floats(static_cast<size_t>(2 * d), static_cast<uint32_t>(d + to));
      auto shifted = raw, native = raw;
      rope_apply(spec, from, shifted.data(), 2);
      rope_shift(spec, from, to, shifted.data(), 2);
      rope_apply(spec, to, native.data(), 2);
      for (size_t i = 0; i < raw.size(); ++i) {
        ASSERT_NEAR(shifted[i], native[i], 1e-6) << d << " " << from << "→" << to << " at " << i;
      }
    }
  }
  // A shift to the same position is the identity.
  auto x = random_floats(64, 8);
  const auto x0 = x;
  rope_shift({64, 1e4}, 123, 123, x.data(), 1);
  EXPECT_EQ(x, x0);
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
  EXPECT_THROW(rope_shift({3, 1e4}, 2, 1, x, 1), Error);
  EXPECT_THROW(rope_cos_sin({4, -1.0}, 1, x, x + 2), Error);
}

}  // namespace
}  // namespace molt
