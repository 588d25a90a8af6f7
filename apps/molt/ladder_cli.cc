// Ladder-mode helpers for the CLI.
#include "ladder_cli.h"

#include <fmt/format.h>

#include <fstream>
#include <nlohmann/json.hpp>
#include <random>

#include "command.h"
#include "molt/common/error.h"
#include "molt/tokenizer/chat_template.h"
#include "molt/transfer/corpus.h"
#include "molt/transfer/fit.h"
#include "molt/transfer/map_file.h"

namespace molt::cli {
namespace {

void emit(std::FILE* out, const nlohmann::json& j) {
  fmt::print(out, "{}\n", j.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace));
  std::fflush(out);
}

}  // namespace

void add_ladder_flags(CLI::App* s, LadderFlags& f) {
  s->add_option("--ladder", f.ladder,
                "ladder manifest (ladder.json): generate on an elastic ladder");
  s->add_option("--trace", f.trace, "pressure trace (JSON) replayed as the memory budget");
  s->add_flag("--live", f.live, "take the budget from this machine (cgroup, PSI, MemAvailable)");
  s->add_option("--policy", f.policy,
                "hold | small | reprefill | release-reprefill | molt | heal | auto")
      ->check(CLI::IsMember(policy_names()));
  s->add_flag("--json", f.json, "one JSON event per line");
  s->add_flag("--measure", f.measure, "measure seam KL and RSS per migration (slower seams)");
  s->add_option("--grace", f.grace, "hold: budget checks over budget before it is killed");
  s->add_option("--up-margin", f.up_margin, "move up only with this much headroom (fraction)");
  s->add_option("--up-after", f.up_after, "... sustained for this many checks");
  s->add_option("--prefill-chunk", f.prefill_chunk, "tokens per prefill call")
      ->check(CLI::PositiveNumber);
  s->add_option("--heal-chunk", f.heal_chunk, "heal: positions per decode step")
      ->check(CLI::PositiveNumber);
  s->add_option("--anchors", f.anchors, "molt: last context tokens re-run natively");
  s->add_option("--recompute-layers", f.recompute_layers,
                "molt: receiver layers recomputed natively");
}

SessionOptions session_options(const LadderFlags& f) {
  SessionOptions o;
  o.policy = parse_policy(f.policy);
  o.grace_steps = f.grace;
  o.up_margin = f.up_margin;
  o.up_after = f.up_after;
  o.prefill_chunk = f.prefill_chunk;
  o.heal_chunk = f.heal_chunk;
  o.transfer.anchors = f.anchors;
  o.transfer.recompute_layers = f.recompute_layers;
  o.measure_seams = o.measure_rss = f.measure;
  return o;
}

std::vector<int32_t> encode_prompt(const Ladder& ladder, const std::string& text, bool chat,
                                   const std::string& ids, std::vector<int32_t>* stop_ids) {
  if (!ids.empty()) return parse_ids(ids, "--ids");
  if (text.empty()) fail("give the prompt with --prompt TEXT (or --ids)");
  const Tokenizer* tok = ladder.tokenizer();
  if (tok == nullptr) {
    fail("--prompt: ladder {} has no tokenizer files ({}); give token ids with --ids",
         ladder.manifest().file.string(), ladder.tokenizer_note());
  }
  if (!chat) return tok->encode(text);
  const int32_t im_end = tok->token_id("<|im_end|>");
  if (im_end < 0 || tok->token_id("<|im_start|>") < 0) {
    fail("--chat: the ladder's tokenizer has no <|im_start|> / <|im_end|> tokens");
  }
  if (stop_ids) stop_ids->push_back(im_end);
  return tok->encode(apply_chat_template({{"user", text, {}}}, true));
}

void fit_missing_maps(const Ladder& l, std::FILE* log) {
  const std::filesystem::path corpus = l.manifest().file.parent_path() / "random-ids.txt";
  {
    std::ofstream f(corpus);
    std::mt19937 rng(5);
    for (int i = 0; i < 16 * 64 + 8; ++i) f << rng() % static_cast<uint32_t>(l.vocab_size()) << ' ';
  }
  for (const ManifestRoute& r : l.manifest().routes) {
    if (r.method != "maps" || r.maps_present()) continue;
    auto s = Model::load(l.rung(l.index(r.from)).path()),
         d = Model::load(l.rung(l.index(r.to)).path());
    FitOptions fo;
    fo.sequences = 16;
    fo.seq_len = 64;
    fo.stride = 2;
    fo.heldout_every = 4;
    fo.select_windows = 2;
    fo.corpus_name = "random ids";
    fo.sender_name = r.from;
    fo.receiver_name = r.to;
    auto stream = TokenStream::ids(corpus);
    const RouteStats st = collect_stats(*s, *d, *stream, fo);
    write_map_dir(r.maps, solve_route(st, *s, *d, fo));
    if (log)
      fmt::print(log, "fitted {} → {} on random ids into {}\n", r.from, r.to, r.maps.string());
  }
}

