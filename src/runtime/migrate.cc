// Changing rung between two tokens (DESIGN.md §3). migrate() is the whole story of a migration;
// the policies differ only in what is resident when.
#include <algorithm>
#include <cmath>
#include <utility>
#include <vector>

#include "molt/common/error.h"
#include "molt/ladder/process_memory.h"
#include "molt/runtime/metrics.h"
#include "molt/transfer/map_file.h"
#include "runtime/state.h"

namespace molt::runtime {
namespace {

// Why a route cannot carry a cache through a map, or "" when it can.
std::string no_map_reason(const Ladder& l, int from, int to) {
  const ManifestRoute* r = l.route(from, to);
  const std::string name = l.rung(from).name() + " → " + l.rung(to).name();
  if (r == nullptr) return fmt::format("ladder.json has no route {}", name);
  if (r->method == "reprefill") return fmt::format("route {} re-prefills (ladder.json)", name);
  if (!r->maps_present()) {
    return fmt::format("route {}: no maps yet ({} has no index.json)", name, r->maps.string());
  }
  return "";
}

// auto: a re-read is exact, so it is taken when its stall, estimated at the speed of this
// generation's own native prefills, fits auto_max_stall_ms. Otherwise the route's evidence
// (ladder.json, measured on held-out text) says whether the map keeps the specifics: needle
// accuracy with the switch right before the answer, the map's against the receiver's own, at
// the measured context nearest this one. molt when it keeps at least auto_min_retention of
// them, else heal (the map now, the native cache a few decode steps later).
Policy choose_auto(const State& g, int to, std::string& note) {
  const int64_t n = static_cast<int64_t>(g.context().size());
  const Rung& r = g.ladder.rung(to);
  if (n < g.o.auto_reprefill_below) {
    note = fmt::format("auto: {} tokens of context < auto_reprefill_below {}: re-read", n,
                       g.o.auto_reprefill_below);
    return Policy::kReleaseReprefill;
  }
  std::string reread;
  if (g.prefill_flops_per_ms > 0) {
    const double est = prefill_flops(r.config(), n) / g.prefill_flops_per_ms;
    if (est <= g.o.auto_max_stall_ms) {
      note = fmt::format(
          "auto: re-reading {} tokens on {} takes ~{:.0f} ms at this generation's prefill speed "
          "(≤ {:g} ms): exact, re-read",
          n, r.name(), est, g.o.auto_max_stall_ms);
      return Policy::kReleaseReprefill;
    }
    reread =
        fmt::format("re-reading {} tokens ~{:.0f} ms > {:g} ms", n, est, g.o.auto_max_stall_ms);
  } else {
    reread = "re-read speed not measured";
  }
  const int64_t L = r.config().num_hidden_layers;
  const int64_t heal_steps = L * ((n + g.o.heal_chunk - 1) / g.o.heal_chunk);
  const std::string heal = fmt::format("heal (native again after {} decode steps)", heal_steps);
  const RouteEvidence& ev = g.ladder.route(g.rung, to)->evidence;
  if (!ev.present || ev.needles.empty()) {
    note = fmt::format("auto: {}; no evidence for the route in ladder.json: {}", reread, heal);
    return Policy::kHeal;
  }
  const RouteEvidence::Needles* near = &ev.needles.front();
  for (const RouteEvidence::Needles& p : ev.needles) {
    const double x = static_cast<double>(std::max<int64_t>(n, 1));
    if (std::abs(std::log(p.tokens / x)) < std::abs(std::log(near->tokens / x))) near = &p;
  }
  if (near->receiver < 0.2) {
    note = fmt::format(
        "auto: {}; at ~{:.0f} tokens the receiver itself answers {:.2f} of the needles, too few "
        "to judge the map: {}",
        reread, near->tokens, near->receiver, heal);
    return Policy::kHeal;
  }
  const double kept = near->map / near->receiver;
  if (kept >= g.o.auto_min_retention) {
    note = fmt::format(
        "auto: {}; the map keeps {:.2f} of the receiver's needle accuracy at ~{:.0f} tokens "
        "(≥ {:g}): molt",
        reread, kept, near->tokens, g.o.auto_min_retention);
    return Policy::kMolt;
  }
  note = fmt::format(
      "auto: {}; the map keeps {:.2f} of the receiver's needle accuracy at ~{:.0f} tokens "
      "(< {:g}): {}",
      reread, kept, near->tokens, g.o.auto_min_retention, heal);
  return Policy::kHeal;
}

// The policy that will run for the generation's requested one, and why when it differs.
Policy resolve_policy(const State& g, int to, std::string& note) {
  const Policy requested = g.o.policy;
  const std::string why_not = no_map_reason(g.ladder, g.rung, to);
  switch (requested) {
    case Policy::kHold:
    case Policy::kSmall:
      return Policy::kReleaseReprefill;  // only reached when resuming a parked cache elsewhere
    case Policy::kMolt:
    case Policy::kHeal:
      if (why_not.empty()) return requested;
      note = why_not + "; released the sender and re-prefilled";
      return Policy::kReleaseReprefill;
    case Policy::kAuto:
      if (!why_not.empty()) {
        note = "auto: " + why_not;
        return Policy::kReleaseReprefill;
      }
      return choose_auto(g, to, note);
    default:
      return requested;
  }
}

// Accounted peak (bytes) of a policy: what is resident at its worst moment.
double accounted_peak(const State& g, int from, int to, Policy policy, const MapSummary& summary) {
  const Rung &s = g.ladder.rung(from), &r = g.ladder.rung(to);
  const double kv_s = static_cast<double>(g.kv_bytes(from));
  const double receiver = g.footprint_mib(to) * kMiB;
  if (policy == Policy::kReprefill)
    return receiver + static_cast<double>(s.resident_bytes()) + kv_s;
  if (policy != Policy::kMolt && policy != Policy::kHeal) return receiver;
  // The map loads before the receiver's weights are touched, then stays until applied.
  const double map = summary.file_bytes;
  const double parked_s = static_cast<double>(s.footprint().heap_weight_bytes);
  return std::max(parked_s + kv_s + static_cast<double>(r.footprint().heap_weight_bytes) + 2 * map,
                  receiver + parked_s + kv_s + map);
}

// This generation starts decoding on rung r: resident, held, used. Returns the load ms. A
// checkpoint that cannot be read throws before anything is counted.
double arrive(State& g, int r) {
  const double ms = g.ladder.rung(r).load();
  g.ladder.hold(r);
  g.ladder.use(r);
  return ms;
}

}  // namespace

void leave(State& g, int r) {
  if (g.using_rung) g.ladder.unuse(r);
  g.using_rung = false;
  g.ladder.drop(r);
  g.rung = -1;  // the cache, if still here, goes with it
  if (g.ladder.holders(r) == 0) g.ladder.rung(r).release();
  return_free_memory();
}

namespace {

// The receiver re-reads the context natively into a fresh cache.
std::unique_ptr<KVCache> reread(State& g, int to, MigrationEvent& e) {
  const Clock::time_point t0 = Clock::now();
  auto dst = g.new_cache(to);
  const Clock::time_point t1 = Clock::now();
  prefill_chunked(g.ladder.rung(to).model(), *dst, g.context(), g.o.prefill_chunk, {});
  const Clock::time_point t2 = Clock::now();
  e.carry_ms = ms_between(t0, t2);
  note_prefill_speed(g, g.ladder.rung(to).config(), static_cast<int64_t>(g.context().size()),
                     ms_between(t1, t2));
  return dst;
}

// molt / heal: the route's map carries the sender's cache into the receiver's geometry. Returns
// null when the map is refused (missing, corrupt, bad checksum, wrong geometry): the caller
// falls back to a re-read, and the note says why. For heal, `heal_from` receives the layer heal
// starts at (the map's native layers) and the hidden states entering it.
struct HealStart {
  int64_t layer = 0;
  std::vector<float> hidden;
};
std::unique_ptr<KVCache> carry(State& g, const MigrationPlan& p, MigrationEvent& e,
                               HealStart* heal_from = nullptr) {
  Rung &sender = g.ladder.rung(p.from), &receiver = g.ladder.rung(p.to);
  // The map loads (checked against both geometries) before the receiver's weights are touched,
  // so its transient does not add to theirs.
  Clock::time_point t0 = Clock::now();
  receiver.open_parked();
  std::unique_ptr<CacheMap> map;
  try {
    map = CacheMap::load(g.ladder.route(p.from, p.to)->maps, sender.model(), receiver.model());
  } catch (const std::exception& err) {
    e.note +=
        (e.note.empty() ? "" : "; ") + fmt::format("map refused ({}): re-read instead", err.what());
    return nullptr;
  }
  e.carry_ms = ms_between(t0, Clock::now());
  e.load_ms = arrive(g, p.to);
  t0 = Clock::now();
  auto dst = g.new_cache(p.to);
  map->apply(sender.model(), *g.cache, receiver.model(), g.context(), g.o.transfer, *dst,
             heal_from != nullptr ? &heal_from->hidden : nullptr);
  e.carry_ms += ms_between(t0, Clock::now());
  const int64_t n = dst->size();
  const double full = prefill_flops(receiver.config(), n);
  const double mapped = transfer_flops(*map, receiver.config(), n);
  // heal re-runs the layers the map did not run natively over every carried position later:
  // nothing is saved, the rest of the re-prefill is deferred.
  if (heal_from != nullptr) heal_from->layer = map->data().features.native_layers;
  e.flops_saved = p.policy == Policy::kHeal ? 0 : std::clamp(1.0 - mapped / full, 0.0, 1.0);
  e.deferred_flops =
      p.policy == Policy::kHeal ? full - native_layer_flops(*map, receiver.config(), n) : 0;
  return dst;
}

}  // namespace

MigrationPlan plan_migration(const State& g, int to, double budget_mib) {
  MigrationPlan p;
  p.from = g.rung;
  p.to = to;
  // The map file's size, looked up once per migration by the policies that may use it.
  const ManifestRoute* route = g.ladder.route(g.rung, to);
  const bool may_map =
      g.o.policy == Policy::kMolt || g.o.policy == Policy::kHeal || g.o.policy == Policy::kAuto;
  const MapSummary map =
      may_map && route && route->method == "maps" ? summarize_map_dir(route->maps) : MapSummary{};
  p.policy = resolve_policy(g, to, p.note);
  p.peak_mib = accounted_peak(g, p.from, to, p.policy, map) / kMiB;
  const double receiver = g.footprint_mib(to);
  if (g.o.policy == Policy::kAuto && (p.policy == Policy::kMolt || p.policy == Policy::kHeal) &&
      p.peak_mib > budget_mib && receiver <= budget_mib) {
    p.policy = Policy::kReleaseReprefill;
    p.note += fmt::format(
        "; but the sender's cache beside the receiver ({:.1f} MiB) would not fit {:.1f} MiB: "
        "re-prefill",
        p.peak_mib, budget_mib);
    p.peak_mib = receiver;
  }
  return p;
}

MigrationEvent migrate(State& g, const MigrationPlan& p) {
  Ladder& l = g.ladder;
  Rung &sender = l.rung(p.from), &receiver = l.rung(p.to);
  const int64_t n = static_cast<int64_t>(g.context().size());
  MigrationEvent e;
  e.from = sender.name();
  e.to = receiver.name();
  e.policy = policy_name(p.policy);
  e.requested = policy_name(g.o.policy);
  e.direction = p.to > p.from ? "down" : "up";
  e.context = n;
  e.peak_mib = p.peak_mib;
  e.note = p.note;
  g.heal.reset();
  if (g.meter) g.evidence_ms += g.meter->before(g, p);
  if (g.using_rung) l.unuse(p.from);  // this generation stops reading the sender's weights
  g.using_rung = false;
  const bool alone = l.users(p.from) == 0;

  Policy policy = p.policy;
  std::unique_ptr<KVCache> dst;
  HealStart heal_from;  // heal: where the map's native layers leave it
  switch (policy) {
    case Policy::kReprefill:  // C: the receiver loads beside the sender, then re-reads the text
      if (g.meter) g.meter->window_open();
      e.load_ms = arrive(g, p.to);
      dst = reread(g, p.to, e);
      break;
    case Policy::kReleaseReprefill:  // the sender goes first: the peak is the receiver alone
      g.cache.reset();
      leave(g, p.from);
      if (g.meter) g.meter->window_open();
      e.load_ms = arrive(g, p.to);
      dst = reread(g, p.to, e);
      break;
    case Policy::kMolt:  // D: the sender's weights leave before the receiver's arrive
    case Policy::kHeal:
      if (alone) sender.park();
      if (g.meter) g.meter->window_open();
      dst = carry(g, p, e, &heal_from);
      if (!dst) {  // the map was refused: release the sender, re-read on the receiver
        policy = Policy::kReleaseReprefill;
        e.policy = policy_name(policy);
        g.cache.reset();
        leave(g, p.from);
        e.load_ms = arrive(g, p.to);
        dst = reread(g, p.to, e);
      }
      break;
    default:
      fail("migrate: policy {} does not migrate", policy_name(p.policy));
  }
  if (dst->size() != n)
    fail("migrate: the receiver's cache holds {} positions, expected {}", dst->size(), n);
  g.cache.reset();
  if (policy != Policy::kReleaseReprefill) leave(g, p.from);
  g.cache = std::move(dst);
  g.rung = p.to;
  g.using_rung = true;
  if (policy == Policy::kHeal) {
    g.heal = std::make_unique<HealJob>(g.context(), heal_from.layer, std::move(heal_from.hidden));
  }
  if (g.meter) g.meter->after(e);
  return e;
}

void note_prefill_speed(State& g, const ModelConfig& c, int64_t n, double ms) {
  if (n > 0 && ms > 0) g.prefill_flops_per_ms = prefill_flops(c, n) / ms;
}

void prefill_chunked(const Model& m, KVCache& cache, std::span<const int32_t> tokens, int64_t chunk,
                     std::span<float> last_logits) {
  const int64_t n = static_cast<int64_t>(tokens.size());
  chunk = std::max<int64_t>(1, chunk);
  for (int64_t i = 0; i < n; i += chunk) {
    const int64_t len = std::min(chunk, n - i);
    const bool last = i + len == n;
    m.forward(tokens.subspan(static_cast<size_t>(i), static_cast<size_t>(len)), cache, {},
              last ? last_logits : std::span<float>());
  }
}

}  // namespace molt::runtime
