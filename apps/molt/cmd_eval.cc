// molt eval nll | needle: a model's own quality on held-out text and planted-fact questions
// (the tiny ladder's figures; transfer figures are `molt transfer eval|needle`).
#include <fmt/core.h>
#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <nlohmann/json.hpp>
#include <optional>

#include "cmd_transfer_util.h"
#include "command.h"
#include "floor_cli.h"
#include "molt/bench/answer.h"
#include "molt/bench/needles.h"
#include "molt/common/error.h"
#include "molt/kernels/threads.h"
#include "molt/model/model.h"
#include "molt/transfer/eval.h"

namespace molt::cli {
namespace {

struct NllArgs {
  std::string model, text_file, ids_file;
  std::string floor_dir;  // a map directory whose receiver is --model, holding a floor
  FloorFlags floor;
  int64_t context = 512, windows = 0, prefix = 0;
  std::string kv_dtype = "f32";
  int threads = 2;
  bool json = false;
};

void run_nll(const NllArgs& a) {
  if (a.text_file.empty() == a.ids_file.empty())
    fail("give exactly one of --text-file and --ids-file");
  if (a.prefix > 0 && a.prefix + 2 > a.context)
    fail("--prefix {} leaves nothing to score in a --context {} window", a.prefix, a.context);
  if (a.prefix == 0) {
    if (!a.floor_dir.empty()) fail("--floor applies only with --prefix");
    refuse_floor_flags(a.floor, "without --prefix");
  }
  set_num_threads(a.threads);
  const KvDType kv = parse_kv_dtype(a.kv_dtype, "--kv-dtype");
  if (a.prefix > 0 && kv != KvDType::kF32) fail("--prefix compares f32 caches: drop --kv-dtype");
  auto model = Model::load(a.model);
  // The floor first: a refusal should not wait for the NLL pass.
  std::optional<TokenFloor> floor;
  if (a.prefix > 0) {
    floor =
        resolve_floor(a.floor, a.floor_dir, a.model, *model, FloorWindows{},
                      "--prefix shows the token-identity floor, whose means come from "
                      "calibration text, never from the evaluation windows: pass --floor-corpus "
                      "FILE, or --floor DIR (a map directory whose receiver is this model, "
                      "with the floor `molt fit` or `molt fit floor` stored there)");
  }
  const std::filesystem::path file = a.text_file.empty() ? a.ids_file : a.text_file;
  Corpus corpus = open_corpus(file, !a.ids_file.empty(), a.model, a.model);
  const int64_t vocab = model->config().vocab_size;
  std::vector<std::vector<int32_t>> windows;
  std::vector<int32_t> w;
  while ((a.windows == 0 || static_cast<int64_t>(windows.size()) < a.windows) &&
         corpus.stream->next_window(a.context, w)) {
    for (int32_t t : w) {
      if (t < 0 || t >= vocab)
        fail("{}: token id {} is outside the model's vocabulary ({})", file.string(), t, vocab);
    }
    windows.push_back(w);
  }
  if (windows.empty()) fail("{}: fewer than --context {} tokens", file.string(), a.context);

  // Every position but the first of each window, the model reading the window itself.
  ProgressBar bar("[nll]", static_cast<int64_t>(windows.size()));
  double sum = 0;
  int64_t scored = 0;
  std::vector<float> logits;
  for (size_t i = 0; i < windows.size(); ++i) {
    const auto targets = static_cast<int64_t>(windows[i].size()) - 1;
    sum += window_nll(*model, windows[i], kv, logits) * static_cast<double>(targets);
    scored += targets;
    bar.update(static_cast<int64_t>(i + 1));
  }
  bar.finish();
  const double nll = sum / static_cast<double>(scored);
  nlohmann::json j = {{"model", a.model},
                      {"file", file.string()},
                      {"context", a.context},
                      {"windows", windows.size()},
                      {"kv_dtype", a.kv_dtype},
                      {"scored_tokens", scored},
                      {"nll", nll},
                      {"perplexity", std::exp(nll)}};

  // After a prefix: the model's own cache against the floors (DESIGN.md §6), the model being
  // both sender and receiver. A model that uses context beyond token identity does clearly
  // better from its own cache than from the token-identity cache.
  if (a.prefix > 0) {
    ConditionSet floors;
    add_floors(floors, *model, *floor);
    const TransferEval ev =
        evaluate_transfer(*model, *model, windows, a.prefix, floors.conditions, false);
    nlohmann::json after = {{"prefix", a.prefix},
                            {"scored_tokens", ev.scored_tokens},
                            {"own_cache_nll", ev.native_nll}};
    for (const ConditionScore& c : ev.conditions) {
      after[c.name == "zero cache" ? "zero_cache_nll" : "token_identity_cache_nll"] = c.nll;
    }
    after["token_identity_floor"] = floor->provenance();
    j["after_prefix"] = after;
  }
  if (a.json) {
    fmt::print("{}\n", j.dump());
    return;
  }
  fmt::print(
      "{}: mean NLL {:.4f} nats/token (perplexity {:.2f}) over {} tokens in {} windows "
      "of {}, {} K/V cache\n",
      a.model, nll, std::exp(nll), scored, windows.size(), a.context, a.kv_dtype);
  if (a.prefix > 0) {
    const auto& p = j["after_prefix"];
    fmt::print(
        "after a {}-token prefix ({} tokens scored): own cache {:.4f}, token-identity "
        "cache {:.4f}, zero cache {:.4f}\n",
        a.prefix, p["scored_tokens"].get<int64_t>(), p["own_cache_nll"].get<double>(),
        p["token_identity_cache_nll"].get<double>(), p["zero_cache_nll"].get<double>());
  }
}

struct NeedleArgs {
  std::string model, filler, needles;
  NeedleOptions opt;
  std::string kv_dtype = "f32";
  int threads = 2;
  bool json = false;
  bool show = false;
};

void run_needle(const NeedleArgs& a) {
  set_num_threads(a.threads);
  const KvDType kv = parse_kv_dtype(a.kv_dtype, "--kv-dtype");
  auto ladder = Ladder::single(a.model);  // one rung: the one decode loop
  if (ladder->tokenizer() == nullptr) fail("{}: no tokenizer files", a.model);
  const Tokenizer* tok = ladder->tokenizer();
  std::vector<NeedleItem> items;
  if (!a.needles.empty()) {
    items = read_needles(a.needles, a.opt.context, a.opt.count);
  } else {
    std::string filler = a.filler;
    if (filler.empty()) {
      // The tiny ladder ships its held-out split beside the rungs.
      const auto guess = std::filesystem::path(a.model).parent_path() / "data" / "test.txt";
      if (!std::filesystem::exists(guess)) {
        fail("no --filler given and {} does not exist; pass held-out prose with --filler",
             guess.string());
      }
      filler = guess.string();
    }
    items = make_needles(*tok, read_text_file(filler), a.opt);
  }
  int64_t correct = 0;
  double mean_tokens = 0;
  nlohmann::json rows = nlohmann::json::array();
  ProgressBar bar("[needle]", static_cast<int64_t>(items.size()));
  for (size_t i = 0; i < items.size(); ++i) {
    const NeedleItem& n = items[i];
    const std::vector<int32_t> prompt = tok->encode(n.prompt);
    const int64_t answer_tokens = static_cast<int64_t>(tok->encode(n.answer).size());
    if (prompt.empty() || answer_tokens == 0) fail("needle {}: empty prompt or answer", i);
    mean_tokens += static_cast<double>(prompt.size()) / static_cast<double>(items.size());
    const std::string got = tok->decode(greedy_answer(*ladder, 0, prompt, answer_tokens, kv));
    const bool ok = needle_answer_matches(got, n.answer);
    correct += ok;
    if (a.show) {
      rows.push_back({{"answer", n.answer},
                      {"got", got},
                      {"correct", ok},
                      {"prompt_tokens", prompt.size()},
                      {"depth", n.depth},
                      {"chat", n.chat}});
    }
    bar.update(static_cast<int64_t>(i + 1));
  }
  bar.finish();
  const double acc = static_cast<double>(correct) / static_cast<double>(items.size());
  nlohmann::json j = {{"model", a.model},
                      {"kv_dtype", a.kv_dtype},
                      {"context", a.opt.context},
                      {"count", items.size()},
                      {"seed", a.opt.seed},
                      {"source", a.needles.empty() ? "generated" : a.needles},
                      {"mean_prompt_tokens", mean_tokens},
                      {"correct", correct},
                      {"accuracy", acc}};
  if (a.show) j["needles"] = rows;
  if (a.json) {
    fmt::print("{}\n", j.dump());
    return;
  }
  if (a.show) {
    for (const auto& r : rows) {
      fmt::print("{} expected {:?} got {:?} ({} tokens, depth {:.2f})\n",
                 r["correct"].get<bool>() ? "ok  " : "MISS", r["answer"].get<std::string>(),
                 r["got"].get<std::string>(), r["prompt_tokens"].get<size_t>(),
                 r["depth"].get<double>());
    }
  }
  fmt::print(
      "{}: needle accuracy {:.3f} ({}/{}) at context {} (mean {:.0f} prompt tokens), {} K/V "
      "cache\n",
      a.model, acc, correct, items.size(), a.opt.context, mean_tokens, a.kv_dtype);
}

const bool registered = register_command([](CLI::App& root) {
  CLI::App* g = group(root, "eval", "A model's own quality: NLL on held-out text, needles");
  {
    auto a = std::make_shared<NllArgs>();
    CLI::App* s = g->add_subcommand("nll", "Mean NLL per token on held-out text");
    s->add_option("--model", a->model, "checkpoint directory")->required();
    s->add_option("--text-file", a->text_file, "held-out text (tokenized with the model's)");
    s->add_option("--ids-file", a->ids_file, "token ids, whitespace-separated");
    s->add_option("--context", a->context, "tokens per window")->check(CLI::Range(2, 1 << 20));
    s->add_option("--windows", a->windows, "at most this many windows (0: the whole file)")
        ->check(CLI::NonNegativeNumber);
    s->add_option("--prefix", a->prefix,
                  "also score the tokens after this prefix from the own, token-identity and "
                  "zero caches")
        ->check(CLI::NonNegativeNumber);
    s->add_option("--floor", a->floor_dir,
                  "with --prefix: the token-identity floor stored in this map directory");
    add_floor_flags(s, a->floor);
    s->add_option("--kv-dtype", a->kv_dtype, "K and V rows of the cache: f32 | f16 | int8");
    s->add_option("--threads", a->threads, "threads (0 = all cores)")
        ->check(CLI::NonNegativeNumber);
    s->add_flag("--json", a->json, "one JSON object");
    s->callback([a] { run_nll(*a); });
  }
  {
    auto a = std::make_shared<NeedleArgs>();
    CLI::App* s = g->add_subcommand(
        "needle", "Accuracy on planted-fact questions, the model reading the whole prompt");
    s->add_option("--model", a->model, "checkpoint directory (with its tokenizer)")->required();
    s->add_option("--context", a->opt.context, "prompt length in tokens, about")
        ->check(CLI::Range(64, 1 << 20));
    s->add_option("--count", a->opt.count, "needles")->check(CLI::Range(1, 100000));
    s->add_option("--seed", a->opt.seed, "fixes the generated set");
    s->add_option("--chat-every", a->opt.chat_every, "every n-th needle is a ChatML turn (0: none)")
        ->check(CLI::NonNegativeNumber);
    s->add_option("--filler", a->filler,
                  "held-out prose to plant facts in (default: DIR/../data/test.txt)");
    s->add_option("--needles", a->needles,
                  "read JSON lines {prompt, answer, context} instead of generating");
    s->add_option("--kv-dtype", a->kv_dtype, "K and V rows of the cache: f32 | f16 | int8");
    s->add_option("--threads", a->threads, "threads (0 = all cores)")
        ->check(CLI::NonNegativeNumber);
    s->add_flag("--show", a->show, "print every needle's answer");
    s->add_flag("--json", a->json, "one JSON object");
    s->callback([a] { run_needle(*a); });
  }
});

}  // namespace
}  // namespace molt::cli
