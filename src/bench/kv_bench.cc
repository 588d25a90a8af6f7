#include "molt/bench/kv_bench.h"

#include <nlohmann/json.hpp>
#include <string>

#include "molt/bench/answer.h"
#include "molt/bench/needles.h"
#include "molt/common/error.h"
#include "molt/model/model.h"
#include "molt/tokenizer/tokenizer.h"
#include "molt/transfer/eval.h"

namespace molt {
namespace {

using json = nlohmann::json;
constexpr KvDType kTypes[] = {KvDType::kF32, KvDType::kF16, KvDType::kInt8};

// Mean next-token NLL over `windows` consecutive windows of `text`, each read from an empty
// cache of type kv (every position attends over rows stored in that type).
double prefix_nll(const Model& m, std::span<const int32_t> text, const KvBenchOptions& o,
                  KvDType kv) {
  std::vector<float> logits;
  double sum = 0;
  for (int64_t w = 0; w < o.windows; ++w) {
    sum += window_nll(
        m, text.subspan(static_cast<size_t>(w * o.context), static_cast<size_t>(o.context)), kv,
        logits);
  }
  return sum / static_cast<double>(o.windows);
}

}  // namespace

json run_kv_bench(Ladder& ladder, std::span<const int32_t> text,
                  const std::filesystem::path& needles, const KvBenchOptions& o,
                  const std::function<void(int64_t, int64_t)>& progress) {
  if (o.context < 2 || o.windows < 1) {
    fail("kv bench: context {} and windows {} must be at least 2 and 1", o.context, o.windows);
  }
  if (static_cast<int64_t>(text.size()) < o.context * o.windows) {
    fail("kv bench: the text has {} tokens; {} windows of {} need {}", text.size(), o.windows,
         o.context, o.context * o.windows);
  }
  const Tokenizer* tok = ladder.tokenizer();
  if (tok == nullptr) fail("kv bench: ladder '{}' has no tokenizer", ladder.name());
  std::vector<std::vector<NeedleItem>> sets;
  for (const auto& [context, count] : o.needles)
    sets.push_back(read_needles(needles, context, count));
  int64_t total = ladder.size(), done = 0;
  for (const auto& s : sets) total += static_cast<int64_t>(s.size());
  json out = {{"types", json::array()}, {"context", o.context}, {"windows", o.windows}};
  for (const KvDType t : kTypes) out["types"].push_back(std::string(kv_dtype_name(t)));

  json rungs = json::array();
  for (int r = 0; r < ladder.size(); ++r) {
    Rung& rung = ladder.rung(r);
    rung.load();
    const Model& m = rung.model();
    json row = {{"rung", rung.name()}};
    double f32_bytes = 0, f32_nll = 0;
    for (const KvDType t : kTypes) {
      const std::string name(kv_dtype_name(t));
      const auto bytes = static_cast<double>(m.new_cache(1, false, t).kv_bytes_per_token());
      const double nll = prefix_nll(m, text, o, t);
      if (t == KvDType::kF32) f32_bytes = bytes, f32_nll = nll;
      row["bytes_per_token"][name] = bytes;
      row["bytes_ratio"][name] = bytes / f32_bytes;
      row["nll"][name] = nll;
      row["nll_change_pct"][name] = 100 * (nll / f32_nll - 1);
    }
    rungs.push_back(std::move(row));
    if (progress) progress(++done, total);
  }
  out["rungs"] = std::move(rungs);

  // Needles on the top rung, the prompt read natively into a cache of each type.
  json nd = json::array();
  for (size_t s = 0; s < sets.size(); ++s) {
    json row = {{"context", o.needles[s].first},
                {"count", static_cast<int64_t>(sets[s].size())},
                {"rung", ladder.rung(0).name()}};
    std::vector<bool> right[3];
    for (const NeedleItem& n : sets[s]) {
      const std::vector<int32_t> prompt = tok->encode(n.prompt);
      const auto answer_tokens = static_cast<int64_t>(tok->encode(n.answer).size());
      for (int t = 0; t < 3; ++t) {
        right[t].push_back(needle_answer_matches(
            tok->decode(greedy_answer(ladder, 0, prompt, answer_tokens, kTypes[t])), n.answer));
      }
      if (progress) progress(++done, total);
    }
    for (int t = 0; t < 3; ++t) {
      const std::string name(kv_dtype_name(kTypes[t]));
      int64_t correct = 0;
      for (const bool ok : right[t]) correct += ok;
      row["correct"][name] = correct;
      row["same_as_f32"][name] = right[t] == right[0];
    }
    nd.push_back(std::move(row));
  }
  out["needles"] = std::move(nd);
  return out;
}

}  // namespace molt
