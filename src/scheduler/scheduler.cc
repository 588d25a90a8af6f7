// Rounds: read the budget once, plan, pull the levers, step every runnable tenant, settle the
// ladder's residency, account.
#include "molt/scheduler/scheduler.h"

#include <algorithm>
#include <limits>

#include "molt/common/error.h"
#include "molt/ladder/process_memory.h"
#include "scheduler/spawn.h"

namespace molt::sched {
namespace {

using Clock = std::chrono::steady_clock;
constexpr double kMiB = 1024.0 * 1024.0;
constexpr int64_t kWaitingTicket = int64_t{1} << 40;  // waiting tenants queue after admitted ones

double ms_since(Clock::time_point t) {
  return std::chrono::duration<double, std::milli>(Clock::now() - t).count();
}

void note_rung(TenantStatus& s, const std::string& rung) {
  if (std::find(s.rungs_used.begin(), s.rungs_used.end(), rung) == s.rungs_used.end())
    s.rungs_used.push_back(rung);
}

// A heal migration keeps the hidden states of the carried positions beside the live cache until it
// completes (Generation::own_mib adds it only once it exists); auto may choose heal. Reserved
// for every move of such a tenant, so that the planner's prediction holds after the step that
// migrates.
double heal_reserve_mib(const Ladder& l, int rung, int64_t positions) {
  return Generation::heal_extra_mib(l.rung(rung).config(), positions);
}

}  // namespace

struct Scheduler::Tenant {
  TenantSpec spec;
  TenantStatus status;
  std::unique_ptr<Generation> gen;
  std::vector<int32_t> window;  // the ids the cache holds + the pending one
  int64_t capacity = 0;         // positions the cache is allocated for
  int64_t base = 0;             // tokens produced by earlier generations of this tenant
  int64_t ticket = 0;           // arrival order
  int64_t admitted = 0;         // admission order
  double reference_mib = 0;     // its share of Scheduler::reference_mib

