// molt quantize: a quantised copy of a dense Hugging Face checkpoint.
#pragma once

#include <cstdint>
#include <filesystem>
#include <string>

namespace molt {

struct QuantizeOptions {
  std::string mode = "affine";  // "affine" (MLX layout, bits 4 or 8) or "int8" (symmetric)
  int bits = 4;
  int64_t group_size = 64;  // affine: 32, 64, 128; int8: 0 (per channel), 32, 64, 128
  size_t max_shard_bytes = size_t{4} << 30;
  // affine only: store rows interleaved in blocks of 8 (config "layout": "rows8"), the layout
  // the x86 decode kernel runs fastest; such a checkpoint is molt's own (MLX cannot read it),
  // and every quantised matrix needs rows that are a multiple of 8.
  bool interleave = false;
};

// Writes into `out` (created; must not be `src`): the safetensors with every linear and the
// embedding (and an untied lm_head) quantised — affine as MLX stores it
// ("<module>.weight" U32 packed, "<module>.scales" and "<module>.biases" in the model dtype),
// int8 as "<module>.weight" I8 plus "<module>.scales" F32 — everything else copied as is;
// config.json with "quantization" and "quantization_config" added; the other files of `src`
// (tokenizer, generation_config.json, ...) copied. A module whose input size the group does
// not divide stays dense, as MLX leaves it. With `interleave`, `src` may instead be an
// MLX-quantised checkpoint: its affine weights are re-laid out as rows8 module by module (each
// with its own bits and group), nothing requantised, and bits / group_size are not used; an
// int8 or already interleaved checkpoint is refused. Returns the bytes of tensors written.
size_t quantize_checkpoint(const std::filesystem::path& src, const std::filesystem::path& out,
                           const QuantizeOptions& o);

}  // namespace molt
