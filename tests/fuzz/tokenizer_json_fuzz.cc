// Fuzzes a Hugging Face tokenizer.json (src/tokenizer/load_tokenizer_json.cc) through
// Tokenizer::load, then encodes and decodes with what loaded.
#include "tokenizer_exercise.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static const std::filesystem::path file =
      molt::fuzz::scratch_subdir("tokenizer_json") / "tokenizer.json";
  molt::fuzz::write_file(file, molt::fuzz::as_text(data, size));
  return molt::fuzz::guarded([&] { molt::fuzz::exercise(*molt::Tokenizer::load(file)); });
}
