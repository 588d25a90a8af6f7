#include "molt/bench/answer.h"

#include "molt/runtime/generation.h"

namespace molt {
namespace {

SessionOptions greedy_options(int64_t n, KvDType kv) {
  SessionOptions o;
  o.kv_dtype = kv;
  o.max_tokens = n;
  o.stop_at_eos = false;          // the answer's length in tokens, as scored
  o.up_after = int64_t{1} << 40;  // no budget: stay on the rung asked for
  return o;
}

std::vector<int32_t> run(Generation& g) {
  while (!g.finished()) g.step();
  return {g.answer().begin(), g.answer().end()};
}

}  // namespace

std::vector<int32_t> greedy_answer(Ladder& ladder, int rung, std::span<const int32_t> prompt,
                                   int64_t n, KvDType kv) {
  SessionOptions o = greedy_options(n, kv);
  if (rung == 0) {
    Generation g(ladder, nullptr, prompt, o);
    return run(g);
  }
  // Below the top rung: read the prompt there first (its last id decoded by the generation).
  ladder.rung(rung).load();
  const Model& m = ladder.rung(rung).model();
  KVCache cache = m.new_cache(static_cast<int64_t>(prompt.size()) + n, false, kv);
  m.forward(prompt.first(prompt.size() - 1), cache, {});
  return greedy_answer_from(ladder, rung, std::move(cache), prompt, n);
}

std::vector<int32_t> greedy_answer_from(Ladder& ladder, int rung, KVCache cache,
                                        std::span<const int32_t> prompt, int64_t n) {
  SessionOptions o = greedy_options(n, cache.kv_dtype());
  o.capacity = cache.capacity();
  auto g = Generation::resume(ladder, nullptr, rung, std::move(cache),
                              std::vector<int32_t>(prompt.begin(), prompt.end()), o);
  return run(*g);
}

}  // namespace molt
