#include "molt/bench/conditions_bench.h"

#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <map>
#include <memory>
#include <nlohmann/json.hpp>

#include "molt/bench/needles.h"
#include "molt/common/error.h"
#include "molt/formats/hf_config.h"
#include "molt/pressure/budget.h"
#include "molt/pressure/trace.h"
#include "molt/runtime/generation.h"
#include "molt/tokenizer/tokenizer.h"
#include "molt/transfer/eval.h"

namespace molt {
namespace {

using json = nlohmann::json;
using Clock = std::chrono::steady_clock;

// splitmix64: the same resamples on every platform (no std distributions).
uint64_t next(uint64_t& s) {
  uint64_t z = (s += 0x9E3779B97F4A7C15ull);
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}

double median_of(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  const size_t n = v.size();
  return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

json num(double v) {
  return std::isfinite(v) ? json(v) : json(nullptr);
}

// The first answer token at which the trace leaves less than the top rung's room: the answer
// from there on is what pressure can change (the same span for every policy).
int64_t pressure_start(const PressureTrace& t, int64_t max_tokens) {
  // (A trace in MiB: its first change.)
  for (const TracePoint& p : t.points) {
    if (p.relative ? p.value < 1.0 : p.at > 0) {
      return std::min<int64_t>(std::llround(p.at), max_tokens);
    }
  }
  return max_tokens;
}

struct Baseline {
  std::vector<int32_t> answer;  // no pressure, the top rung throughout
};

// One generation under one policy and trace, stepped through the one loop.
json run_one(Ladder& ladder, const Model& top, const BenchPrompt& prompt,
             const PressureTrace& trace, Policy policy, const TransferOptions& transfer,
             const ConditionsOptions& o, const Baseline& base, int64_t span_from) {
  TraceBudget budget(trace);
  SessionOptions so;
  so.policy = policy;
  so.transfer = transfer;
  so.max_tokens = o.max_tokens;
  so.stop_at_eos = false;
  so.measure_seams = true;
  Generation g(ladder, &budget, prompt.ids, so);
  EventLog log;
  std::map<std::string, std::vector<double>> decode_ms;  // plain decode steps, by rung
  json series = json::array();
  double budget_now = NAN;
  for (int64_t step = 0; !g.finished(); ++step) {
    const bool healing = g.heal_progress().active;  // this step also runs a heal chunk
    const Clock::time_point t0 = Clock::now();
    const Step s = g.step();
    const double ms = std::chrono::duration<double, std::milli>(Clock::now() - t0).count();
    emit(s, log);
    if (s.budget) budget_now = s.budget->mib;
    if (s.kind == StepKind::kToken && s.token && !s.migration && !s.resume && !healing &&
        step > 0) {
      decode_ms[s.token->rung].push_back(ms);
    }
    // After the last token the generation holds nothing; a kill is worth seeing, an end is not.
    if (!g.finished() || log.done.killed) {
      series.push_back({step, num(std::round(budget_now * 1e3) / 1e3),
                        std::round(g.used_mib() * 1e3) / 1e3, g.parked() ? "" : g.rung_name()});
    }
  }
  ladder.release_unused();

  // Tokens lost or duplicated: the stream's indices must be 0, 1, 2, ... with nothing skipped.
  int64_t lost = 0, duplicated = 0, expect = 0;
  for (const TokenEvent& t : log.tokens) {
    if (t.index > expect) lost += t.index - expect;
    if (t.index < expect) ++duplicated;
    expect = std::max(expect, t.index + 1);
  }
  const auto answer = g.answer();
  if (static_cast<int64_t>(answer.size()) != expect)
    lost += std::abs(static_cast<int64_t>(answer.size()) - expect);

  json seams = json::array();
  double max_stall = NAN, max_steps = NAN, kl_sum = 0, tkl_sum = 0;
  int kl_n = 0, tkl_n = 0;
  for (const MigrationEvent& m : log.migrations) {
    const auto it = decode_ms.find(m.to);
    const double step_ms =
        it == decode_ms.end() || it->second.empty() ? NAN : median_of(it->second);
    const double steps = m.ms / step_ms;
    seams.push_back({{"from", m.from},
                     {"to", m.to},
                     {"policy", m.policy},
                     {"at_token", m.at_token},
                     {"context", m.context},
                     {"ms", m.ms},
                     {"decode_steps", num(steps)},
                     {"seam_kl", num(m.seam_kl)},
                     {"transfer_kl", num(m.transfer_kl)},
                     {"peak_mib", m.peak_mib},
                     {"budget_mib", m.budget_mib},
                     {"note", m.note}});
    if (m.direction != "down") continue;  // the stall a squeeze causes; recoveries re-read up
    max_stall = std::isfinite(max_stall) ? std::max(max_stall, m.ms) : m.ms;
    if (std::isfinite(steps))
      max_steps = std::isfinite(max_steps) ? std::max(max_steps, steps) : steps;
    if (std::isfinite(m.seam_kl)) kl_sum += m.seam_kl, ++kl_n;
    if (std::isfinite(m.transfer_kl)) tkl_sum += m.transfer_kl, ++tkl_n;
  }

  // Quality after the pressure began: the top rung's NLL of the answer from span_from on
  // (read natively, prompt + answer), and agreement with the answer without pressure.
  double nll = NAN, agree = NAN;
  const int64_t A = static_cast<int64_t>(answer.size());
  if (!log.done.killed && A > span_from) {
    std::vector<int32_t> seq(prompt.ids);
    seq.insert(seq.end(), answer.begin(), answer.end() - 1);
    const int64_t vocab = top.config().vocab_size, P = static_cast<int64_t>(prompt.ids.size());
    KVCache c = top.new_cache(static_cast<int64_t>(seq.size()));
    std::vector<float> logits(seq.size() * static_cast<size_t>(vocab));
    top.forward(seq, c, logits);
    const size_t first = static_cast<size_t>(P + span_from - 1);
    nll = mean_nll(std::span<const float>(logits).subspan(first * static_cast<size_t>(vocab)),
                   answer.subspan(static_cast<size_t>(span_from)), vocab);
    int64_t same = 0;
    for (int64_t j = span_from; j < A; ++j) {
      same += j < static_cast<int64_t>(base.answer.size()) && answer[j] == base.answer[j];
    }
    agree = static_cast<double>(same) / static_cast<double>(A - span_from);
  }
  return {{"condition", policy_name(policy)},
          {"policy", policy_name(policy)},
          {"trace", trace.name},
          {"prompt", prompt.name},
          {"killed", log.done.killed},
          {"tokens", A},
          {"lost", lost},
          {"duplicated", duplicated},
          {"parks", log.done.parks},
          {"migrations", log.migrations.size()},
          {"max_stall_ms", num(max_stall)},
          {"max_stall_steps", num(max_steps)},
          {"seam_kl", num(kl_n ? kl_sum / kl_n : NAN)},
          {"transfer_kl", num(tkl_n ? tkl_sum / tkl_n : NAN)},
          {"nll_after_pressure", num(nll)},
          {"agreement", num(agree)},
          {"peak_mib", log.done.peak_mib},
          {"max_overshoot_mib", log.done.max_overshoot_mib},
          {"rungs", log.done.rungs_used},
          {"seams", seams},
          {"series", series}};
}

json spread_json(const Spread& s) {
  if (s.n == 0) return nullptr;
  return {{"median", s.median}, {"lo", s.lo}, {"hi", s.hi}, {"n", s.n}};
}

// The runs of `condition` on `trace` ("all": every trace), in run order.
std::vector<const json*> rows_of(const json& runs, const std::string& condition,
                                 const std::string& trace) {
  std::vector<const json*> out;
  for (const json& r : runs) {
    if (r.at("condition") == condition && (trace == "all" || r.at("trace") == trace)) {
      out.push_back(&r);
    }
  }
  return out;
}

// An ablation against its baseline, run by run (same trace and prompt): the spread of the
// differences of the figures a transfer mechanism moves.
json paired(const std::vector<const json*>& a, const std::vector<const json*>& b,
            const ConditionsOptions& o) {
  json out = json::object();
  for (const char* key : {"max_stall_ms", "transfer_kl", "nll_after_pressure", "agreement"}) {
    std::vector<double> d;
    for (size_t i = 0; i < a.size() && i < b.size(); ++i) {
      const json &x = a[i]->at(key), &y = b[i]->at(key);
      if (x.is_number() && y.is_number()) d.push_back(x.get<double>() - y.get<double>());
    }
    out[key] = spread_json(bootstrap_median(d, o.bootstrap, o.seed));
  }
  return out;
}

json summarize(const std::vector<const json*>& runs, const ConditionsOptions& o) {
  auto column = [&](const char* key) {
    std::vector<double> xs;
    for (const json* r : runs) {
      const json& v = r->at(key);
      if (v.is_number()) xs.push_back(v.get<double>());
    }
    return spread_json(bootstrap_median(xs, o.bootstrap, o.seed));
  };
  int64_t killed = 0, lost = 0, dup = 0, over = 0;
  double worst = 0;
  for (const json* r : runs) {
    killed += r->at("killed").get<bool>();
    lost += r->at("lost").get<int64_t>();
    dup += r->at("duplicated").get<int64_t>();
    const double ov = r->at("max_overshoot_mib").get<double>();
    over += ov > 0;
    worst = std::max(worst, ov);
  }
  return {{"runs", runs.size()},
          {"killed", killed},
          {"lost", lost},
          {"duplicated", dup},
          {"overshooting_runs", over},
          {"worst_overshoot_mib", worst},
          {"max_stall_ms", column("max_stall_ms")},
          {"max_stall_steps", column("max_stall_steps")},
          {"seam_kl", column("seam_kl")},
          {"transfer_kl", column("transfer_kl")},
          {"nll_after_pressure", column("nll_after_pressure")},
          {"agreement", column("agreement")},
          {"peak_mib", column("peak_mib")}};
}

}  // namespace

Spread bootstrap_median(std::vector<double> xs, int resamples, uint64_t seed) {
  Spread s;
  xs.erase(std::remove_if(xs.begin(), xs.end(), [](double x) { return !std::isfinite(x); }),
           xs.end());
  s.n = static_cast<int64_t>(xs.size());
  if (xs.empty()) return s;
  s.median = median_of(xs);
  std::vector<double> meds, draw(xs.size());
  uint64_t state = seed;
  for (int b = 0; b < resamples; ++b) {
    for (double& d : draw) d = xs[next(state) % xs.size()];
    meds.push_back(median_of(draw));
  }
  std::sort(meds.begin(), meds.end());
  if (meds.empty()) {
    s.lo = s.hi = s.median;
    return s;
  }
  const auto at = [&](double q) {
    return meds[std::min(meds.size() - 1,
                         static_cast<size_t>(q * static_cast<double>(meds.size())))];
  };
  s.lo = at(0.025);
  s.hi = at(0.975);
  return s;
}

std::vector<BenchPrompt> bench_prompts(const Tokenizer& tok, const std::string& text_file,
                                       const std::string& needles_file, int prose, int chat,
                                       int64_t chat_context) {
  std::vector<BenchPrompt> out;
  const std::string text = read_text_file(text_file);
  std::vector<std::vector<int32_t>> paragraphs;
  for (size_t at = 0; at < text.size();) {
    size_t end = text.find("\n\n", at);
    if (end == std::string::npos) end = text.size();
    std::vector<int32_t> ids = tok.encode(text.substr(at, end - at));
    if (ids.size() >= 48) {
      if (ids.size() > 160) ids.resize(160);
      paragraphs.push_back(std::move(ids));
    }
    at = end + 2;
  }
  if (static_cast<int>(paragraphs.size()) < prose) {
    fail("{}: {} paragraphs of at least 48 tokens, {} prose prompts asked", text_file,
         paragraphs.size(), prose);
  }
  for (int i = 0; i < prose; ++i) {
    const size_t k = paragraphs.size() * static_cast<size_t>(i) / static_cast<size_t>(prose);
    out.push_back({fmt::format("prose-{}", i + 1), "prose", paragraphs[k]});
  }
  // ChatML questions at chat_context tokens, then (when there are too few) at twice that.
  int found = 0;
  for (const int64_t context : {chat_context, 2 * chat_context}) {
    for (const NeedleItem& n : read_needles(needles_file, context, 100000)) {
      if (found == chat) break;
      if (n.prompt.find("<|im_start|>") == std::string::npos) continue;
      out.push_back({fmt::format("chat-{}", ++found), "chat", tok.encode(n.prompt)});
    }
  }
  if (found < chat) {
    fail("{}: {} ChatML questions at context {} and {}, {} asked", needles_file, found,
         chat_context, 2 * chat_context, chat);
  }
  return out;
}

json run_conditions(Ladder& ladder, std::span<const BenchPrompt> prompts,
                    std::span<const std::string> trace_files, const ConditionsOptions& o,
                    const std::function<void(int64_t, int64_t)>& progress) {
  if (prompts.empty()) fail("conditions: no prompts");
  if (trace_files.empty()) fail("conditions: no traces");
  if (o.policies.empty()) fail("conditions: no policies");
  std::vector<PressureTrace> traces;
  json trace_rows = json::array();
  for (const std::string& f : trace_files) {
    traces.push_back(PressureTrace::load(f));
    const json j = read_json_file(f);
    trace_rows.push_back({{"name", traces.back().name},
                          {"file", std::filesystem::path(f).filename().string()},
                          {"description", j.value("description", "")},
                          {"points", j.at("points")}});
  }
  auto top = Model::load(ladder.rung(0).path());
  json prompt_rows = json::array();
  std::vector<Baseline> bases;
  for (const BenchPrompt& p : prompts) {
    SessionOptions so;
    so.max_tokens = o.max_tokens;
    so.stop_at_eos = false;
    so.policy = Policy::kHold;
    Generation g(ladder, nullptr, p.ids, so);
    while (!g.finished()) g.step();
    bases.push_back({{g.answer().begin(), g.answer().end()}});
    ladder.release_unused();
    prompt_rows.push_back({{"name", p.name}, {"kind", p.kind}, {"tokens", p.ids.size()}});
  }
  // The main conditions on `ladder`, then each ablation on its own ladder.
  struct Condition {
    std::string name;
    Policy policy;
    TransferOptions transfer;
    Ladder* ladder;
  };
  std::vector<Condition> conds;
  for (Policy p : o.policies) conds.push_back({policy_name(p), p, {}, &ladder});
  std::vector<std::unique_ptr<Ladder>> own;
  for (const Ablation& a : o.ablations) {
    Ladder* l = &ladder;
    if (!a.manifest.empty()) {
      own.push_back(Ladder::open(a.manifest));
      l = own.back().get();
    }
    conds.push_back({a.name, a.policy, a.transfer, l});
  }
  json runs = json::array();
  const int64_t total = static_cast<int64_t>(conds.size() * traces.size() * prompts.size());
  int64_t done = 0;
  // Every condition on one prompt and trace before the next, each from released rungs: the
  // machine's drift (other work, bandwidth that moves within minutes) falls on all conditions
  // alike, so an ablation's paired Δ of stall measures the ablation, not the minute it ran in.
  for (const PressureTrace& t : traces) {
    const int64_t from = pressure_start(t, o.max_tokens);
    for (size_t i = 0; i < prompts.size(); ++i) {
      for (const Condition& c : conds) {
        json r = run_one(*c.ladder, *top, prompts[i], t, c.policy, c.transfer, o, bases[i], from);
        r["condition"] = c.name;
        if (i > 0) r.erase("series");  // per step: kept for the first prompt, which is plotted
        runs.push_back(std::move(r));
        c.ladder->release_unused();
        if (progress) progress(++done, total);
      }
    }
  }
  json summary = json::array();
  std::vector<std::string> trace_names;
  trace_names.reserve(traces.size() + 1);
  for (const PressureTrace& t : traces) trace_names.push_back(t.name);
  trace_names.emplace_back("all");
  for (const Condition& c : conds) {
    const Ablation* ab = nullptr;
    for (const Ablation& a : o.ablations) {
      if (a.name == c.name) ab = &a;
    }
    for (const std::string& t : trace_names) {
      const auto rows = rows_of(runs, c.name, t);
      json s = summarize(rows, o);
      s["condition"] = c.name;
      s["policy"] = policy_name(c.policy);
      s["trace"] = t;
      if (ab != nullptr) s["paired"] = paired(rows, rows_of(runs, ab->baseline, t), o);
      summary.push_back(s);
    }
  }
  json ablations = json::array();
  for (const Ablation& a : o.ablations) {
    ablations.push_back({{"name", a.name},
                         {"description", a.description},
                         {"policy", policy_name(a.policy)},
                         {"baseline", a.baseline},
                         {"recompute_layers", a.transfer.recompute_layers},
                         {"anchors", a.transfer.anchors}});
  }
  json policies = json::array();
  for (Policy p : o.policies) policies.push_back(policy_name(p));
  return {{"policies", policies},
          {"ablations", ablations},
          {"max_tokens", o.max_tokens},
          {"bootstrap", {{"resamples", o.bootstrap}, {"seed", o.seed}, {"interval", 0.95}}},
          {"traces", trace_rows},
          {"prompts", prompt_rows},
          {"runs", runs},
          {"summary", summary}};
}

}  // namespace molt
