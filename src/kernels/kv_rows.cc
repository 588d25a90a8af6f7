// Conversions between f32 rows and a KV cache's stored rows. They run once per new position
// (encode) or once per layer of a transfer (decode), in Highway ops: f16 through F16C on x86 and
// the FCVT instructions on arm64; int8 an absmax per head, then a rounding to nearest even.
#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "kernels/kv_rows.cc"
#include "hwy/foreach_target.h"  // IWYU pragma: keep
// Must follow foreach_target.h.
#include <algorithm>
#include <cmath>
#include <cstring>

#include "hwy/highway.h"
#include "molt/common/dtype.h"
#include "molt/common/error.h"
#include "molt/kernels/kv_rows.h"

HWY_BEFORE_NAMESPACE();
namespace molt {
namespace HWY_NAMESPACE {
namespace hn = hwy::HWY_NAMESPACE;

using DF = hn::ScalableTag<float>;

// Highway converts in hardware where the CPU has it (F16C with AVX2 and AVX-512, NEON on
// arm64); its emulation on older targets truncates instead of rounding, so those stay scalar.
#undef MOLT_NATIVE_F16
#if (HWY_ARCH_X86 && HWY_TARGET <= HWY_AVX2) || (HWY_ARCH_ARM_A64 && HWY_TARGET != HWY_SCALAR)
#define MOLT_NATIVE_F16 1
#else
#define MOLT_NATIVE_F16 0
#endif

void F32ToF16(const float* in, int64_t n, uint16_t* out) {
  if (!MOLT_NATIVE_F16) {
    for (int64_t i = 0; i < n; ++i) out[i] = f32_to_f16(in[i]);
    return;
  }
  const DF d;
  const hn::Rebind<hwy::float16_t, DF> dh;
  const int64_t lanes = static_cast<int64_t>(hn::Lanes(d));
  auto* h = reinterpret_cast<hwy::float16_t*>(out);
  int64_t i = 0;
  for (; i + lanes <= n; i += lanes) hn::StoreU(hn::DemoteTo(dh, hn::LoadU(d, in + i)), dh, h + i);
  for (; i < n; ++i) out[i] = f32_to_f16(in[i]);
}

void F16ToF32(const uint16_t* in, int64_t n, float* out) {
  if (!MOLT_NATIVE_F16) {
    for (int64_t i = 0; i < n; ++i) out[i] = f16_to_f32(in[i]);
    return;
  }
  const DF d;
  const hn::Rebind<hwy::float16_t, DF> dh;
  const int64_t lanes = static_cast<int64_t>(hn::Lanes(d));
  const auto* h = reinterpret_cast<const hwy::float16_t*>(in);
  int64_t i = 0;
  for (; i + lanes <= n; i += lanes) hn::StoreU(hn::PromoteTo(d, hn::LoadU(dh, h + i)), d, out + i);
  for (; i < n; ++i) out[i] = f16_to_f32(in[i]);
}

// One head of an int8 row: q = x / scale rounded to nearest even (as std::lrint), scale =
// absmax / 127; returns the scale. Same integers and scale as the scalar formula on every target.
float I8EncodeHead(const float* x, int64_t n, int8_t* q) {
  const DF d;
  const hn::Rebind<int8_t, DF> d8;
  const int64_t lanes = static_cast<int64_t>(hn::Lanes(d));
  auto m = hn::Zero(d);
  int64_t i = 0;
  for (; i + lanes <= n; i += lanes) m = hn::Max(m, hn::Abs(hn::LoadU(d, x + i)));
  float amax = hn::GetLane(hn::MaxOfLanes(d, m));
  for (; i < n; ++i) amax = std::max(amax, std::fabs(x[i]));
  const float scale = amax / 127.0f;
  const float inv = scale > 0.0f ? 1.0f / scale : 0.0f;
  const auto vinv = hn::Set(d, inv);
  for (i = 0; i + lanes <= n; i += lanes) {
    hn::StoreU(hn::DemoteTo(d8, hn::NearestInt(hn::Mul(hn::LoadU(d, x + i), vinv))), d8, q + i);
  }
  for (; i < n; ++i) q[i] = static_cast<int8_t>(std::lrint(x[i] * inv));
  return scale;
}

void I8DecodeHead(const int8_t* q, int64_t n, float scale, float* y) {
  const DF d;
  const hn::Rebind<int32_t, DF> di;
  const hn::Rebind<int8_t, DF> d8;
  const int64_t lanes = static_cast<int64_t>(hn::Lanes(d));
  const auto s = hn::Set(d, scale);
  int64_t i = 0;
  for (; i + lanes <= n; i += lanes) {
    hn::StoreU(hn::Mul(hn::ConvertTo(d, hn::PromoteTo(di, hn::LoadU(d8, q + i))), s), d, y + i);
  }
  for (; i < n; ++i) y[i] = static_cast<float>(q[i]) * scale;
}

}  // namespace HWY_NAMESPACE
}  // namespace molt
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
namespace molt {

HWY_EXPORT(F32ToF16);
HWY_EXPORT(F16ToF32);
HWY_EXPORT(I8EncodeHead);
HWY_EXPORT(I8DecodeHead);

std::string_view kv_dtype_name(KvDType t) {
  switch (t) {
    case KvDType::kF32:
      return "f32";
    case KvDType::kF16:
      return "f16";
    case KvDType::kInt8:
      return "int8";
  }
  return "?";
}

KvDType parse_kv_dtype(std::string_view name, std::string_view what) {
  for (KvDType t : {KvDType::kF32, KvDType::kF16, KvDType::kInt8}) {
    if (kv_dtype_name(t) == name) return t;
  }
  fail("{}: unknown KV cache type '{}' (known: f32, f16, int8)", what, name);
}

size_t kv_row_bytes(KvDType t, int64_t n_kv_heads, int64_t head_dim) {
  const auto kv = static_cast<size_t>(n_kv_heads * head_dim);
  size_t bytes = 0;
  switch (t) {
    case KvDType::kF32:
      bytes = 4 * kv;
      break;
    case KvDType::kF16:
      bytes = 2 * kv;
      break;
    case KvDType::kInt8:
      bytes = kv + 4 * static_cast<size_t>(n_kv_heads);
      break;
  }
  return (bytes + 3) / 4 * 4;
}

void kv_encode_rows(KvDType t, int64_t n_kv_heads, int64_t head_dim, const float* in, int64_t n,
                    void* out) {
  const int64_t kv = n_kv_heads * head_dim;
  const size_t row = kv_row_bytes(t, n_kv_heads, head_dim);
  auto* base = static_cast<std::byte*>(out);
  for (int64_t p = 0; p < n; ++p) {
    const float* x = in + p * kv;
    std::byte* r = base + static_cast<size_t>(p) * row;
    switch (t) {
      case KvDType::kF32:
        std::memcpy(r, x, sizeof(float) * static_cast<size_t>(kv));
        break;
      case KvDType::kF16: {
        HWY_DYNAMIC_DISPATCH(F32ToF16)(x, kv, reinterpret_cast<uint16_t*>(r));
        break;
      }
      case KvDType::kInt8: {
        auto* q = reinterpret_cast<int8_t*>(r);
        auto* scales = reinterpret_cast<float*>(r + kv);
        for (int64_t h = 0; h < n_kv_heads; ++h) {
          scales[h] =
              HWY_DYNAMIC_DISPATCH(I8EncodeHead)(x + h * head_dim, head_dim, q + h * head_dim);
        }
        break;
      }
    }
  }
}

void kv_decode_rows(KvDType t, int64_t n_kv_heads, int64_t head_dim, const void* in, int64_t n,
                    float* out) {
  const int64_t kv = n_kv_heads * head_dim;
  const size_t row = kv_row_bytes(t, n_kv_heads, head_dim);
  const auto* base = static_cast<const std::byte*>(in);
  for (int64_t p = 0; p < n; ++p) {
    const std::byte* r = base + static_cast<size_t>(p) * row;
    float* y = out + p * kv;
    switch (t) {
      case KvDType::kF32:
        std::memcpy(y, r, sizeof(float) * static_cast<size_t>(kv));
        break;
      case KvDType::kF16: {
        HWY_DYNAMIC_DISPATCH(F16ToF32)(reinterpret_cast<const uint16_t*>(r), kv, y);
        break;
      }
      case KvDType::kInt8: {
        const auto* q = reinterpret_cast<const int8_t*>(r);
        const auto* scales = reinterpret_cast<const float*>(r + kv);
        for (int64_t h = 0; h < n_kv_heads; ++h) {
          HWY_DYNAMIC_DISPATCH(I8DecodeHead)
          (q + h * head_dim, head_dim, scales[h], y + h * head_dim);
        }
        break;
      }
    }
  }
}

}  // namespace molt
#endif  // HWY_ONCE
