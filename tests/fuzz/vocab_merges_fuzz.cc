// Fuzzes vocab.json + merges.txt (src/tokenizer/load_vocab_merges.cc) through Tokenizer::load on
// their folder. The input is vocab.json, the line "--merges.txt--", then merges.txt; without
// that line the whole input is a merges.txt alone (byte tokens 0..255, merge i makes 256 + i).
#include "tokenizer_exercise.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static const std::filesystem::path dir = molt::fuzz::scratch_subdir("vocab_merges");
  const auto parts = molt::fuzz::split_at(molt::fuzz::as_text(data, size), "\n--merges.txt--\n");
  std::error_code ec;
  if (parts.found) {
    molt::fuzz::write_file(dir / "vocab.json", parts.first);
    molt::fuzz::write_file(dir / "merges.txt", parts.second);
  } else {
    std::filesystem::remove(dir / "vocab.json", ec);
    molt::fuzz::write_file(dir / "merges.txt", parts.first);
  }
  return molt::fuzz::guarded([&] { molt::fuzz::exercise(*molt::Tokenizer::load(dir)); });
}