void print_ladder(std::FILE* out, const Ladder& l, int64_t context) {
  for (int i = 0; i < l.size(); ++i) {
    const Rung& r = l.rung(i);
    const ModelConfig& c = r.config();
    const Footprint& f = r.footprint();
    constexpr double M = 1024.0 * 1024.0;
    fmt::print(out,
               "  {:<4} {:<5} {} layers × {} hidden, {} heads × {} (kv {}): weights {:.1f} MiB, "
               "KV {:.1f} KiB/token, scratch {:.1f} MiB → {:.1f} MiB at {} tokens\n",
               r.name(), r.precision(), c.num_hidden_layers, c.hidden_size, c.num_attention_heads,
               c.head_dim, c.num_key_value_heads, (f.weight_bytes + f.heap_weight_bytes) / M,
               f.kv_bytes_per_token / 1024.0, f.scratch_bytes / M, f.total(context) / M, context);
  }
}

void StreamPrinter::line(const std::string& s) {
  if (mid_line_) fmt::print(out_, "\n");
  fmt::print(out_, "{}\n", s);
  mid_line_ = false;
  std::fflush(out_);
}

void StreamPrinter::on_token(const TokenEvent& e) {
  if (!mid_line_ || e.rung != rung_) {
    if (mid_line_) fmt::print(out_, "\n");
    fmt::print(out_, "[{}] ", e.rung);
    rung_ = e.rung;
    mid_line_ = true;
  }
  fmt::print(out_, "{}", e.text);
  std::fflush(out_);
}

void StreamPrinter::on_migration(const MigrationEvent& e) {
  line(describe(e));
  if (!e.note.empty()) line("    " + e.note);
}

void StreamPrinter::on_budget(const BudgetEvent& e) {
  line(fmt::format("── budget {:.1f} MiB", e.mib));
}

void StreamPrinter::on_park(const ParkEvent& e) {
  line(fmt::format(
      "⏸ parked{}: budget {:.1f} MiB < {:.1f} MiB (smallest rung); weights released, cache kept",
      e.rung.empty() ? "" : " " + e.rung, e.budget_mib, e.need_mib));
}

void StreamPrinter::on_resume(const ResumeEvent& e) {
  line(fmt::format("▶ resumed on {} after {} checks ({:.0f} ms)", e.rung, e.waited_steps,
                   e.waited_ms));
}

void StreamPrinter::on_heal(const HealEvent& e) {
  line(fmt::format(
      "✚ healed {}: {} positions re-prefilled natively over {} decode steps ({:.0f} ms)", e.rung,
      e.positions, e.steps, e.ms));
}

void StreamPrinter::on_done(const DoneEvent& e) {
  if (!e.tail.empty()) fmt::print(out_, "{}", e.tail);
  line(
      fmt::format("done: {} tokens · rungs {} · {} migrations ({:.0f} ms) · {} parks · "
                  "peak {:.1f} MiB · killed={}",
                  e.tokens, fmt::join(e.rungs_used, ", "), e.migrations, e.migration_ms, e.parks,
                  e.peak_mib, e.killed));
}

void JsonPrinter::on_token(const TokenEvent& e) {
  emit(out_, to_json(e));
}
void JsonPrinter::on_migration(const MigrationEvent& e) {
  emit(out_, to_json(e));
}
void JsonPrinter::on_budget(const BudgetEvent& e) {
  emit(out_, to_json(e));
}
void JsonPrinter::on_park(const ParkEvent& e) {
  emit(out_, to_json(e));
}
void JsonPrinter::on_resume(const ResumeEvent& e) {
  emit(out_, to_json(e));
}
void JsonPrinter::on_heal(const HealEvent& e) {
  emit(out_, to_json(e));
}
void JsonPrinter::on_done(const DoneEvent& e) {
  emit(out_, to_json(e));
}

}  // namespace molt::cli
