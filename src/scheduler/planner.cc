// One round's levers: an ordered search (defer, demote, park, shed), an exact search over the
// loaded rungs behind it, then recovery. Pure: the cost model is usage_mib() alone.
#include "molt/scheduler/planner.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <numeric>

#include "molt/common/error.h"

namespace molt::sched {
namespace {

constexpr double kInf = std::numeric_limits<double>::infinity();
using Assignment = std::vector<TenantPlan>;

double held(const TenantView& t, int r) {
  return t.held_mib.empty() ? t.own_mib[static_cast<size_t>(r)]
                            : t.held_mib[static_cast<size_t>(r)];
}
double own(const TenantView& t, int r) {
  return t.own_mib[static_cast<size_t>(r)];
}
bool admitted(const TenantView& t) {
  return t.state == TenantState::kRunning || t.state == TenantState::kSuspended;
}

void validate(const PlanInput& in) {
  if (std::isnan(in.budget_mib)) fail("planner: the budget is not a number");
  const size_t n = in.rungs.size();
  if (n == 0) fail("planner: the ladder has no rungs");
  for (size_t i = 0; i < in.tenants.size(); ++i) {
    const TenantView& t = in.tenants[i];
    if (t.own_mib.size() != n || (!t.held_mib.empty() && t.held_mib.size() != n)) {
      fail("planner: tenant {} has sizes for {} rungs, the ladder has {}", i, t.own_mib.size(), n);
    }
    if (admitted(t) && (t.rung < 0 || t.rung >= static_cast<int>(n))) {
      fail("planner: tenant {} is {} on rung {} (the ladder has {})", i, state_name(t.state),
           t.rung, n);
    }
    if (!(t.shed_mib >= 0)) fail("planner: tenant {} sheds {} MiB", i, t.shed_mib);
  }
}

bool fits(const PlanInput& in, const Assignment& p) {
  return usage_mib(in, p) <= in.budget_mib;
}

// With the (1 + up_margin) headroom that a move up or an admission should leave.
bool fits_with_margin(const PlanInput& in, const PlannerConfig& cfg, const Assignment& p) {
  return usage_mib(in, p) * (1 + cfg.up_margin) <= in.budget_mib;
}

// Admitted tenants in the order levers take them: background first, most recent first.
std::vector<size_t> victim_order(const PlanInput& in) {
  std::vector<size_t> v;
  for (size_t i = 0; i < in.tenants.size(); ++i) {
    if (admitted(in.tenants[i])) v.push_back(i);
  }
  std::stable_sort(v.begin(), v.end(), [&](size_t a, size_t b) {
    const TenantView &x = in.tenants[a], &y = in.tenants[b];
    if (x.priority != y.priority) return x.priority == Priority::kBackground;
    return x.admitted > y.admitted;
  });
  return v;
}

// Every unfinished tenant in the order recovery serves them: foreground first, first in line
// first.
std::vector<size_t> service_order(const PlanInput& in) {
  std::vector<size_t> v;
  for (size_t i = 0; i < in.tenants.size(); ++i) {
    if (in.tenants[i].state != TenantState::kFinished) v.push_back(i);
  }
  std::stable_sort(v.begin(), v.end(), [&](size_t a, size_t b) {
    const TenantView &x = in.tenants[a], &y = in.tenants[b];
    if (x.priority != y.priority) return x.priority == Priority::kForeground;
    return x.admitted < y.admitted;
  });
  return v;
}

// Lever 2: one rung of one tenant per pull, the first victim that can still go down.
bool demote_chain(const PlanInput& in, const std::vector<size_t>& victims, Assignment& p) {
  while (!fits(in, p)) {
    bool moved = false;
    for (size_t v : victims) {
      if (p[v].state != TenantState::kRunning) continue;
      const int d = next_down(in, in.tenants[v], p[v].rung);
      if (d < 0) continue;
      p[v].rung = d;
      moved = true;
      break;
    }
    if (!moved) return false;
  }
  return true;
}

// Lever 3: suspend victims one by one where they are (their demotion, if any, is undone).
bool park_chain(const PlanInput& in, const std::vector<size_t>& victims, Assignment& p) {
  for (size_t v : victims) {
    if (p[v].state != TenantState::kRunning) continue;
    p[v] = {TenantState::kSuspended, in.tenants[v].rung, false};
    if (fits(in, p)) return true;
  }
  return false;
}

// Lever 4: one shed per victim, on the rung its cache is on now.
bool shed_chain(const PlanInput& in, const std::vector<size_t>& victims, Assignment& p) {
  for (size_t v : victims) {
    const TenantView& t = in.tenants[v];
    if (t.shed_mib <= 0 || p[v].rung != t.rung || p[v].shed) continue;
    p[v].shed = true;
    if (fits(in, p)) return true;
  }
  return false;
}

void enforce(const PlanInput& in, Plan& out) {
  Assignment& p = out.tenants;
  const std::vector<size_t> victims = victim_order(in);
  if (demote_chain(in, victims, p)) return;
  const Assignment demoted = p;
  if (park_chain(in, victims, p)) return;
  const Assignment parked = p;
  Assignment best;
  if (min_usage_mib(in, false, &best) <= in.budget_mib) {
    p = best;
    out.exact = true;
    return;
  }
  if (shed_chain(in, victims, p)) return;
  p = demoted;
  if (shed_chain(in, victims, p)) return;
  if (min_usage_mib(in, true, &best) <= in.budget_mib) {
    p = best;
    out.exact = true;
    return;
  }
  p = parked;  // nothing fits: everyone suspended or deferred, the overshoot reported
}

// The highest rung (smallest index) a tenant may be placed on: a background tenant never goes
// above a running foreground one.
int top_allowed(const PlanInput& in, const Assignment& p, const TenantView& t) {
  if (t.priority == Priority::kForeground) return 0;
  int top = static_cast<int>(in.rungs.size());
  for (size_t i = 0; i < p.size(); ++i) {
    const bool fg = in.tenants[i].priority == Priority::kForeground;
    if (fg && p[i].state == TenantState::kRunning) top = std::min(top, p[i].rung);
  }
  return top == static_cast<int>(in.rungs.size()) ? 0 : top;
}

// Its own rung first (no re-read), then lower ones. Returns false when it stays suspended.
bool wake(const PlanInput& in, Assignment& p, size_t i) {
  const TenantView& t = in.tenants[i];
  const int top = top_allowed(in, p, t);
  std::vector<int> tries;
  if (t.rung >= top) tries.push_back(t.rung);
  if (t.can_move_suspended) {
    for (int r = std::max(top, t.rung + 1); r < static_cast<int>(in.rungs.size()); ++r)
      tries.push_back(r);
  }
  for (int r : tries) {
    p[i] = {TenantState::kRunning, r, false};
    if (fits(in, p)) return true;
  }
  p[i] = {TenantState::kSuspended, t.rung, false};
  return false;
}

// The highest rung that leaves the headroom, else the highest that fits; -1: it waits.
int place(const PlanInput& in, const PlannerConfig& cfg, Assignment& p, size_t i) {
  const int n = static_cast<int>(in.rungs.size());
  const int top = top_allowed(in, p, in.tenants[i]);
  for (int pass = 0; pass < 2; ++pass) {
    for (int r = top; r < n; ++r) {
      p[i] = {TenantState::kRunning, r, false};
      if (pass == 0 ? fits_with_margin(in, cfg, p) : fits(in, p)) return r;
    }
  }
  p[i] = {TenantState::kWaiting, -1, false};
  return -1;
}

// One move per tenant to the highest rung that keeps the headroom. Returns whether it moved.
bool promote(const PlanInput& in, const PlannerConfig& cfg, Assignment& p, size_t i) {
  const TenantView& t = in.tenants[i];
  if (t.state != TenantState::kRunning || p[i].state != TenantState::kRunning ||
      p[i].rung != t.rung) {
    return false;  // moved, stopped or started this round already
  }
  for (int r = top_allowed(in, p, t); r < t.rung; ++r) {
    p[i].rung = r;
    if (fits_with_margin(in, cfg, p)) return true;
  }
  p[i].rung = t.rung;
  return false;
}

// Moves up for the first priority class that has one; taken once the streak is long enough.
bool promote_all(const PlanInput& in, const PlannerConfig& cfg, const std::vector<size_t>& order,
                 Assignment& p) {
  Assignment trial = p;
  bool any = false;
  Priority first = Priority::kForeground;
  for (size_t i : order) {
    if (any && in.tenants[i].priority != first) break;
    if (promote(in, cfg, trial, i) && !any) {
      any = true;
      first = in.tenants[i].priority;
    }
  }
  if (any && in.up_streak + 1 >= cfg.up_after) p = std::move(trial);
  return any;
}

// Whether the tenant would fit with the ladder to itself (else it never blocks the line).
bool fits_alone(const PlanInput& in, const TenantView& t) {
  for (size_t r = 0; r < in.rungs.size(); ++r) {
    if (in.rungs[r].loaded_mib + t.own_mib[r] <= in.budget_mib) return true;
  }
  return false;
}

// Returns whether a move up was possible (Plan::up_ready).
bool recover(const PlanInput& in, const PlannerConfig& cfg, Assignment& p) {
  const std::vector<size_t> order = service_order(in);
  bool blocked = false;
  for (size_t i : order) {
    if (p[i].state == TenantState::kSuspended && !wake(in, p, i) && fits_alone(in, in.tenants[i]))
      blocked = true;
  }
  // First in line first: a tenant that could run, were the room free, keeps its place, so small
  // newcomers do not starve it.
  for (size_t i : order) {
    if (blocked || p[i].state != TenantState::kWaiting) continue;
    if (place(in, cfg, p, i) < 0 && fits_alone(in, in.tenants[i])) blocked = true;
  }
  return promote_all(in, cfg, order, p);
}

void tally(const PlanInput& in, Plan& out) {
  LeverCounts& c = out.counts;
  for (size_t i = 0; i < in.tenants.size(); ++i) {
    const TenantView& t = in.tenants[i];
    const TenantPlan& q = out.tenants[i];
    if (t.state == TenantState::kWaiting) {
      ++(q.state == TenantState::kWaiting ? c.defer : c.admit);
    } else if (t.state == TenantState::kRunning) {
      if (q.state == TenantState::kSuspended) ++c.park;
      if (q.state == TenantState::kRunning && q.rung > t.rung) ++c.demote;
      if (q.state == TenantState::kRunning && q.rung < t.rung) ++c.promote;
    } else if (t.state == TenantState::kSuspended && q.state == TenantState::kRunning) {
      ++c.wake;
    }
    if (q.shed) ++c.shed;
  }
  out.lever = c.shed     ? Lever::kShed
              : c.park   ? Lever::kPark
              : c.demote ? Lever::kDemote
              : c.defer  ? Lever::kDefer
                         : Lever::kNone;
}

// The accounting of one choice of loaded rungs (bit r of `mask`: some tenant runs on r), each
// tenant taking its cheapest option under it; `out` receives the choices.
double cost_for_mask(const PlanInput& in, uint32_t mask, bool allow_shed, Assignment* out) {
  const int n = static_cast<int>(in.rungs.size());
  double u = 0;
  for (int r = 0; r < n; ++r)
    u += (mask >> r & 1u) ? in.rungs[static_cast<size_t>(r)].loaded_mib : 0;
  // Per rung not loaded: everyone there moves away, or some stay and the rung is parked.
  std::vector<double> all_move(static_cast<size_t>(n), 0), stay(static_cast<size_t>(n), 0);
  std::vector<char> holders(static_cast<size_t>(n), 0);
  std::vector<TenantPlan> run_pick(in.tenants.size()), stay_pick(in.tenants.size());
  for (size_t i = 0; i < in.tenants.size(); ++i) {
    const TenantView& t = in.tenants[i];
    if (out) (*out)[i] = {t.state, t.rung, false};
    if (!admitted(t)) continue;
    const double shed = allow_shed ? t.shed_mib : 0;
    const bool movable = t.state == TenantState::kRunning || t.can_move_suspended;
    double run = kInf;
    for (int r = 0; r < n; ++r) {
      if (!(mask >> r & 1u) || (!movable && r != t.rung)) continue;
      const double c = own(t, r) - (r == t.rung ? shed : 0);
      if (c < run || (c == run && r == t.rung)) {
        run = c;
        run_pick[i] = {TenantState::kRunning, r, r == t.rung && shed > 0};
      }
    }
    const double st = held(t, t.rung) - shed;
    stay_pick[i] = {TenantState::kSuspended, t.rung, shed > 0};
    const size_t c = static_cast<size_t>(t.rung);
    holders[c] = 1;
    if (mask >> t.rung & 1u) {
      u += std::min(run, st);
      if (out) (*out)[i] = run <= st ? run_pick[i] : stay_pick[i];
      continue;
    }
    all_move[c] += run;
    stay[c] += std::min(run, st);
  }
  for (int r = 0; r < n; ++r) {
    const size_t c = static_cast<size_t>(r);
    if ((mask >> r & 1u) || !holders[c]) continue;
    const double parked = in.rungs[c].parked_mib + stay[c];
    const bool move = all_move[c] <= parked;
    u += move ? all_move[c] : parked;
    if (!out) continue;
    for (size_t i = 0; i < in.tenants.size(); ++i) {
      const TenantView& t = in.tenants[i];
      if (!admitted(t) || t.rung != r) continue;
      const double st = held(t, r) - (allow_shed ? t.shed_mib : 0);
      const double run = run_pick[i].state == TenantState::kRunning
                             ? own(t, run_pick[i].rung) - (run_pick[i].shed ? t.shed_mib : 0)
                             : kInf;
      (*out)[i] = move || run <= st ? run_pick[i] : stay_pick[i];
    }
  }
  return u;
}

}  // namespace

const char* priority_name(Priority p) {
  return p == Priority::kForeground ? "foreground" : "background";
}

const char* state_name(TenantState s) {
  switch (s) {
    case TenantState::kWaiting:
      return "waiting";
    case TenantState::kRunning:
      return "running";
    case TenantState::kSuspended:
      return "suspended";
    case TenantState::kFinished:
      return "finished";
  }
  return "?";
}

const char* lever_name(Lever l) {
  switch (l) {
    case Lever::kNone:
      return "none";
    case Lever::kDefer:
      return "defer";
    case Lever::kDemote:
      return "demote";
    case Lever::kPark:
      return "park";
    case Lever::kShed:
      return "shed";
  }
  return "?";
}

int next_down(const PlanInput& in, const TenantView& t, int r) {
  const double here = in.rungs[static_cast<size_t>(r)].loaded_mib + own(t, r);
  for (int d = r + 1; d < static_cast<int>(in.rungs.size()); ++d) {
    if (in.rungs[static_cast<size_t>(d)].loaded_mib + own(t, d) < here) return d;
  }
  return -1;
}

double usage_mib(const PlanInput& in, std::span<const TenantPlan> plan) {
  const size_t n = in.rungs.size();
  std::vector<char> runs(n, 0), holds(n, 0);
  double u = 0;
  for (size_t i = 0; i < plan.size(); ++i) {
    const TenantView& t = in.tenants[i];
    const TenantPlan& q = plan[i];
    const double shed = q.shed ? t.shed_mib : 0;
    if (q.state == TenantState::kRunning) {
      runs[static_cast<size_t>(q.rung)] = 1;
      u += own(t, q.rung) - shed;
    } else if (q.state == TenantState::kSuspended) {
      holds[static_cast<size_t>(q.rung)] = 1;
      u += held(t, q.rung) - shed;
    }
  }
  for (size_t r = 0; r < n; ++r) {
    u += runs[r] ? in.rungs[r].loaded_mib : holds[r] ? in.rungs[r].parked_mib : 0;
  }
  return u;
}

double min_usage_mib(const PlanInput& in, bool allow_shed, std::vector<TenantPlan>* best) {
  validate(in);
  const size_t n = in.rungs.size();
  if (n > 16) return kInf;
  double lowest = kInf;
  uint32_t arg = 0;
  for (uint32_t mask = 0; mask < (1u << n); ++mask) {
    const double u = cost_for_mask(in, mask, allow_shed, nullptr);
    if (u < lowest) {
      lowest = u;
      arg = mask;
    }
  }
  if (best) {
    best->assign(in.tenants.size(), TenantPlan{});
    cost_for_mask(in, arg, allow_shed, best);
  }
  return lowest;
}

Plan plan_round(const PlanInput& in, const PlannerConfig& cfg) {
  validate(in);
  Plan out;
  out.tenants.reserve(in.tenants.size());
  for (const TenantView& t : in.tenants) out.tenants.push_back({t.state, t.rung, false});
  out.enforced = !fits(in, out.tenants);
  if (out.enforced) {
    enforce(in, out);
  } else {
    out.up_ready = recover(in, cfg, out.tenants);
  }
  out.usage_mib = usage_mib(in, out.tenants);
  out.overshoot_mib = out.usage_mib - in.budget_mib;
  out.fits = out.usage_mib <= in.budget_mib;
  tally(in, out);
  return out;
}

}  // namespace molt::sched
