// molt transfer heal: needle accuracy when the question arrives h tokens after the switch, for
// the receiver reading everything itself, the map alone and the map + heal, and what heal's
// chunk schedules cost (bench/heal_needles.h).
#include <fmt/core.h>
#include <fmt/format.h>

#include <nlohmann/json.hpp>

#include "cmd_transfer_util.h"
#include "command.h"
#include "molt/bench/heal_needles.h"
#include "molt/bench/transfer_report.h"
#include "molt/common/error.h"
#include "molt/kernels/threads.h"
#include "molt/transfer/map_file.h"

namespace molt::cli {
namespace {

struct HealArgs {
  std::string from, to, maps, needles, filler;
  int64_t context = 700, count = 30;
  HealNeedleOptions opt;
  int threads = 2;
  bool json = false;
};

void run(const HealArgs& a) {
  set_num_threads(a.threads);
  auto sender = Ladder::single(a.from), receiver = Ladder::single(a.to);
  sender->rung(0).load();
  receiver->rung(0).load();
  auto map = CacheMap::load(a.maps, sender->rung(0).model(), receiver->rung(0).model());
  auto tok = Tokenizer::load(a.from);
  const std::vector<HealNeedle> needles =
      split_needles(*tok, read_needles(a.needles, a.context, a.count));
  const std::vector<int32_t> filler = tok->encode(read_text_file(a.filler));
  ProgressBar bar("[heal]", static_cast<int64_t>(needles.size()));
  nlohmann::json j = measure_heal_needles(*sender, *receiver, *map, *tok, needles, filler, a.opt,
                                          [&](int64_t done, int64_t) { bar.update(done); });
  bar.finish();
  j["from"] = a.from;
  j["to"] = a.to;
  j["maps"] = a.maps;
  j["needles"] = a.needles;
  j["filler"] = a.filler;
  j["context"] = a.context;
  j["count"] = needles.size();
  j["layers"] = receiver->rung(0).config().num_hidden_layers;
  // Layers the map ran natively at the seam: heal re-runs the others.
  j["native_layers"] = map->data().features.native_layers;
  if (a.json) {
    j["sha256"] = transfer_run_sha256(a.from, a.to, a.maps, a.needles);
    j["sha256"]["filler"] = {
        {std::filesystem::path(a.filler).filename().string(), sha256_file(a.filler)}};
    fmt::print("{}\n", j.dump());
    return;
  }
  fmt::print(
      "{} → {} with {}: {} needles at context {}; the switch after each needle's body, the "
      "question after h tokens of held-out prose; heal in chunks of {}\n",
      rung_name(a.from), rung_name(a.to), a.maps, needles.size(), a.context, a.opt.chunk);
  fmt::print("{:>5} {:>7} {:>8} {:>8} {:>8} {:>14}\n", "h", "tokens", "native", "molt", "heal",
             "healed first");
  for (const auto& r : j["rows"]) {
    fmt::print("{:>5} {:>7.0f} {:>8.3f} {:>8.3f} {:>8.3f} {:>11}/{}\n", r["h"].get<int64_t>(),
               r["mean_prompt_tokens"].get<double>(), r["native"]["accuracy"].get<double>(),
               r["molt"]["accuracy"].get<double>(), r["heal"]["accuracy"].get<double>(),
               r["healed_before_answer"].get<int64_t>(), needles.size());
  }
  fmt::print("{:>6} {:>16} {:>18} {:>20} {:>14}\n", "chunk", "steps to native", "heal ms per step",
             "decode ms per step", "heal ms total");
  for (const auto& c : j["cost"]) {
    fmt::print("{:>6} {:>16.1f} {:>18.2f} {:>20.2f} {:>14.1f}\n", c["chunk"].get<int64_t>(),
               c["steps_to_native"].get<double>(), c["heal_ms_per_step"].get<double>(),
               c["decode_ms_per_step"].get<double>(), c["heal_ms_total"].get<double>());
  }
}

const bool registered = register_command([](CLI::App& root) {
  auto a = std::make_shared<HealArgs>();
  CLI::App* s = group(root, "transfer", "Carry a KV cache between rungs")
                    ->add_subcommand("heal", "Needle accuracy h tokens after a switch, with heal");
  s->add_option("--from", a->from, "sender checkpoint directory (its tokenizer is used)")
      ->required();
  s->add_option("--to", a->to, "receiver checkpoint directory")->required();
  s->add_option("--maps", a->maps, "map directory")->required();
  s->add_option("--needles", a->needles, "JSON lines {prompt, answer, context}")->required();
  s->add_option("--filler", a->filler, "held-out prose the h tokens are cut from")->required();
  s->add_option("--context", a->context, "use the needles of this context length");
  s->add_option("--count", a->count, "at most this many needles")->check(CLI::PositiveNumber);
  s->add_option("--after", a->opt.after, "h: tokens between the switch and the question (list)")
      ->delimiter(',')
      ->check(CLI::NonNegativeNumber);
  s->add_option("--chunk", a->opt.chunk, "heal chunk (positions per decode step) of the rows")
      ->check(CLI::PositiveNumber);
  s->add_option("--cost-chunks", a->opt.cost_chunks, "chunks whose cost is timed (list)")
      ->delimiter(',')
      ->check(CLI::PositiveNumber);
  s->add_option("--cost-needles", a->opt.cost_needles, "needles each cost chunk is timed on")
      ->check(CLI::NonNegativeNumber);
  s->add_option("--threads", a->threads, "threads (0 = all cores)")->check(CLI::NonNegativeNumber);
  s->add_flag("--json", a->json, "one JSON object");
  s->callback([a] { run(*a); });
});

}  // namespace
}  // namespace molt::cli
