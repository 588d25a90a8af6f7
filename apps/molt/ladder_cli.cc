// Ladder-mode helpers for the CLI.
#include "ladder_cli.h"

#include <fmt/format.h>

#include "command.h"
#include "molt/common/error.h"
#include "molt/runtime/prompt.h"
#include "molt/runtime/route_setup.h"

namespace molt::cli {

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
  s->add_option("--kv-dtype", f.kv_dtype, "K and V rows of the cache: f16 | f32 | int8")
      ->check(CLI::IsMember({"f32", "f16", "int8"}))
      ->capture_default_str();
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
  o.kv_dtype = parse_kv_dtype(f.kv_dtype, "--kv-dtype");
  o.transfer.anchors = f.anchors;
  o.transfer.recompute_layers = f.recompute_layers;
  o.measure_seams = o.measure_rss = f.measure;
  o.validate();
  return o;
}

std::vector<int32_t> encode_prompt(const Ladder& ladder, const std::string& text, bool chat,
                                   const std::string& ids, std::vector<int32_t>* stop_ids) {
  if (!ids.empty()) return prompt_from_ids(ladder, parse_ids(ids, "--ids"), "--ids").ids;
  if (text.empty()) fail("give the prompt with --prompt TEXT (or --ids)");
  Prompt p = chat ? encode_chat(ladder, {{"user", text}}, "--chat")
                  : encode_text(ladder, text, "--prompt");
  if (stop_ids) stop_ids->insert(stop_ids->end(), p.stop_ids.begin(), p.stop_ids.end());
  return std::move(p.ids);
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

}  // namespace molt::cli
