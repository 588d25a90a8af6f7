// The element types of a KV cache's rows, and the conversions between them and f32.
//
// A row is one position's K (or V) of one layer: n_kv_heads × head_dim values.
//   f32   as computed.
//   f16   IEEE half, rounded to nearest even: half the bytes, ~3 significant digits.
//   int8  per (position, KV head) symmetric absmax scale: the head's head_dim values as int8
//         (v ≈ q · scale, q in [-127, 127]), then the n_kv_heads scales as f32 at the end of the
//         row: a quarter of the bytes plus 4 per head.
// Rows are padded to a multiple of 4 bytes, so a row's scales and every block stay aligned.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string_view>

namespace molt {

enum class KvDType : uint8_t { kF32, kF16, kInt8 };

// "f32", "f16", "int8".
std::string_view kv_dtype_name(KvDType t);
// Parses those names; errors name `what` (a flag, a field or a variable) and the known names.
KvDType parse_kv_dtype(std::string_view name, std::string_view what);

// Bytes of one row.
size_t kv_row_bytes(KvDType t, int64_t n_kv_heads, int64_t head_dim);

// Rows [0, n) of `in` (f32, n × n_kv_heads × head_dim, consecutive) into n rows of `out` of
// kv_row_bytes each, and back. From f32 to f32 both are copies.
void kv_encode_rows(KvDType t, int64_t n_kv_heads, int64_t head_dim, const float* in, int64_t n,
                    void* out);
void kv_decode_rows(KvDType t, int64_t n_kv_heads, int64_t head_dim, const void* in, int64_t n,
                    float* out);

}  // namespace molt
