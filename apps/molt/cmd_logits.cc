// molt logits: float32 little-endian logits of every position, [T, vocab].
#include <fmt/core.h>

#include <cstdio>

#include "command.h"
#include "molt/common/error.h"
#include "molt/kernels/threads.h"
#include "molt/model/model.h"

namespace molt::cli {
namespace {

struct LogitsArgs {
  std::string model, ids, out;
  bool decode = false;
  int threads = 0;
};

void run(const LogitsArgs& a) {
  set_num_threads(a.threads);
  const std::vector<int32_t> ids = parse_ids(a.ids, "--ids");
  if (ids.empty()) fail("--ids: no token ids given");
  auto model = Model::load(a.model);
  const int64_t T = static_cast<int64_t>(ids.size()), V = model->config().vocab_size;
  std::vector<float> logits(static_cast<size_t>(T * V));
  KVCache cache = model->new_cache(T);
  if (a.decode) {
    for (int64_t t = 0; t < T; ++t) {
      model->forward(std::span<const int32_t>(&ids[t], 1), cache,
                     std::span<float>(logits.data() + t * V, V));
    }
  } else {
    model->forward(ids, cache, logits);
  }
  FILE* f = std::fopen(a.out.c_str(), "wb");
  if (f == nullptr) fail("--out: cannot open '{}' for writing", a.out);
  const size_t written = std::fwrite(logits.data(), sizeof(float), logits.size(), f);
  if (std::fclose(f) != 0 || written != logits.size()) fail("--out: write to '{}' failed", a.out);
  fmt::print("wrote {} × {} logits to {}\n", T, V, a.out);
}

const bool registered = register_command([](CLI::App& root) {
  auto a = std::make_shared<LogitsArgs>();
  CLI::App* s =
      root.add_subcommand("logits", "Write the logits of every position (float32 LE, [T, vocab])");
  s->add_option("--model", a->model, "checkpoint directory")->required();
  s->add_option("--ids", a->ids, "token ids, e.g. \"1 2 3\"")->required();
  s->add_option("--out", a->out, "output file")->required();
  s->add_flag("--decode", a->decode, "token by token through the KV cache instead of one prefill");
  s->add_option("--threads", a->threads, "threads (0 = all cores)")->check(CLI::NonNegativeNumber);
  s->callback([a] { run(*a); });
});

}  // namespace
}  // namespace molt::cli
