// Stored KV rows (f32, f16, int8): the conversions, and attention over them. Decode and prefill
// over f16 rows equal f32 attention over the same rows widened, bit for bit; over int8 rows
// (the scales folded into scores and weights) they agree with it to rounding.
#include "molt/kernels/kv_rows.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <string>
#include <vector>

#include "kernels_test_util.h"
#include "molt/common/dtype.h"
#include "molt/common/error.h"
#include "molt/kernels/attention.h"
#include "molt/kernels/threads.h"

namespace molt {
namespace {

using test::random_floats;

std::vector<std::byte> encode(KvDType t, int64_t heads, int64_t hd, const std::vector<float>& x) {
  const int64_t rows = static_cast<int64_t>(x.size()) / (heads * hd);
  std::vector<std::byte> out(static_cast<size_t>(rows) * kv_row_bytes(t, heads, hd));
  kv_encode_rows(t, heads, hd, x.data(), rows, out.data());
  return out;
}

std::vector<float> decode(KvDType t, int64_t heads, int64_t hd, const std::vector<std::byte>& b) {
  const auto rows = static_cast<int64_t>(b.size() / kv_row_bytes(t, heads, hd));
  std::vector<float> out(static_cast<size_t>(rows * heads * hd));
  kv_decode_rows(t, heads, hd, b.data(), rows, out.data());
  return out;
}

TEST(KvRows, SizesAndNames) {
  EXPECT_EQ(kv_row_bytes(KvDType::kF32, 2, 64), 512u);
  EXPECT_EQ(kv_row_bytes(KvDType::kF16, 2, 64), 256u);
  EXPECT_EQ(kv_row_bytes(KvDType::kInt8, 2, 64), 136u);  // 128 values + 2 scales
  EXPECT_EQ(kv_row_bytes(KvDType::kF16, 1, 6), 12u);
  EXPECT_EQ(kv_row_bytes(KvDType::kF16, 1, 2), 4u);
  EXPECT_EQ(kv_row_bytes(KvDType::kInt8, 1, 6), 12u);  // 6 + 4, padded to 4 bytes
  for (KvDType t : {KvDType::kF32, KvDType::kF16, KvDType::kInt8}) {
    EXPECT_EQ(parse_kv_dtype(kv_dtype_name(t), "--kv-dtype"), t);
  }
  try {
    parse_kv_dtype("bf16", "--kv-dtype");
    FAIL() << "no error";
  } catch (const Error& e) {
    EXPECT_EQ(std::string(e.what()),
              "--kv-dtype: unknown KV cache type 'bf16' (known: f32, f16, int8)");
  }
}

class KvRowsPerTarget : public test::PerSimdTarget {};
MOLT_INSTANTIATE_PER_SIMD_TARGET(KvRowsPerTarget);

// On every SIMD target: f32 rows copied, f16 rounded to nearest even as the scalar conversion
// does, int8 within half a step.
TEST_P(KvRowsPerTarget, RoundTrips) {
  const int64_t heads = 3, hd = 20;
  auto x = random_floats(static_cast<size_t>(7 * heads * hd), 1, -4, 4);
  x[5] = 0.0f;
  x[6] = 1e-6f;            // an f16 subnormal
  x[7] = 70000.0f;         // past the f16 range: infinity
  x[8] = 1.0f + 0x1p-11f;  // a tie: rounds to even (1.0)
  for (int64_t i = 0; i < hd; ++i) x[static_cast<size_t>(2 * heads * hd + hd + i)] = 0.0f;
  EXPECT_EQ(decode(KvDType::kF32, heads, hd, encode(KvDType::kF32, heads, hd, x)), x);
  const auto h = decode(KvDType::kF16, heads, hd, encode(KvDType::kF16, heads, hd, x));
  for (size_t i = 0; i < x.size(); ++i) {
    ASSERT_EQ(h[i], f16_to_f32_portable(f32_to_f16_portable(x[i]))) << i << ": " << x[i];
  }
  EXPECT_EQ(h[8], 1.0f);
  EXPECT_TRUE(std::isinf(h[7]));
  // int8: each head's values within half a step of its own scale (absmax / 127); an all-zero
  // head stays zero.
  const auto q = decode(KvDType::kInt8, heads, hd, encode(KvDType::kInt8, heads, hd, x));
  for (size_t r = 0; r < x.size(); r += static_cast<size_t>(hd)) {
    float amax = 0;
    for (int64_t i = 0; i < hd; ++i) amax = std::max(amax, std::fabs(x[r + i]));
    for (int64_t i = 0; i < hd; ++i) {
      ASSERT_LE(std::fabs(q[r + i] - x[r + i]), 0.5f * amax / 127.0f * 1.0001f) << r + i;
    }
  }
  for (int64_t i = 0; i < hd; ++i) EXPECT_EQ(q[static_cast<size_t>(2 * heads * hd + hd + i)], 0);
  // Bit for bit the scalar formula on every target: q = lrint(x / scale), y = q · scale.
  for (size_t r = 0; r < x.size(); r += static_cast<size_t>(hd)) {
    float amax = 0;
    for (int64_t i = 0; i < hd; ++i) amax = std::max(amax, std::fabs(x[r + i]));
    const float scale = amax / 127.0f, inv = scale > 0.0f ? 1.0f / scale : 0.0f;
    for (int64_t i = 0; i < hd; ++i) {
      const auto qi = static_cast<int8_t>(std::lrint(x[r + i] * inv));
      ASSERT_EQ(q[r + i], static_cast<float>(qi) * scale) << r + i;
    }
  }
}

struct Case {
  int64_t n_heads, n_kv, head_dim, p0, n;
};

class KvAttention : public test::PerSimdTarget {};
MOLT_INSTANTIATE_PER_SIMD_TARGET(KvAttention);

// For each stored type and shape (decode, split decode over a long cache, prefill): attention
// over the stored rows against f32 attention over the rows they decode to.
TEST_P(KvAttention, StoredRowsEqualTheirWidenedRows) {
  const int before = num_threads();
  set_num_threads(2);
  for (const Case c : {Case{4, 1, 64, 0, 1}, Case{14, 2, 64, 700, 1}, Case{6, 2, 20, 9, 3},
                       Case{14, 2, 64, 11, 40}, Case{7, 1, 128, 300, 20}}) {
    const AttentionShape s{c.n_heads, c.n_kv, c.head_dim};
    const int64_t total = c.p0 + c.n, kvd = c.n_kv * c.head_dim;
    const auto q = random_floats(static_cast<size_t>(c.n * c.n_heads * c.head_dim), 11, -3, 3);
    auto k = random_floats(static_cast<size_t>(total * kvd), 12, -3, 3);
    auto v = random_floats(static_cast<size_t>(total * kvd), 13);
    k[3] = 1e-6f;  // f16 subnormals: widened exactly on every target
    v[5] = -3e-7f;
    for (KvDType t : {KvDType::kF16, KvDType::kInt8}) {
      const auto ks = encode(t, c.n_kv, c.head_dim, k), vs = encode(t, c.n_kv, c.head_dim, v);
      const auto kw = decode(t, c.n_kv, c.head_dim, ks), vw = decode(t, c.n_kv, c.head_dim, vs);
      std::vector<float> stored(q.size(), -1.0f), wide(q.size(), -2.0f);
      attention(s, q.data(), ks.data(), vs.data(), t, c.p0, c.n, stored.data());
      attention(s, q.data(), kw.data(), vw.data(), c.p0, c.n, wide.data());
      const std::string what = std::string(kv_dtype_name(t)) + " p0 " + std::to_string(c.p0) +
                               " n " + std::to_string(c.n);
      if (t == KvDType::kF16) {
        EXPECT_EQ(stored, wide) << what;
      } else {
        for (size_t i = 0; i < q.size(); ++i) ASSERT_NEAR(stored[i], wide[i], 2e-5) << what;
      }
    }
  }
  set_num_threads(before);
}

// A batch mixing the three types equals one call each, bit for bit.
TEST(KvAttention, BatchMixingTypesEqualsOneCallEach) {
  const AttentionShape s{14, 2, 64};
  const int64_t qd = 14 * 64, kvd = 2 * 64;
  const std::vector<int64_t> pos = {3, 700, 260};
  const KvDType types[] = {KvDType::kF16, KvDType::kInt8, KvDType::kF32};
  const auto q = random_floats(pos.size() * static_cast<size_t>(qd), 21);
  std::vector<std::vector<std::byte>> k, v;
  std::vector<float> batched(q.size(), -1.0f), alone(q.size(), -2.0f);
  std::vector<AttentionQuery> queries;
  for (size_t i = 0; i < pos.size(); ++i) {
    const auto rows = static_cast<size_t>((pos[i] + 1) * kvd);
    k.push_back(encode(types[i], 2, 64, random_floats(rows, 22 + static_cast<uint32_t>(i))));
    v.push_back(encode(types[i], 2, 64, random_floats(rows, 32 + static_cast<uint32_t>(i))));
  }
  for (size_t i = 0; i < pos.size(); ++i) {
    const float* qi = q.data() + i * static_cast<size_t>(qd);
    queries.push_back({qi, k[i].data(), v[i].data(), pos[i], batched.data() + i * qd, types[i]});
    attention(s, qi, k[i].data(), v[i].data(), types[i], pos[i], 1, alone.data() + i * qd);
  }
  attention_batch(s, queries);
  EXPECT_EQ(batched, alone);
}

}  // namespace
}  // namespace molt
