// molt bench tokenizer: encode and decode speed on one thread, on English prose by default.
#include <fmt/core.h>
#include <time.h>

#include <algorithm>
#include <chrono>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>

#include "command.h"
#include "molt/common/error.h"
#include "molt/tokenizer/tokenizer.h"

namespace molt::cli {
namespace {

struct BenchTokenizerArgs {
  std::string tokenizer;
  std::string specials;
  std::string text_file = "/usr/share/common-licenses/GPL-3";
  double seconds = 1.0;
  bool json = false;
};

using Clock = std::chrono::steady_clock;

// Wall time and this thread's CPU time: on a busy machine the wall figure mixes in other
// processes' load, the CPU figure is what one core of this process achieves.
struct Timer {
  Clock::time_point wall = Clock::now();
  double cpu = thread_cpu_seconds();
  static double thread_cpu_seconds() {
    timespec ts{};
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
    return static_cast<double>(ts.tv_sec) + static_cast<double>(ts.tv_nsec) * 1e-9;
  }
  double wall_s() const { return std::chrono::duration<double>(Clock::now() - wall).count(); }
  double cpu_s() const { return thread_cpu_seconds() - cpu; }
};

void run(const BenchTokenizerArgs& a) {
  std::ifstream f(a.text_file, std::ios::binary);
  if (!f) fail("{}: cannot open the text file", a.text_file);
  std::stringstream ss;
  ss << f.rdbuf();
  const std::string text = ss.str();
  if (text.empty()) fail("{}: the text file is empty", a.text_file);
  const double mb = static_cast<double>(text.size()) / 1e6;

  Timer t;
  auto tok = Tokenizer::load(a.tokenizer, a.specials);
  const double load_s = t.wall_s(), load_cpu_s = t.cpu_s();

  // Cold: every distinct piece goes through BPE (the cache is emptied before each pass).
  // Best of 5 passes.
  double cold_s = 1e30, cold_cpu_s = 1e30;
  std::vector<int32_t> ids;
  for (int i = 0; i < 5; ++i) {
    tok->clear_cache();
    t = Timer();
    ids = tok->encode(text);
    cold_s = std::min(cold_s, t.wall_s());
    cold_cpu_s = std::min(cold_cpu_s, t.cpu_s());
  }
  // Warm: repeated passes over the same text, as a long stream of similar prose behaves.
  int passes = 0;
  t = Timer();
  do {
    ids = tok->encode(text);
    ++passes;
  } while (t.wall_s() < a.seconds);
  const double warm_s = t.wall_s() / passes, warm_cpu_s = t.cpu_s() / passes;
  int dpasses = 0;
  size_t decoded = 0;
  t = Timer();
  do {
    decoded += tok->decode(ids).size();
    ++dpasses;
  } while (t.wall_s() < a.seconds / 2);
  const double decode_s = t.wall_s() / dpasses;
  (void)decoded;
  // Holds for well-formed NFC text (the default file is ASCII).
  const bool round_trip = tok->decode(ids) == text;

  const nlohmann::json j = {{"tokenizer", a.tokenizer},
                            {"format", tok->format()},
                            {"text_file", a.text_file},
                            {"bytes", text.size()},
                            {"tokens", ids.size()},
                            {"bytes_per_token", static_cast<double>(text.size()) / ids.size()},
                            {"threads", 1},
                            {"load_ms", load_s * 1e3},
                            {"load_cpu_ms", load_cpu_s * 1e3},
                            {"encode_cold_mb_s", mb / cold_s},
                            {"encode_warm_mb_s", mb / warm_s},
                            {"encode_cold_mb_per_cpu_s", mb / cold_cpu_s},
                            {"encode_warm_mb_per_cpu_s", mb / warm_cpu_s},
                            {"encode_tokens_per_s", ids.size() / warm_s},
                            {"decode_mb_s", mb / decode_s},
                            {"round_trip_exact", round_trip}};
  if (a.json) {
    fmt::print("{}\n", j.dump());
    return;
  }
  fmt::print("text     {} ({} bytes, {} tokens, {:.2f} bytes/token)\n", a.text_file, text.size(),
             ids.size(), static_cast<double>(text.size()) / ids.size());
  fmt::print("load     {:8.1f} ms  ({:.1f} ms CPU, {})\n", load_s * 1e3, load_cpu_s * 1e3,
             tok->format());
  fmt::print("encode   {:8.1f} MB/s cold cache, {:.1f} MB/s warm cache (1 thread, wall)\n",
             mb / cold_s, mb / warm_s);
  fmt::print("         {:8.1f} MB/s cold cache, {:.1f} MB/s warm cache (per CPU second)\n",
             mb / cold_cpu_s, mb / warm_cpu_s);
  fmt::print("decode   {:8.1f} MB/s  (round trip {})\n", mb / decode_s,
             round_trip ? "exact" : "differs: text is not NFC or not UTF-8");
}

const bool registered = register_command([](CLI::App& root) {
  auto a = std::make_shared<BenchTokenizerArgs>();
  CLI::App* s = group(root, "bench", "Benchmarks that print figures")
                    ->add_subcommand("tokenizer", "Tokenizer encode / decode speed on one thread");
  s->add_option("--tokenizer", a->tokenizer,
                "model folder, tokenizer.json, vocab.json, merges.txt or *.tiktoken")
      ->required();
  s->add_option("--specials", a->specials, "JSON file of added tokens for rank files");
  s->add_option("--text-file", a->text_file, "text to encode (default: the GPL-3 text)");
  s->add_option("--seconds", a->seconds, "minimum time of the warm encode loop")
      ->check(CLI::PositiveNumber);
  s->add_flag("--json", a->json, "one JSON object");
  s->callback([a] { run(*a); });
});

}  // namespace
}  // namespace molt::cli
