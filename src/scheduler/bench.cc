// The tenants bench: a scenario of tenants under a trace, run round by round, its timeline and
// summary as JSON (the SVG is svg.cc).
#include "molt/scheduler/bench.h"

#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <sstream>

#include "molt/common/error.h"
#include "molt/kernels/threads.h"
#include "molt/pressure/budget.h"
#include "molt/runtime/policy.h"
#include "molt/runtime/prompt.h"

namespace molt::sched {
namespace {

using json = nlohmann::json;

const char* const kChats[] = {
    "Tell me a short story about a lighthouse keeper and a storm.",
    "What should I pack for a week of hiking in the mountains?",
};
const char* const kDocuments[] = {
    "Summarise: The river rose through the night, and by morning the old bridge was gone. The "
    "town gathered on the bank to watch the water carry fences, boats and a red door downstream.",
    "Summarise: A small bakery opened on the corner last spring. It sells bread before dawn, "
    "closes at noon, and has a queue every day that stretches past the bookshop next door.",
    "Summarise: The committee met on Tuesday to discuss the new library hours, the budget for "
    "repairs to the roof, and a proposal to open a reading room for children on weekends.",
};

// Chat through the template where the tokenizer has one, else plain text; ids 1.. without one.
std::vector<int32_t> prompt_ids(const Ladder& l, Priority p, size_t i) {
  const bool fg = p == Priority::kForeground;
  const std::string text =
      fg ? kChats[i % std::size(kChats)] : kDocuments[i % std::size(kDocuments)];
  if (l.tokenizer() == nullptr) {
    std::vector<int32_t> ids(24 + 8 * (i % 3));
    for (size_t k = 0; k < ids.size(); ++k)
      ids[k] = static_cast<int32_t>((k * 37 + 11 * i + 1) % static_cast<size_t>(l.vocab_size()));
    return ids;
  }
  if (fg) {
    try {
      return encode_chat(l, {{"user", text}}).ids;
    } catch (const Error&) {
      // no chat template tokens: plain text
    }
  }
  return encode_text(l, text).ids;
}

int64_t parse_int(const std::string& s, const std::string& item, const char* what) {
  size_t used = 0;
  int64_t v = 0;
  try {
    v = std::stoll(s, &used);
  } catch (const std::exception&) {
    used = 0;
  }
  if (used != s.size() || s.empty() || v < 0)
    fail("--tenants: '{}': {} '{}' is not a non-negative integer", item, what, s);
  return v;
}

}  // namespace

std::vector<TenantSpec> parse_tenants(const std::string& spec, const Ladder& ladder,
                                      const SessionOptions& base) {
  std::vector<TenantSpec> out;
  std::stringstream in(spec);
  std::string item;
  size_t n_fg = 0, n_bg = 0;
  while (std::getline(in, item, ',')) {
    if (item.empty()) fail("--tenants: empty item in '{}' (expected fg|bg[:TOKENS][@ROUND])", spec);
    TenantSpec t;
    t.options = base;
    std::string head = item;
    if (const size_t at = head.find('@'); at != std::string::npos) {
      t.arrival = parse_int(head.substr(at + 1), item, "arrival round");
      head = head.substr(0, at);
    }
    if (const size_t colon = head.find(':'); colon != std::string::npos) {
      t.options.max_tokens = parse_int(head.substr(colon + 1), item, "token count");
      head = head.substr(0, colon);
    }
    if (head != "fg" && head != "bg")
      fail("--tenants: '{}': priority '{}' is not fg or bg", item, head);
    t.priority = head == "fg" ? Priority::kForeground : Priority::kBackground;
    const size_t k = t.priority == Priority::kForeground ? n_fg++ : n_bg++;
    t.name = fmt::format("{}{}", t.priority == Priority::kForeground ? "chat" : "batch", k);
    t.prompt = prompt_ids(ladder, t.priority, k);
    out.push_back(std::move(t));
  }
  if (out.empty()) fail("--tenants: no tenants in '{}'", spec);
  return out;
}

namespace {

json counts_json(const LeverCounts& c) {
  return {{"defer", c.defer}, {"admit", c.admit}, {"demote", c.demote}, {"promote", c.promote},
          {"park", c.park},   {"wake", c.wake},   {"shed", c.shed}};
}

void add_counts(LeverCounts& total, const LeverCounts& c) {
  total.defer += c.defer;
  total.admit += c.admit;
  total.demote += c.demote;
  total.promote += c.promote;
  total.park += c.park;
  total.wake += c.wake;
  total.shed += c.shed;
}

json round_json(const RoundRecord& r, const Scheduler& s) {
  json tenants = json::array();
  for (size_t i = 0; i < r.tenants.size(); ++i) {
    const TenantRound& t = r.tenants[i];
    tenants.push_back({{"name", s.tenant(i).name},
                       {"state", state_name(t.state)},
                       {"rung", t.rung >= 0 ? json(s.ladder().rung(t.rung).name()) : json(nullptr)},
                       {"tokens", t.tokens}});
  }
  const auto num = [](double x) { return std::isfinite(x) ? json(x) : json(nullptr); };
  return {{"round", r.round},
          {"budget_mib", num(r.budget_mib)},
          {"predicted_mib", r.predicted_mib},
          {"accounted_mib", r.accounted_mib},
          {"rss_mib", num(r.rss_mib)},
          {"accounted_minus_rss_mib", num(r.accounted_mib - r.rss_mib)},
          {"overshoot_mib", num(r.overshoot_mib)},
          {"fits", r.fits},
          {"lever", lever_name(r.lever)},
          {"levers", counts_json(r.counts)},
          {"tenants", tenants}};
}

json tenant_summary(const TenantStatus& t) {
  const double s = t.step_ms / 1000.0;
  return {{"name", t.name},
          {"priority", priority_name(t.priority)},
          {"tokens", t.tokens()},
          {"max_tokens", t.max_tokens},
          {"finished", t.state == TenantState::kFinished},
          {"done", t.done_reason},
          {"tok_s", t.ms_admitted > 0 ? t.tokens() / (t.ms_admitted / 1000.0) : 0.0},
          {"tok_s_stepping", s > 0 ? t.tokens() / s : 0.0},
          {"arrival", t.arrival},
          {"admitted_round", t.admitted_round},
          {"finished_round", t.finished_round},
          {"rounds_deferred", t.rounds_deferred},
          {"rounds_suspended", t.rounds_suspended},
          {"ms_deferred", t.ms_deferred},
          {"ms_suspended", t.ms_suspended},
          {"migrations", t.migrations},
          {"sheds", t.sheds},
          {"rereads", t.rereads},
          {"rungs_used", t.rungs_used},
          {"killed", t.killed}};
}

json summary_json(const std::vector<RoundRecord>& rounds, const Scheduler& s, double wall_s) {
  LeverCounts total;
  json lever_rounds = {{"none", 0}, {"defer", 0}, {"demote", 0}, {"park", 0}, {"shed", 0}};
  double overshoot = -INFINITY, diff_sum = 0, diff_max = 0;
  int64_t over_where_fits = 0;
  for (const RoundRecord& r : rounds) {
    add_counts(total, r.counts);
    lever_rounds[lever_name(r.lever)] = lever_rounds[lever_name(r.lever)].get<int64_t>() + 1;
    overshoot = std::max(overshoot, r.overshoot_mib);
    if (r.fits && r.overshoot_mib > 1e-9) ++over_where_fits;
    const double d = r.accounted_mib - r.rss_mib;
    diff_sum += d;
    diff_max = std::max(diff_max, std::abs(d));
  }
  json tenants = json::array();
  int64_t killed = 0;
  bool all_finished = s.done();
  for (size_t i = 0; i < s.size(); ++i) {
    tenants.push_back(tenant_summary(s.tenant(i)));
    killed += s.tenant(i).killed ? 1 : 0;
  }
  const double n = static_cast<double>(std::max<size_t>(1, rounds.size()));
  return {{"rounds", rounds.size()},
          {"max_overshoot_mib", rounds.empty() ? 0.0 : overshoot},
          {"rounds_over_budget_where_fits", over_where_fits},
          {"levers", counts_json(total)},
          {"rounds_by_lever", lever_rounds},
          {"killed", killed},
          {"all_finished", all_finished},
          {"accounted_minus_rss_mib", {{"mean", diff_sum / n}, {"max_abs", diff_max}}},
          {"wall_s", wall_s},
          {"tenants", tenants}};
}

}  // namespace

json run_tenants_bench(const TenantsBenchOptions& o) {
  set_num_threads(o.threads);
  auto ladder = Ladder::open(o.ladder);
  TraceBudget budget(PressureTrace::load(o.trace));
  SessionOptions base;
  base.policy = parse_policy(o.policy);
  base.sampling.temperature = 0;  // greedy: a run repeats exactly
  base.stop_at_eos = false;
  SchedulerConfig cfg;
  cfg.measure_rss = true;
  Scheduler s(*ladder, &budget, cfg);
  for (TenantSpec& t : parse_tenants(o.tenants, *ladder, base)) s.add(std::move(t));
  const auto t0 = std::chrono::steady_clock::now();
  std::vector<RoundRecord> rounds;
  while (!s.done() && s.rounds() < o.max_rounds) rounds.push_back(s.round());
  const double wall_s =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  json timeline = json::array();
  for (const RoundRecord& r : rounds) timeline.push_back(round_json(r, s));
  json rungs = json::array();
  for (int r = 0; r < ladder->size(); ++r) rungs.push_back(ladder->rung(r).name());
  return {{"ladder", o.ladder.string()},
          {"trace", o.trace.string()},
          {"tenants_spec", o.tenants},
          {"policy", o.policy},
          {"threads", o.threads},
          {"reference_mib", s.reference_mib()},
          {"rungs", rungs},
          {"rounds", timeline},
          {"summary", summary_json(rounds, s, wall_s)}};
}

std::string summary_table(const json& result) {
  const json& s = result["summary"];
  std::string out = fmt::format(
      "{} rounds · max overshoot {:.2f} MiB · killed {} · all finished {} · accounted − RSS "
      "mean {:.2f} MiB (max |·| {:.2f})\n",
      s["rounds"].get<int64_t>(), s["max_overshoot_mib"].get<double>(), s["killed"].get<int64_t>(),
      s["all_finished"].get<bool>(), s["accounted_minus_rss_mib"]["mean"].get<double>(),
      s["accounted_minus_rss_mib"]["max_abs"].get<double>());
  const json& l = s["levers"];
  out += fmt::format(
      "levers: defer {} · demote {} · park {} · shed {} · admit {} · wake {} · "
      "promote {}\n",
      l["defer"].get<int64_t>(), l["demote"].get<int64_t>(), l["park"].get<int64_t>(),
      l["shed"].get<int64_t>(), l["admit"].get<int64_t>(), l["wake"].get<int64_t>(),
      l["promote"].get<int64_t>());
  out +=
      fmt::format("{:<8} {:<10} {:>6} {:>8} {:>9} {:>10} {:>5} {:>5}  {}\n", "tenant", "priority",
                  "tokens", "tok/s", "deferred", "suspended", "migr", "shed", "rungs");
  for (const json& t : s["tenants"]) {
    out += fmt::format(
        "{:<8} {:<10} {:>6} {:>8.1f} {:>9} {:>10} {:>5} {:>5}  {}\n", t["name"].get<std::string>(),
        t["priority"].get<std::string>(), t["tokens"].get<int64_t>(), t["tok_s"].get<double>(),
        t["rounds_deferred"].get<int64_t>(), t["rounds_suspended"].get<int64_t>(),
        t["migrations"].get<int64_t>(), t["sheds"].get<int64_t>(),
        fmt::format("{}", fmt::join(t["rungs_used"].get<std::vector<std::string>>(), " ")));
  }
  return out;
}

}  // namespace molt::sched
