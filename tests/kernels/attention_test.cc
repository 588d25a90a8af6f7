#include "molt/kernels/attention.h"

#include <gtest/gtest.h>

#include <cmath>
#include <string>
#include <vector>

#include "kernels_test_util.h"
#include "molt/common/error.h"
#include "molt/kernels/threads.h"

namespace molt {
namespace {

using test::random_floats;

std::vector<double> reference(const AttentionShape& s, const std::vector<float>& q,
                              const std::vector<float>& k, const std::vector<float>& v, int64_t p0,
                              int64_t n) {
  const int64_t hd = s.head_dim, group = s.n_heads / s.n_kv_heads;
  std::vector<double> out(static_cast<size_t>(n * s.n_heads * hd));
  for (int64_t i = 0; i < n; ++i) {
    for (int64_t h = 0; h < s.n_heads; ++h) {
      const int64_t g = h / group, len = p0 + i + 1;
      const float* qi = &q[static_cast<size_t>((i * s.n_heads + h) * hd)];
      std::vector<double> p(static_cast<size_t>(len));
      double mx = -1e300;
      for (int64_t j = 0; j < len; ++j) {
        double d = 0;
        for (int64_t c = 0; c < hd; ++c) {
          d += static_cast<double>(qi[c]) * k[static_cast<size_t>((j * s.n_kv_heads + g) * hd + c)];
        }
        p[static_cast<size_t>(j)] = d / std::sqrt(static_cast<double>(hd));
        mx = std::max(mx, p[static_cast<size_t>(j)]);
      }
      double sum = 0;
      for (double& x : p) sum += (x = std::exp(x - mx));
      for (int64_t j = 0; j < len; ++j) {
        for (int64_t c = 0; c < hd; ++c) {
          out[static_cast<size_t>((i * s.n_heads + h) * hd + c)] +=
              p[static_cast<size_t>(j)] / sum *
              v[static_cast<size_t>((j * s.n_kv_heads + g) * hd + c)];
        }
      }
    }
  }
  return out;
}

struct Case {
  int64_t n_heads, n_kv, head_dim, p0, n;
};

class AttentionTest : public ::testing::TestWithParam<Case> {};

TEST_P(AttentionTest, MatchesDoubleReference) {
  const Case c = GetParam();
  const AttentionShape s{c.n_heads, c.n_kv, c.head_dim};
  const int64_t total = c.p0 + c.n;
  // Spread 3 makes the softmax peaked enough that a wrong mask or scale shows.
  const auto q = random_floats(static_cast<size_t>(c.n * c.n_heads * c.head_dim), 1, -3, 3);
  const auto k = random_floats(static_cast<size_t>(total * c.n_kv * c.head_dim), 2, -3, 3);
  const auto v = random_floats(static_cast<size_t>(total * c.n_kv * c.head_dim), 3);
  std::vector<float> out(q.size(), -99.0f);
  attention(s, q.data(), k.data(), v.data(), c.p0, c.n, out.data());
  const auto ref = reference(s, q, k, v, c.p0, c.n);
  for (size_t i = 0; i < out.size(); ++i) ASSERT_NEAR(out[i], ref[i], 2e-5) << "element " << i;
}

// GQA ratios 1, 3, 7; head_dim 20, 64, 128; decode (n = 1), short and blocked prefill, with
// and without an existing prefix.
INSTANTIATE_TEST_SUITE_P(Shapes, AttentionTest,
                         ::testing::Values(Case{2, 2, 20, 0, 1}, Case{2, 2, 20, 9, 1},
                                           Case{3, 1, 64, 0, 5}, Case{3, 1, 64, 40, 3},
                                           Case{14, 2, 64, 0, 37}, Case{14, 2, 64, 11, 70},
                                           Case{7, 1, 128, 0, 130}, Case{7, 1, 128, 200, 1},
                                           Case{12, 2, 128, 5, 16}, Case{6, 6, 20, 3, 65},
                                           Case{7, 1, 64, 1100, 1}, Case{14, 2, 64, 600, 2}),
                         [](const auto& info) {
                           const Case& c = info.param;
                           return std::to_string(c.n_heads) + "h" + std::to_string(c.n_kv) +
                                  "kv_d" + std::to_string(c.head_dim) + "_p" +
                                  std::to_string(c.p0) + "_n" + std::to_string(c.n);
                         });

class AttentionPerTarget : public test::PerSimdTarget {};
MOLT_INSTANTIATE_PER_SIMD_TARGET(AttentionPerTarget);

TEST_P(AttentionPerTarget, PrefillEqualsTokenByTokenDecode) {
  const AttentionShape s{14, 2, 64};
  const int64_t n = 40, qw = 14 * 64, kw = 2 * 64;
  const auto q = random_floats(static_cast<size_t>(n * qw), 4);
  const auto k = random_floats(static_cast<size_t>(n * kw), 5);
  const auto v = random_floats(static_cast<size_t>(n * kw), 6);
  std::vector<float> all(static_cast<size_t>(n * qw)), one(static_cast<size_t>(n * qw));
  attention(s, q.data(), k.data(), v.data(), 0, n, all.data());
  for (int64_t i = 0; i < n; ++i) {
    attention(s, q.data() + i * qw, k.data(), v.data(), i, 1, one.data() + i * qw);
  }
  for (size_t i = 0; i < all.size(); ++i) ASSERT_NEAR(all[i], one[i], 1e-5) << i;
}

TEST(Attention, LongCacheSplitOverThreadsMatchesOneThread) {
  // Four threads on one KV head: the keys are split four ways and merged.
  const AttentionShape s{7, 1, 64};
  const int64_t p0 = 1500;
  const auto q = random_floats(7 * 64, 7, -3, 3);
  const auto k = random_floats(static_cast<size_t>((p0 + 1) * 64), 8, -3, 3);
  const auto v = random_floats(static_cast<size_t>((p0 + 1) * 64), 9);
  std::vector<float> split(7 * 64), whole(7 * 64);
  const int before = num_threads();
  set_num_threads(4);
  attention(s, q.data(), k.data(), v.data(), p0, 1, split.data());
  set_num_threads(1);
  attention(s, q.data(), k.data(), v.data(), p0, 1, whole.data());
  set_num_threads(before);
  const auto ref = reference(s, q, k, v, p0, 1);
  for (size_t i = 0; i < split.size(); ++i) {
    ASSERT_NEAR(split[i], ref[i], 2e-5) << i;
    ASSERT_NEAR(whole[i], ref[i], 2e-5) << i;
  }
}

TEST(Attention, RejectsBadShapes) {
  float x[8] = {};
  try {
    attention({3, 2, 4}, x, x, x, 0, 1, x);
    FAIL() << "no error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("n_kv_heads 2 does not divide n_heads 3"),
              std::string::npos)
        << e.what();
  }
  EXPECT_THROW(attention({0, 1, 4}, x, x, x, 0, 1, x), Error);
  EXPECT_THROW(attention({2, 1, 4}, x, x, x, -1, 1, x), Error);
}

// Batched decode: queries of several sequences, each against its own cache (lengths from one
// key to past the 256-key splits), in one call equal one call each bit for bit, for 1 and 2
// threads and one or two KV heads (one head splits long caches over the threads).
TEST(Attention, BatchOfSequencesEqualsOneCallEach) {
  const int before = num_threads();
  for (int threads : {1, 2}) {
    set_num_threads(threads);
    for (const AttentionShape s : {AttentionShape{4, 1, 64}, AttentionShape{14, 2, 64}}) {
      const int64_t qd = s.n_heads * s.head_dim, kvd = s.n_kv_heads * s.head_dim;
      const std::vector<int64_t> pos = {0, 5, 700, 255, 1100};
      std::vector<std::vector<float>> k, v;
      const auto q = random_floats(pos.size() * static_cast<size_t>(qd), 40);
      std::vector<float> batched(q.size(), -1.0f), alone(q.size(), -2.0f);
      std::vector<AttentionQuery> queries;
      for (size_t i = 0; i < pos.size(); ++i) {
        const auto rows = static_cast<size_t>((pos[i] + 1) * kvd);
        k.push_back(random_floats(rows, 41 + static_cast<uint32_t>(i)));
        v.push_back(random_floats(rows, 51 + static_cast<uint32_t>(i)));
      }
      for (size_t i = 0; i < pos.size(); ++i) {
        const float* qi = q.data() + i * static_cast<size_t>(qd);
        queries.push_back({qi, k[i].data(), v[i].data(), pos[i], batched.data() + i * qd});
        attention(s, qi, k[i].data(), v[i].data(), pos[i], 1, alone.data() + i * qd);
      }
      attention_batch(s, queries);
      EXPECT_EQ(batched, alone) << threads << " threads, " << s.n_kv_heads << " kv heads";
    }
  }
  set_num_threads(before);
  attention_batch({2, 1, 4}, {});  // no sequences: nothing to do
  float x[8] = {};
  const AttentionQuery bad[] = {{x, x, x, -1, x}};
  EXPECT_THROW(attention_batch({2, 1, 4}, bad), Error);
  EXPECT_THROW(attention_batch({3, 2, 4}, bad), Error);
}

}  // namespace
}  // namespace molt
