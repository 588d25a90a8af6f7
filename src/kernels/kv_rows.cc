// Conversions between f32 rows and a KV cache's stored rows. They run once per new position
// (encode) or once per layer of a transfer (decode). f16 goes through Highway (F16C on x86,
// the FCVT instructions on arm64); int8 is scalar (an absmax per head, then a rounding).
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

}  // namespace HWY_NAMESPACE
}  // namespace molt
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
namespace molt {

HWY_EXPORT(F32ToF16);
HWY_EXPORT(F16ToF32);

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
          const float* xh = x + h * head_dim;
          float amax = 0.0f;
          for (int64_t i = 0; i < head_dim; ++i) amax = std::max(amax, std::fabs(xh[i]));
          const float scale = amax / 127.0f;
          const float inv = scale > 0.0f ? 1.0f / scale : 0.0f;
          for (int64_t i = 0; i < head_dim; ++i) {
            q[h * head_dim + i] = static_cast<int8_t>(std::lrint(xh[i] * inv));
          }
          scales[h] = scale;
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
          for (int64_t i = 0; i < head_dim; ++i) {
            y[h * head_dim + i] = static_cast<float>(q[h * head_dim + i]) * scales[h];
          }
        }
        break;
      }
    }
  }
}

}  // namespace molt
#endif  // HWY_ONCE
