// Tokenizer microbenchmarks on the real Qwen2.5 vocabulary: encode English prose with a cold and
// a warm BPE cache, encode CJK text, decode, and load each file format. The vocabulary is read
// from $MOLT_TOKENIZER, else from ../shared/data/qwen2.5 beside the source tree.
#include <benchmark/benchmark.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <memory>
#include <sstream>

#include "molt/tokenizer/tokenizer.h"

namespace {

namespace fs = std::filesystem;

fs::path qwen_dir() {
  if (const char* env = std::getenv("MOLT_TOKENIZER")) return env;
  return fs::path(__FILE__).parent_path().parent_path().parent_path() / "shared" / "data" /
         "qwen2.5";
}

const molt::Tokenizer* tokenizer() {
  static std::unique_ptr<molt::Tokenizer> tok = [] {
    std::unique_ptr<molt::Tokenizer> t;
    if (fs::exists(qwen_dir())) t = molt::Tokenizer::load(qwen_dir());
    return t;
  }();
  return tok.get();
}

std::string prose() {
  std::ifstream f("/usr/share/common-licenses/GPL-3", std::ios::binary);
  std::stringstream ss;
  ss << f.rdbuf();
  std::string s = ss.str();
  if (s.empty()) {
    for (int i = 0; i < 2000; ++i)
      s += "The quick brown fox jumps over the lazy dog, again and again. ";
  }
  return s;
}

std::string cjk() {
  std::string s;
  for (int i = 0; i < 3000; ++i) s += "我想在苹果公司工作，这是一个很好的机会。";
  return s;
}

void encode_bench(benchmark::State& state, const std::string& text, bool cold) {
  const molt::Tokenizer* tok = tokenizer();
  if (tok == nullptr) {
    state.SkipWithError("Qwen2.5 tokenizer files not found; set MOLT_TOKENIZER");
    return;
  }
  size_t tokens = 0;
  for (auto _ : state) {
    if (cold) {
      state.PauseTiming();
      tok->clear_cache();
      state.ResumeTiming();
    }
    auto ids = tok->encode(text);
    tokens = ids.size();
    benchmark::DoNotOptimize(ids.data());
  }
  state.SetBytesProcessed(static_cast<int64_t>(state.iterations() * text.size()));
  state.counters["tokens"] = static_cast<double>(tokens);
}

void BM_EncodeProseWarm(benchmark::State& state) {
  encode_bench(state, prose(), false);
}
void BM_EncodeProseCold(benchmark::State& state) {
  encode_bench(state, prose(), true);
}
void BM_EncodeCjkWarm(benchmark::State& state) {
  encode_bench(state, cjk(), false);
}

void BM_DecodeProse(benchmark::State& state) {
  const molt::Tokenizer* tok = tokenizer();
  if (tok == nullptr) {
    state.SkipWithError("Qwen2.5 tokenizer files not found; set MOLT_TOKENIZER");
    return;
  }
  const std::string text = prose();
  const auto ids = tok->encode(text);
  for (auto _ : state) benchmark::DoNotOptimize(tok->decode(ids));
  state.SetBytesProcessed(static_cast<int64_t>(state.iterations() * text.size()));
}

void BM_Load(benchmark::State& state, const char* file) {
  const fs::path p = qwen_dir() / file;
  if (!fs::exists(p)) {
    state.SkipWithError("Qwen2.5 tokenizer files not found; set MOLT_TOKENIZER");
    return;
  }
  for (auto _ : state) benchmark::DoNotOptimize(molt::Tokenizer::load(p));
}

BENCHMARK(BM_EncodeProseWarm)->Unit(benchmark::kMillisecond);
BENCHMARK(BM_EncodeProseCold)->Unit(benchmark::kMillisecond);
BENCHMARK(BM_EncodeCjkWarm)->Unit(benchmark::kMillisecond);
BENCHMARK(BM_DecodeProse)->Unit(benchmark::kMillisecond);
BENCHMARK_CAPTURE(BM_Load, tiktoken, "qwen.tiktoken")->Unit(benchmark::kMillisecond)->Iterations(3);
BENCHMARK_CAPTURE(BM_Load, merges, "merges.txt")->Unit(benchmark::kMillisecond)->Iterations(3);

}  // namespace