  bool admitted_now() const { return gen != nullptr && !gen->finished(); }
  int64_t remaining() const { return spec.options.max_tokens - status.tokens(); }
  SessionOptions options() const { return tenant_options(spec.options, capacity, remaining()); }
};

Scheduler::Scheduler(Ladder& ladder, BudgetSource* budget, SchedulerConfig cfg)
    : ladder_(ladder), budget_(budget), cfg_(cfg), t_start_(Clock::now()) {
  if (cfg_.shed_sink < 0 || cfg_.min_shed < 1)
    fail("scheduler: shed_sink must be >= 0 and min_shed >= 1");
  if (cfg_.measure_rss) rss_base_mib_ = to_mib(read_process_memory().rss_bytes);
  reference_mib_ = static_cast<double>(ladder_.rung(0).footprint().weight_bytes +
                                       ladder_.rung(0).footprint().heap_weight_bytes) /
                   kMiB;
}

Scheduler::~Scheduler() = default;

size_t Scheduler::add(TenantSpec spec) {
  if (spec.prompt.size() < 2)
    fail("tenant '{}': the prompt needs at least two tokens (got {})", spec.name,
         spec.prompt.size());
  for (int32_t id : spec.prompt) {
    if (id < 0 || id >= ladder_.vocab_size())
      fail("tenant '{}': prompt id {} is outside the vocabulary [0, {})", spec.name, id,
           ladder_.vocab_size());
  }
  auto t = std::make_unique<Tenant>();
  t->capacity = static_cast<int64_t>(spec.prompt.size()) + spec.options.max_tokens;
  t->window = spec.prompt;
  t->ticket = tickets_++;
  t->status.name = spec.name;
  t->status.priority = spec.priority;
  t->status.arrival = spec.arrival;
  t->status.max_tokens = spec.options.max_tokens;
  t->spec = std::move(spec);
  t->options();  // validates the policy and the options now, not at admission
  t->reference_mib = own_at(ladder_, 0, t->capacity, t->spec.options);
  reference_mib_ += t->reference_mib;
  tenants_.push_back(std::move(t));
  return tenants_.size() - 1;
}

double Scheduler::pressure() const {
  if (!std::isfinite(last_budget_) || reference_mib_ <= 0) return 0;
  return std::clamp(1.0 - last_budget_ / reference_mib_, 0.0, 1.0);
}

void Scheduler::cancel(size_t i, const std::string& reason) {
  Tenant& t = *tenants_.at(i);
  if (t.status.state == TenantState::kFinished) return;
  DoneEvent d;
  if (t.gen) {
    t.gen->cancel();
    d = t.gen->summary();
  }
  d.killed = false;
  d.reason = reason;
  finish(t, d);
}

size_t Scheduler::prune() {
  const size_t before = tenants_.size();
  std::erase_if(tenants_, [this](const std::unique_ptr<Tenant>& t) {
    if (t->status.state != TenantState::kFinished) return false;
    reference_mib_ -= t->reference_mib;
    return true;
  });
  return before - tenants_.size();
}

size_t Scheduler::size() const {
  return tenants_.size();
}

const TenantStatus& Scheduler::tenant(size_t i) const {
  return tenants_.at(i)->status;
}

bool Scheduler::done() const {
  return std::all_of(tenants_.begin(), tenants_.end(),
                     [](const auto& t) { return t->status.state == TenantState::kFinished; });
}

double Scheduler::accounted_mib() const {
  double u = static_cast<double>(ladder_.resident_bytes()) / kMiB;
  for (const auto& t : tenants_) {
    if (t->admitted_now() && t->gen->rung() >= 0) u += t->gen->own_mib(t->gen->rung());
  }
  return u;
}

std::vector<size_t> Scheduler::view_tenants() const {
  std::vector<size_t> who;
  for (size_t i = 0; i < tenants_.size(); ++i) {
    const TenantStatus& s = tenants_[i]->status;
    if (s.state == TenantState::kFinished) continue;
    if (s.state == TenantState::kWaiting && s.arrival > round_) continue;
    who.push_back(i);
  }
  return who;
}

TenantView Scheduler::view_of(const Tenant& t) const {
  TenantView v;
  v.priority = t.spec.priority;
  v.state = t.status.state;
  v.admitted = t.gen ? t.admitted : kWaitingTicket + t.ticket;
  v.rung = t.gen ? t.gen->rung() : -1;
  const Policy policy = t.spec.options.policy;
  const bool heals = t.gen && (policy == Policy::kHeal || policy == Policy::kAuto);
  for (int r = 0; r < ladder_.size(); ++r) {
    double own = t.gen ? t.gen->own_mib(r) : own_at(ladder_, r, t.capacity, t.spec.options);
    if (heals && r != v.rung) own += heal_reserve_mib(ladder_, r, t.gen->positions());
    v.own_mib.push_back(own);
  }
  // A shed halves the context after the sink and moves the cache into that much less memory; a
  // suspended tenant cannot (the move needs its rung's weights).
  const int64_t drop = (t.gen ? t.gen->positions() - cfg_.shed_sink : 0) / 2;
  if (cfg_.allow_shed && v.state == TenantState::kRunning && drop >= cfg_.min_shed) {
    v.shed_mib =
        t.gen->own_mib(v.rung) - own_at(ladder_, v.rung, t.capacity - drop, t.spec.options);
  }
  return v;
}

PlanInput Scheduler::view(double budget_mib) const {
  PlanInput in;
  in.budget_mib = budget_mib;
  in.up_streak = up_streak_;
  for (int r = 0; r < ladder_.size(); ++r) {
    const Footprint& f = ladder_.rung(r).footprint();
    in.rungs.push_back({static_cast<double>(f.weight_bytes + f.heap_weight_bytes) / kMiB,
                        static_cast<double>(f.heap_weight_bytes) / kMiB});
  }
  for (size_t i : view_tenants()) in.tenants.push_back(view_of(*tenants_[i]));
  return in;
}

RoundRecord Scheduler::round() {
  const Clock::time_point t0 = Clock::now();
  const BudgetQuery q{round_, ms_since(t_start_), reference_mib_, last_accounted_};
  const double budget = budget_ ? budget_->budget_mib(q) : std::numeric_limits<double>::infinity();
  last_budget_ = budget;
  const std::vector<size_t> who = view_tenants();
  const Plan plan = plan_round(view(budget), cfg_.planner);
  enforce(plan, who);  // before anyone steps
  step_all(plan, who);
  settle_residency();
  RoundRecord rec;
  rec.round = round_;
  rec.budget_mib = budget;
  account(rec, plan, who, ms_since(t0));
  up_streak_ = plan.up_ready && plan.counts.promote == 0 ? up_streak_ + 1 : 0;
  ++round_;
  return rec;
}

// Sheds (which need the rung's weights) first, then suspensions.
void Scheduler::enforce(const Plan& plan, const std::vector<size_t>& who) {
  for (size_t k = 0; k < who.size(); ++k) {
    if (plan.tenants[k].shed) shed(*tenants_[who[k]]);
  }
  for (size_t k = 0; k < who.size(); ++k) {
    Tenant& t = *tenants_[who[k]];
    if (t.status.state == TenantState::kRunning &&
        plan.tenants[k].state == TenantState::kSuspended) {
      t.gen->suspend();
      t.status.state = TenantState::kSuspended;
      if (t.spec.sink) {
        t.spec.sink->on_park({t.gen->rung_name(), last_budget_, t.gen->footprint_mib(t.gen->rung()),
                              "suspended by the scheduler"});
      }
    }
  }
}

void Scheduler::step_all(const Plan& plan, const std::vector<size_t>& who) {
  // Phase 0: moving down; 1: staying; 2: waking, starting, moving up (fixed before any step).
  std::vector<int> phase(who.size(), -1);
  for (size_t k = 0; k < who.size(); ++k) {
    const Tenant& t = *tenants_[who[k]];
    const TenantPlan& p = plan.tenants[k];
    if (p.state != TenantState::kRunning) continue;
    if (t.status.state != TenantState::kRunning) {
      phase[k] = 2;
    } else {
      phase[k] = p.rung > t.gen->rung() ? 0 : p.rung == t.gen->rung() ? 1 : 2;
    }
  }
  for (int ph = 0; ph < 3; ++ph) {
    if (ph == 2) settle_residency();  // what the moves down freed goes before anything loads
    std::vector<Tenant*> group;
    for (size_t k = 0; k < who.size(); ++k) {
      if (phase[k] != ph) continue;
      Tenant& t = *tenants_[who[k]];
      const int to = plan.tenants[k].rung;
      if (t.status.state == TenantState::kRunning) {
        if (to != t.gen->rung()) t.gen->force_migration(to);
      } else if (t.status.state == TenantState::kSuspended && to == t.gen->rung()) {
        t.gen->wake();
        if (t.spec.sink) t.spec.sink->on_resume({t.gen->rung_name(), 0, 0});
      } else {
        start(t, to);
      }
      t.status.state = TenantState::kRunning;
      group.push_back(&t);
    }
    step(group);
  }
}

// A waiting tenant starts on `rung`; a suspended one moves there by re-reading its context,
// its old cache freed first (the peak is the receiver alone).
void Scheduler::start(Tenant& t, int rung) {
  const Clock::time_point t0 = Clock::now();
  MigrationEvent m;
  if (t.gen) {
    m.from = t.gen->rung_name();
    m.direction = t.gen->rung() < rung ? "down" : "up";
    t.base = t.status.tokens();
    t.gen.reset();
    ++t.status.rereads;
    ladder_.release_unused();
  } else {
    t.admitted = admissions_++;
    t.status.admitted_round = round_;
  }
  t.gen = start_on(ladder_, rung, t.window, t.options());
  note_rung(t.status, ladder_.rung(rung).name());
  if (m.from.empty() || t.spec.sink == nullptr) return;
  m.to = ladder_.rung(rung).name();
  m.policy = "release-reprefill";
  m.requested = "wake";
  m.ms = ms_since(t0);
  m.pressure = pressure();
  m.context = static_cast<int64_t>(t.window.size()) - 1;
  m.at_token = t.status.tokens();
  m.budget_mib = last_budget_;
  m.note = "woken on another rung: its context re-read there";
  ++t.status.migrations;
  t.spec.sink->on_migration(m);
}

void Scheduler::shed(Tenant& t) {
  const int64_t drop = (t.gen->positions() - cfg_.shed_sink) / 2;
  t.capacity -= drop;
  const int64_t before = static_cast<int64_t>(t.window.size());
  t.base = t.status.tokens();
  t.gen = shed_into(ladder_, *t.gen, t.window, cfg_.shed_sink, drop, t.options());
  ++t.status.sheds;
  t.status.shed_positions += before - static_cast<int64_t>(t.window.size());
}

// Tenants on the same rung decode in one pass over its weights (Generation::step_together).
void Scheduler::step(const std::vector<Tenant*>& group) {
  if (group.empty()) return;
  std::vector<Generation*> gens;
  gens.reserve(group.size());
  for (Tenant* t : group) gens.push_back(t->gen.get());
  const Clock::time_point t0 = Clock::now();
  const std::vector<Step> steps = Generation::step_together(gens);
  const double share = ms_since(t0) / static_cast<double>(group.size());
  for (size_t i = 0; i < group.size(); ++i) record(*group[i], steps[i], share);
}

void Scheduler::record(Tenant& t, const Step& s, double ms) {
  t.status.step_ms += ms;
  EventSink* sink = t.spec.sink;
  if (sink && s.park) sink->on_park(*s.park);
  if (sink && s.resume) sink->on_resume(*s.resume);
  if (sink && s.heal) {
    HealEvent h = *s.heal;
    h.at_token += t.base;
    sink->on_heal(h);
  }
  if (s.migration) {
    ++t.status.migrations;
    if (sink) {
      MigrationEvent m = *s.migration;
      m.at_token += t.base;
      if (!std::isfinite(m.budget_mib)) {  // the generation has no budget of its own: ours
        m.budget_mib = last_budget_;
        m.pressure = pressure();
      }
      sink->on_migration(m);
    }
  }
  if (s.token) {
    const int64_t index = t.base + s.token->index;
    if (index != t.status.tokens()) {
      fail("tenant '{}': token {} arrived after {} tokens: the stream is not contiguous",
           t.status.name, index, t.status.tokens());
    }
    t.status.stream.push_back(s.token->token_id);
    t.window.push_back(s.token->token_id);
    note_rung(t.status, s.token->rung);
    if (sink) {
      TokenEvent e = *s.token;
      e.index = index;
      sink->on_token(e);
    }
  }
  if (s.done) finish(t, *s.done);
}

// The tenant's last generation ended (or it was cancelled): its cache goes now, and its sink
// hears one done for the whole tenant.
void Scheduler::finish(Tenant& t, const DoneEvent& d) {
  t.status.state = TenantState::kFinished;
  t.status.finished_round = round_;
  t.status.killed = d.killed;
  t.status.done_reason = d.reason;
  t.gen.reset();
  if (t.spec.sink == nullptr) return;
  DoneEvent whole = d;
  whole.tokens = t.status.tokens();
  whole.rungs_used = t.status.rungs_used;
  whole.migrations = t.status.migrations;
  t.spec.sink->on_done(whole);
}

// A rung that only suspended tenants hold is parked; one nobody holds is released.
void Scheduler::settle_residency() {
  for (int r = 0; r < ladder_.size(); ++r) {
    Rung& rung = ladder_.rung(r);
    if (ladder_.holders(r) > 0 && ladder_.users(r) == 0 && rung.state() == RungState::kLoaded)
      rung.park();
  }
  if (ladder_.release_unused() > 0) return_free_memory();
}

void Scheduler::account(RoundRecord& rec, const Plan& plan, const std::vector<size_t>& who,
                        double ms) {
  rec.predicted_mib = plan.usage_mib;
  rec.accounted_mib = accounted_mib();
  rec.overshoot_mib = rec.accounted_mib - rec.budget_mib;
  rec.fits = plan.fits;
  rec.exact = plan.exact;
  rec.lever = plan.lever;
  rec.counts = plan.counts;
  rec.ms = ms;
  if (cfg_.measure_rss) rec.rss_mib = to_mib(read_process_memory().rss_bytes) - rss_base_mib_;
  last_accounted_ = rec.accounted_mib;
  for (size_t k = 0; k < who.size(); ++k) {
    TenantStatus& s = tenants_[who[k]]->status;
    const TenantState planned = plan.tenants[k].state;
    if (planned != TenantState::kWaiting) s.ms_admitted += ms;
    if (planned == TenantState::kWaiting) {
      ++s.rounds_deferred;
      s.ms_deferred += ms;
    } else if (planned == TenantState::kSuspended) {
      ++s.rounds_suspended;
      s.ms_suspended += ms;
    }
  }
  for (const auto& t : tenants_) {
    t->status.rung = t->admitted_now() ? t->gen->rung() : -1;
    rec.tenants.push_back({t->status.state, t->status.rung, t->status.tokens()});
  }
}

}  // namespace molt::sched
