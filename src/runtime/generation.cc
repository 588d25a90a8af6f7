// A generation advanced one token per step(): check the budget, change rung if needed, decode
// the pending token, sample, emit. Never blocks: parked, a step is one budget check.
#include "molt/runtime/generation.h"

#include <algorithm>
#include <cmath>

#include "molt/common/error.h"
#include "molt/kernels/threads.h"
#include "molt/transfer/map_file.h"
#include "runtime/state.h"

namespace molt {
namespace runtime {
namespace {

double used_mib(const State& g);

double query_budget(State& g, Step& out) {
  const BudgetQuery q{g.checks++, ms_between(g.t_start, Clock::now()), g.reference_mib,
                      used_mib(g)};
  const double b = g.budget ? g.budget->budget_mib(q) : INFINITY;
  if (b != g.last_budget) out.budget = BudgetEvent{b};
  g.last_budget = b;
  return b;
}

// The largest rung this policy may run that fits; -1 when none does.
int choose(const State& g, double budget) {
  const int bottom = g.ladder.size() - 1;
  for (int r = 0; r <= bottom; ++r) {
    if (g.o.policy == Policy::kHold && r != 0) continue;
    if (g.o.policy == Policy::kSmall && r != bottom) continue;
    if (g.broken[static_cast<size_t>(r)]) continue;
    if (g.footprint_mib(r) <= budget) return r;
  }
  return -1;
}

// What the accounting says this generation holds now: every resident rung's weights, its
// cache, and the scratch of the rung it decodes on (a parked generation holds its cache only).
double used_mib(const State& g) {
  double b = static_cast<double>(g.ladder.resident_bytes());
  if (g.rung >= 0) {
    b += g.using_rung ? g.own_mib(g.rung) * kMiB : static_cast<double>(g.kv_bytes(g.rung));
  }
  return b / kMiB;
}

void note_usage(State& g, double budget) {
  const double used = used_mib(g);
  g.done.peak_mib = std::max(g.done.peak_mib, used);
  g.done.max_overshoot_mib = std::max(g.done.max_overshoot_mib, used - budget);
}

void mark_used(State& g, int r) {
  auto& used = g.done.rungs_used;
  const std::string& name = g.ladder.rung(r).name();
  if (std::find(used.begin(), used.end(), name) == used.end()) used.push_back(name);
}

void finish(State& g, const std::string& reason, Step& out) {
  g.finished = true;
  g.heal.reset();
  g.done.reason = reason;
  g.done.killed = reason == "killed";
  g.done.tokens = static_cast<int64_t>(g.answer.size());
  if (g.text) g.done.tail = g.text->flush();
  g.done.elapsed_ms = ms_between(g.t_start, Clock::now());
  // The cache goes with the generation; the rung's weights stay for the ladder's owner.
  g.cache.reset();
  if (g.rung >= 0) {
    if (g.using_rung) g.ladder.unuse(g.rung);
    g.ladder.drop(g.rung);
  }
  g.using_rung = false;
  g.rung = -1;
  out.kind = StepKind::kDone;
  out.done = g.done;
}

// No rung fits: stop using the weights (parked when nobody else uses them), keep the cache.
void park(State& g, double budget, Step& out) {
  ParkEvent e;
  e.rung = g.rung >= 0 ? g.current().name() : "";
  e.budget_mib = budget;
  e.need_mib = g.footprint_mib(g.ladder.size() - 1);
  if (g.rung >= 0 && g.using_rung) {
    g.ladder.unuse(g.rung);
    if (g.ladder.users(g.rung) == 0) g.current().park();
  }
  g.using_rung = false;
  g.heal.reset();
  g.parked = true;
  g.waited = 0;
  g.t_parked = Clock::now();
  ++g.done.parks;
  out.park = e;
  out.kind = StepKind::kWaiting;
}

// Prefills the window's context on rung r (the start, or a resume before any cache).
void start_on(State& g, int r) {
  g.ladder.rung(r).load();  // throws before anything is counted when the checkpoint is bad
  g.ladder.hold(r);
  g.ladder.use(r);
  g.rung = r;
  g.using_rung = true;
  mark_used(g, r);
  g.cache = g.new_cache(r);
  // The whole prompt goes in and its last logits are kept: the first token needs no decode.
  const Clock::time_point t0 = Clock::now();
  prefill_chunked(g.current().model(), *g.cache, g.window, g.o.prefill_chunk, g.logits);
  note_prefill_speed(g, g.current().config(), static_cast<int64_t>(g.window.size()),
                     ms_between(t0, Clock::now()));
  g.logits_ready = true;
  if (g.meter) g.meter->baseline(g);
}

// Before a migration at the first token the cache holds the whole prompt: give the pending
// position back, so that the receiver decodes it.
void pend_last(State& g) {
  if (!g.logits_ready) return;
  g.cache->truncate(g.cache->size() - 1);
  g.logits_ready = false;
}

// The receiver could not be loaded (its checkpoint truncated or unreadable) after the sender
// may already have gone: the answer so far is kept, that rung is not tried again, and the
// window is re-read on the largest other rung that fits — or the generation parks.
bool recover(State& g, int failed, double budget, const std::string& why, Step& out) {
  MigrationEvent e;
  e.from = g.rung >= 0 ? g.current().name() : "";
  e.requested = policy_name(g.o.policy);
  e.policy = "release-reprefill";
  e.context = static_cast<int64_t>(g.context().size());
  e.at_token = static_cast<int64_t>(g.answer.size());
  e.budget_mib = budget;
  g.heal.reset();
  g.cache.reset();
  if (g.rung >= 0) leave(g, g.rung);
  g.broken.at(static_cast<size_t>(failed)) = true;
  std::string lost =
      fmt::format("rung '{}' failed to load ({})", g.ladder.rung(failed).name(), why);
  const Clock::time_point t0 = Clock::now();
  for (int r = choose(g, budget); r >= 0; r = choose(g, budget)) {
    try {
      start_on(g, r);
    } catch (const std::exception& err) {
      g.broken[static_cast<size_t>(r)] = true;
      lost += fmt::format("; rung '{}' failed to load ({})", g.ladder.rung(r).name(), err.what());
      continue;
    }
    e.to = g.current().name();
    e.carry_ms = ms_between(t0, Clock::now());
    e.note = lost + fmt::format("; re-read the context on '{}'", e.to);
    out.migration = e;
    return true;
  }
  park(g, budget, out);
  out.park->note = lost + "; no other rung fits: parked with the answer so far";
  return false;
}

// Migrates to `to`; false when the step ends here (a failed receiver left nothing that fits).
bool move_to(State& g, int to, double budget, Step& out) {
  pend_last(g);
  MigrationEvent e;
  try {
    e = migrate(g, plan_migration(g, to, budget));
  } catch (const std::exception& err) {
    return recover(g, to, budget, err.what(), out);
  }
  e.budget_mib = budget;
  e.pressure = std::clamp(1.0 - budget / g.reference_mib, 0.0, 1.0);
  e.at_token = static_cast<int64_t>(g.answer.size());
  if (g.heal) {
    const double need = g.footprint_mib(g.rung);
    if (need > budget) {
      g.heal.reset();
      e.note += fmt::format("heal skipped: it needs {:.1f} MiB > budget {:.1f} MiB", need, budget);
    }
  }
  g.done.peak_mib = std::max(g.done.peak_mib, e.peak_mib);
  mark_used(g, to);
  out.migration = e;
  return true;
}

// The first step: start on the largest rung that fits and loads (hold: the top rung whatever
// the budget), or park.
bool start(State& g, double budget, Step& out) {
  if (g.o.policy == Policy::kHold || g.forced >= 0) {  // forced before the start: start there
    start_on(g, std::max(0, std::exchange(g.forced, -1)));
    note_usage(g, budget);
    return true;
  }
  for (int r = choose(g, budget); r >= 0; r = choose(g, budget)) {
    try {
      start_on(g, r);
      note_usage(g, budget);
      return true;
    } catch (const std::exception&) {
      g.broken[static_cast<size_t>(r)] = true;
    }
  }
  park(g, budget, out);
  return false;
}

// A parked generation's check: resume on the largest rung that fits, if any.
bool try_resume(State& g, double budget, Step& out) {
  ++g.waited;
  note_usage(g, budget);
  const int r = choose(g, budget);
  if (r < 0) {
    if (g.waited >= g.o.max_parked_steps) {
      fail(
          "parked for {} budget checks: the budget ({:.1f} MiB) never came back above the "
          "smallest rung ({:.1f} MiB)",
          g.waited, budget, g.footprint_mib(g.ladder.size() - 1));
    }
    out.kind = StepKind::kWaiting;
    return false;
  }
  if (!g.cache) {  // parked before the start, or after a rung failed to load
    try {
      start_on(g, r);
    } catch (const std::exception&) {
      g.broken[static_cast<size_t>(r)] = true;  // the next check tries the others
      out.kind = StepKind::kWaiting;
      return false;
    }
  }
  g.parked = false;
  out.resume = ResumeEvent{g.ladder.rung(r).name(), g.waited, ms_between(g.t_parked, Clock::now())};
  if (g.rung == r) {
    if (g.using_rung) return true;  // just started there
    g.ladder.use(r);
    g.using_rung = true;
    g.current().unpark();
  } else {
    return move_to(g, r, budget, out);
  }
  return true;
}

// Between two tokens: enforce the budget. Returns false when the step ends here (killed or
// parked).
bool check_budget(State& g, double budget, Step& out) {
  const double need = g.footprint_mib(g.rung);
  if (g.forced >= 0) {
    const int to = std::exchange(g.forced, -1);
    if (to != g.rung && !move_to(g, to, budget, out)) return false;
  } else if (g.o.policy == Policy::kHold) {
    g.over = need > budget ? g.over + 1 : 0;
    if (g.over > g.o.grace_steps) {
      finish(g, "killed", out);
      return false;
    }
  } else if (need > budget) {
    g.up_count = 0;
    const int target = choose(g, budget);
    if (target < 0) {
      park(g, budget, out);
      return false;
    }
    if (!move_to(g, target, budget, out)) return false;
  } else if (g.o.policy != Policy::kSmall && g.rung > 0) {
    int up = -1;
    for (int r = 0; r < g.rung && up < 0; ++r) {
      if (!g.broken[static_cast<size_t>(r)] && g.footprint_mib(r) * (1 + g.o.up_margin) <= budget)
        up = r;
    }
    g.up_count = up >= 0 ? g.up_count + 1 : 0;
    if (up >= 0 && g.up_count >= g.o.up_after) {
      g.up_count = 0;
      if (!move_to(g, up, budget, out)) return false;
    }
  }
  note_usage(g, budget);
  return true;
}

}  // namespace

void shed_window(State& g, int64_t sink, int64_t drop) {
  // A pending first token's logits were computed before the shift; positions after it move.
  g.cache->shed(sink, drop, g.ladder.rung(g.rung).model().rope());
  g.window.erase(g.window.begin() + sink, g.window.begin() + sink + drop);
  g.heal.reset();  // its carried positions moved
}

namespace {

// A full cache: shed the oldest context after the sink positions, or fail naming the option.
void make_room(State& g) {
  if (g.cache->size() < g.capacity) return;
  if (g.o.shed_sink < 0) {
    fail(
        "the generation's cache is full ({} positions): raise capacity or allow shedding "
        "(shed_sink >= 0)",
        g.capacity);
  }
  const int64_t sink = std::min(g.o.shed_sink, g.capacity - 2);
  const int64_t drop = std::clamp<int64_t>(g.o.shed_drop > 0 ? g.o.shed_drop : g.capacity / 4, 1,
                                           g.cache->size() - sink);
  shed_window(g, sink, drop);
}

// Heal a chunk (not at the seam itself: the mapped resume is what the user waits for); true
// when the pending token still needs its decode (room made for it).
bool needs_decode(State& g, Step& out) {
  const Model& model = g.current().model();
  if (g.heal && !out.migration) {
    if (g.heal->step(model, *g.cache, g.window, g.o.heal_chunk)) {
      out.heal = HealEvent{g.current().name(), static_cast<int64_t>(g.answer.size()),
                           g.heal->positions(), g.heal->steps(), g.heal->ms()};
      g.heal.reset();
    }
  }
  if (g.logits_ready) return false;
  make_room(g);
  return true;
}

// Everything before the pending token's decode; false when the step ends here.
bool begin_step(State& g, Step& out, Clock::time_point& t_check) {
  if (g.finished) {
    out.kind = StepKind::kDone;
    return false;
  }
  if (g.cancelled) {
    finish(g, "cancelled", out);
    return false;
  }
  if (g.suspended) {
    out.kind = StepKind::kWaiting;
    return false;
  }
  const double budget = query_budget(g, out);
  t_check = Clock::now();
  g.evidence_ms = 0;
  if (!g.started) {
    g.started = true;
    return start(g, budget, out);
  }
  if (g.parked) return try_resume(g, budget, out);
  if (!g.answer.empty() || g.forced >= 0) return check_budget(g, budget, out);
  return true;
}

void sample_and_emit(State& g, Step& out) {
  const int64_t vocab = g.ladder.vocab_size();
  // Embedding rows past the tokenizer's ids are padding: never sampled.
  const int32_t tok = g.sampler.sample(std::span<float>(g.logits.data(), vocab), g.history);
  g.logits_ready = false;
  g.history.push_back(tok);
  g.window.push_back(tok);
  g.answer.push_back(tok);
  g.answer_rungs.push_back(g.current().name());
  out.token =
      TokenEvent{static_cast<int64_t>(g.answer.size()) - 1,
                 g.text ? g.text->push(tok) : fmt::format("<{}>", tok), tok, g.current().name()};
  out.kind = StepKind::kToken;
  const auto& eos = g.current().config().eos_token_ids;
  const bool stop = std::find(eos.begin(), eos.end(), tok) != eos.end() ||
                    std::find(g.o.stop_ids.begin(), g.o.stop_ids.end(), tok) != g.o.stop_ids.end();
  if (stop && g.o.stop_at_eos) {
    finish(g, "eos", out);
  } else if (static_cast<int64_t>(g.answer.size()) >= g.o.max_tokens) {
    finish(g, "max_tokens", out);
  }
}

// After the decode: the seam's cost, then the token.
void end_step(State& g, Step& out, Clock::time_point t_check, Clock::time_point t_decode) {
  if (out.migration) {
    MigrationEvent& e = *out.migration;
    const Clock::time_point t_end = Clock::now();
    e.first_decode_ms = ms_between(t_decode, t_end);
    e.ms = ms_between(t_check, t_end) - g.evidence_ms;
    if (g.meter) g.meter->seam_logits(g, e);
    g.done.migration_ms += e.ms;
    ++g.done.migrations;
    g.migrations.push_back(e);
  }
  sample_and_emit(g, out);
}

}  // namespace
}  // namespace runtime

namespace runtime {

size_t State::kv_bytes(int r) const {
  size_t b = footprints.at(static_cast<size_t>(r)).kv_bytes(capacity);
  if (keep_hidden) {
    const ModelConfig& c = ladder.rung(r).config();
    b += static_cast<size_t>((c.num_hidden_layers + 1) * c.hidden_size * capacity) * sizeof(float);
  }
  return b;
}

double State::own_mib(int r) const {
  double b = static_cast<double>(kv_bytes(r) + footprints.at(static_cast<size_t>(r)).scratch_bytes);
  if (heal && r == rung) {
    b += static_cast<double>(HealJob::extra_bytes(ladder.rung(r).config(), heal->positions()));
  }
  return b / kMiB;
}

double State::footprint_mib(int r) const {
  const Footprint& f = footprints.at(static_cast<size_t>(r));
  return static_cast<double>(f.weight_bytes + f.heap_weight_bytes) / kMiB + own_mib(r);
}

std::unique_ptr<KVCache> State::new_cache(int r) const {
  return std::make_unique<KVCache>(
      ladder.rung(r).model().new_cache(capacity, keep_hidden, o.kv_dtype));
}

}  // namespace runtime

using runtime::State;

Generation::Generation() = default;
Generation::~Generation() {
  if (!s_ || s_->finished || s_->rung < 0) return;
  try {  // an unfinished generation gives its references back (never throws out of here)
    if (s_->using_rung) s_->ladder.unuse(s_->rung);
    s_->ladder.drop(s_->rung);
  } catch (const std::exception&) {
  }
}

Generation::Generation(Ladder& ladder, BudgetSource* budget, std::span<const int32_t> prompt,
                       SessionOptions options) {
  options.validate();
  const int64_t vocab = ladder.vocab_size();
  if (prompt.empty()) fail("the prompt has no tokens");
  for (int32_t id : prompt) {
    if (id < 0 || id >= vocab)
      fail("prompt token id {} is outside the ladder's vocabulary [0, {})", id, vocab);
  }
  s_ = std::make_unique<State>(ladder, budget, std::move(options));
  State& g = *s_;
  g.history.assign(prompt.begin(), prompt.end());
  g.window = g.history;
  g.prompt_len = prompt.size();
  const int64_t natural = static_cast<int64_t>(prompt.size()) + g.o.max_tokens;
  g.capacity = g.o.capacity > 0 ? g.o.capacity : natural;
  if (g.capacity < static_cast<int64_t>(prompt.size()) + 1) {
    fail("capacity {} cannot hold the prompt ({} tokens) and one more", g.capacity, prompt.size());
  }
  g.keep_hidden = g.o.transfer.recompute_layers > 0;
  // heal runs chunks of heal_chunk positions through the live cache's scratch.
  const bool may_heal = g.o.policy == Policy::kHeal || g.o.policy == Policy::kAuto;
  const FootprintShape shape{
      may_heal ? std::max(g.o.prefill_chunk, g.o.heal_chunk) : g.o.prefill_chunk, g.capacity,
      num_threads(), g.o.kv_dtype};
  for (int r = 0; r < ladder.size(); ++r)
    g.footprints.push_back(ladder.rung(r).footprint_for(shape));
  g.broken.assign(static_cast<size_t>(ladder.size()), false);
  g.reference_mib = g.footprint_mib(0);
  int64_t logits = 0;
  for (int r = 0; r < ladder.size(); ++r)
    logits = std::max(logits, ladder.rung(r).config().vocab_size);
  g.logits.resize(static_cast<size_t>(logits));
  if (ladder.tokenizer())
    g.text = std::make_unique<StreamDecoder>(*ladder.tokenizer(), /*skip_special=*/true);
  if (g.o.measure_seams || g.o.measure_rss) {
    g.meter = std::make_unique<runtime::SeamMeter>(g.o);
    // Page in the map verifier's code (SHA-256) once, so the first map load's library pages
    // are not counted as the migration's memory.
    if (g.o.measure_rss) sha256_file(ladder.manifest().file);
  }
  g.t_start = runtime::Clock::now();
}

std::unique_ptr<Generation> Generation::resume(Ladder& ladder, BudgetSource* budget, int rung,
                                               KVCache cache, std::vector<int32_t> history,
                                               SessionOptions options) {
  if (history.size() < 2) fail("resume: the history needs a context and a pending token");
  if (cache.size() != static_cast<int64_t>(history.size()) - 1) {
    fail("resume: the cache holds {} positions but the history has {} ids (expected one more)",
         cache.size(), history.size());
  }
  if (options.capacity <= 0) options.capacity = cache.capacity();
  if (options.transfer.recompute_layers > 0 && !cache.keeps_hidden()) {
    fail("resume: recompute_layers needs a cache that keeps hidden states");
  }
  if (cache.kv_dtype() != options.kv_dtype) {
    fail("resume: the cache's K and V are {} but the options' kv_dtype is {}",
         kv_dtype_name(cache.kv_dtype()), kv_dtype_name(options.kv_dtype));
  }
  std::unique_ptr<Generation> gen(new Generation(ladder, budget, history, std::move(options)));
  State& g = *gen->s_;
  if (cache.capacity() != g.capacity) {
    fail("resume: the cache's capacity {} differs from the options' {}", cache.capacity(),
         g.capacity);
  }
  g.ladder.hold(rung);
  g.ladder.use(rung);
  g.ladder.rung(rung).load();
  g.rung = rung;
  g.using_rung = true;
  runtime::mark_used(g, rung);
  g.keep_hidden = cache.keeps_hidden();
  g.cache = std::make_unique<KVCache>(std::move(cache));
  g.started = true;
  return gen;
}

Step Generation::step() {
  State& g = *s_;
  Step out;
  runtime::Clock::time_point t_check;
  if (!runtime::begin_step(g, out, t_check)) return out;
  const runtime::Clock::time_point t_decode = runtime::Clock::now();
  if (runtime::needs_decode(g, out)) {  // the path step_together takes, with one sequence
    const Model& m = g.current().model();
    m.decode(g.window.back(), *g.cache,
             std::span<float>(g.logits).first(static_cast<size_t>(m.config().vocab_size)));
  }
  runtime::end_step(g, out, t_check, t_decode);
  return out;
}

std::vector<Step> Generation::step_together(std::span<Generation* const> gens) {
  const size_t n = gens.size();
  std::vector<Step> out(n);
  std::vector<runtime::Clock::time_point> t_check(n);
  std::vector<bool> live(n, false), decode(n, false);
  for (size_t i = 0; i < n; ++i) {
    live[i] = runtime::begin_step(*gens[i]->s_, out[i], t_check[i]);
    if (live[i]) decode[i] = runtime::needs_decode(*gens[i]->s_, out[i]);
  }
  const runtime::Clock::time_point t_decode = runtime::Clock::now();
  // One pass over each rung's weights for every generation on it.
  std::vector<int32_t> tokens;
  std::vector<KVCache*> caches;
  std::vector<size_t> members;
  std::vector<float> logits;
  for (size_t i = 0; i < n; ++i) {
    if (!decode[i]) continue;
    const int r = gens[i]->s_->rung;
    tokens.clear(), caches.clear(), members.clear();
    for (size_t j = i; j < n; ++j) {
      if (!decode[j] || gens[j]->s_->rung != r || &gens[j]->s_->ladder != &gens[i]->s_->ladder)
        continue;
      runtime::State& g = *gens[j]->s_;
      tokens.push_back(g.window.back());
      caches.push_back(g.cache.get());
      members.push_back(j);
      decode[j] = false;
    }
    const Model& m = gens[i]->s_->current().model();
    const size_t V = static_cast<size_t>(m.config().vocab_size);
    logits.resize(members.size() * V);
    m.decode_batch(tokens, caches, logits);
    for (size_t k = 0; k < members.size(); ++k) {
      std::copy_n(logits.begin() + static_cast<std::ptrdiff_t>(k * V), V,
                  gens[members[k]]->s_->logits.begin());
    }
  }
  for (size_t i = 0; i < n; ++i) {
    if (live[i]) runtime::end_step(*gens[i]->s_, out[i], t_check[i], t_decode);
  }
  return out;
}

void Generation::suspend() {
  State& g = *s_;
  if (g.suspended || g.finished) return;
  g.suspended = true;
  g.heal.reset();  // its chunks would need the weights
  if (g.rung >= 0 && g.using_rung) {
    g.ladder.unuse(g.rung);
    if (g.ladder.users(g.rung) == 0) g.current().park();
    g.using_rung = false;
  }
}

void Generation::wake() {
  State& g = *s_;
  if (!g.suspended) return;
  g.suspended = false;
  if (g.rung >= 0 && !g.parked && !g.using_rung) {
    g.ladder.use(g.rung);
    g.using_rung = true;
    g.current().load();
  }
}

bool Generation::suspended() const {
  return s_->suspended;
}

int64_t Generation::shed(int64_t n_sink, int64_t n_drop) {
  State& g = *s_;
  if (!g.cache || g.rung < 0) return 0;
  if (n_sink < 0 || n_drop < 0) fail("shed: negative sink {} or drop {}", n_sink, n_drop);
  const int64_t drop =
      std::clamp<int64_t>(n_drop, 0, std::max<int64_t>(0, g.cache->size() - n_sink));
  if (drop == 0) return 0;
  runtime::shed_window(g, n_sink, drop);
  return drop;
}

void Generation::cancel() {
  s_->cancelled = true;
}
void Generation::force_migration(int rung) {
  if (rung < 0 || rung >= s_->ladder.size())
    fail("force_migration: no rung {} (the ladder has {})", rung, s_->ladder.size());
  s_->forced = rung;
}
bool Generation::finished() const {
  return s_->finished;
}
bool Generation::parked() const {
  return s_->parked;
}
int Generation::rung() const {
  return s_->rung;
}
const std::string& Generation::rung_name() const {
  static const std::string none;
  return s_->rung >= 0 ? s_->ladder.rung(s_->rung).name() : none;
}
int64_t Generation::positions() const {
  return s_->cache ? s_->cache->size() : 0;
}
int64_t Generation::capacity() const {
  return s_->capacity;
}
int64_t Generation::tokens() const {
  return static_cast<int64_t>(s_->answer.size());
}
std::span<const int32_t> Generation::history() const {
  return s_->history;
}
std::span<const int32_t> Generation::answer() const {
  return s_->answer;
}
const std::vector<std::string>& Generation::answer_rungs() const {
  return s_->answer_rungs;
}
const std::vector<MigrationEvent>& Generation::migrations() const {
  return s_->migrations;
}
const DoneEvent& Generation::summary() const {
  return s_->done;
}
HealProgress Generation::heal_progress() const {
  HealProgress h;
  if (!s_->heal) return h;
  h.active = true;
  h.layers_done = s_->heal->layers_done();
  h.layers = s_->current().config().num_hidden_layers;
  h.positions = s_->heal->positions();
  h.steps = s_->heal->steps();
  return h;
}
const KVCache* Generation::cache() const {
  return s_->cache.get();
}
const SessionOptions& Generation::options() const {
  return s_->o;
}
double Generation::own_mib(int r) const {
  return s_->own_mib(r);
}
double Generation::heal_extra_mib(const ModelConfig& c, int64_t positions) {
  return static_cast<double>(runtime::HealJob::extra_bytes(c, positions)) / runtime::kMiB;
}
double Generation::footprint_mib(int r) const {
  return s_->footprint_mib(r);
}
double Generation::used_mib() const {
  return s_->rung >= 0 && s_->using_rung ? s_->footprint_mib(s_->rung)
                                         : (s_->rung >= 0 ? s_->own_mib(s_->rung) : 0);
}

void emit(const Step& s, EventSink& sink) {
  if (s.budget) sink.on_budget(*s.budget);
  if (s.park) sink.on_park(*s.park);
  if (s.resume) sink.on_resume(*s.resume);
  if (s.heal) sink.on_heal(*s.heal);
  if (s.migration) sink.on_migration(*s.migration);
  if (s.token) sink.on_token(*s.token);
  if (s.done) sink.on_done(*s.done);
}

}  // namespace molt
