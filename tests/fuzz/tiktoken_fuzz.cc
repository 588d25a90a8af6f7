// Fuzzes a tiktoken rank file (src/tokenizer/load_tiktoken.cc: "base64 rank" lines, merges
// rebuilt from the ranks) through Tokenizer::load, then encodes and decodes.
#include "tokenizer_exercise.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static const std::filesystem::path file =
      molt::fuzz::scratch_subdir("tiktoken") / "qwen.tiktoken";
  molt::fuzz::write_file(file, molt::fuzz::as_text(data, size));
  return molt::fuzz::guarded([&] { molt::fuzz::exercise(*molt::Tokenizer::load(file)); });
}
