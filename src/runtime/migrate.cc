// Changing rung between two tokens. migrate() is the whole story of a migration; the policies
// differ only in what is resident when.
#include <algorithm>
#include <chrono>
#include <nlohmann/json.hpp>

#include "molt/common/error.h"
#include "molt/formats/safetensors.h"
#include "molt/ladder/process_memory.h"
#include "runtime/generation.h"

namespace molt::runtime {
namespace {

constexpr double kMiB = 1024.0 * 1024.0;

using Clock = std::chrono::steady_clock;
double ms_since(Clock::time_point t0) {
  return std::chrono::duration<double, std::milli>(Clock::now() - t0).count();
}

// Held-out relative residual of a map folder (mean of K and V), read from the map file's
// header without loading it; negative when the metadata does not say.
double map_residual(const std::filesystem::path& maps) {
  try {
    auto file = SafetensorsFile::open(maps / "map.safetensors");
    auto it = file->metadata().find("residuals");
    if (it == file->metadata().end()) return -1;
    const auto j = nlohmann::json::parse(it->second);
    const auto& t = j.at("total");
    return 0.5 * (t.at("k").at("rel_rms").get<double>() + t.at("v").at("rel_rms").get<double>());
  } catch (const std::exception&) {
    return -1;
  }
}

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

// Bytes of a route's map file: about what the loaded map holds; loading it briefly needs twice
// that (the file's pages and the copy).
double map_bytes(const Ladder& l, int from, int to) {
  const ManifestRoute* r = l.route(from, to);
  std::error_code ec;
  const auto n = r ? std::filesystem::file_size(r->maps / "map.safetensors", ec) : 0;
  return ec ? 0.0 : static_cast<double>(n);
}

}  // namespace

size_t Generation::kv_bytes(int r) const {
  const Rung& rung = ladder.rung(r);
  size_t b = rung.footprint().kv_bytes(capacity);
  if (keep_hidden) {
    const ModelConfig& c = rung.config();
    b += static_cast<size_t>((c.num_hidden_layers + 1) * c.hidden_size * capacity) * sizeof(float);
  }
  return b;
}

double Generation::footprint_mib(int r) const {
  const Footprint& f = ladder.rung(r).footprint();
  return static_cast<double>(f.total(0) + kv_bytes(r)) / kMiB;
}

std::unique_ptr<KVCache> Generation::new_cache(int r) const {
  return std::make_unique<KVCache>(ladder.rung(r).model().new_cache(capacity, keep_hidden));
}

std::unique_ptr<KVCache> prefill_chunked(const Model& m, std::unique_ptr<KVCache> cache,
                                         std::span<const int32_t> tokens, int64_t chunk,
                                         std::vector<float>* last_logits) {
  const int64_t n = static_cast<int64_t>(tokens.size());
  chunk = std::max<int64_t>(1, chunk);
  std::vector<float> logits;
  for (int64_t i = 0; i < n; i += chunk) {
    const int64_t len = std::min(chunk, n - i);
    const bool last = i + len == n;
    if (last && last_logits) logits.resize(static_cast<size_t>(m.config().vocab_size));
    m.forward(tokens.subspan(static_cast<size_t>(i), static_cast<size_t>(len)), *cache, {},
              last && last_logits ? std::span<float>(logits) : std::span<float>());
  }
  if (last_logits) *last_logits = std::move(logits);
  return cache;
}

MigrationPlan plan_migration(const Generation& g, int to, double budget_mib) {
  MigrationPlan p;
  p.from = g.rung;
  p.to = to;
  const Policy requested = g.o.policy;
  p.policy = requested;
  const int64_t n = static_cast<int64_t>(g.context().size());
  const std::string why_not = no_map_reason(g.ladder, p.from, to);

  if (requested == Policy::kHold || requested == Policy::kSmall) {
    p.policy = Policy::kReleaseReprefill;  // only reached when resuming a parked cache elsewhere
  } else if (requested == Policy::kAuto) {
    if (!why_not.empty()) {
      p.policy = Policy::kReleaseReprefill;
      p.note = "auto: " + why_not;
    } else if (n < g.o.auto_reprefill_below) {
      p.policy = Policy::kReleaseReprefill;
      p.note = fmt::format("auto: {} tokens of context < {}: re-prefill is cheap and exact", n,
                           g.o.auto_reprefill_below);
    } else {
      const double res = map_residual(g.ladder.route(p.from, to)->maps);
      if (res >= 0 && res <= g.o.auto_max_residual) {
        p.policy = Policy::kMolt;
        p.note =
            fmt::format("auto: map residual {:.2f} ≤ {:.2f}: molt", res, g.o.auto_max_residual);
      } else {
        p.policy = Policy::kHeal;
        p.note = res >= 0 ? fmt::format("auto: map residual {:.2f} > {:.2f}: heal", res,
                                        g.o.auto_max_residual)
                          : "auto: map quality unknown: heal";
      }
    }
  } else if ((requested == Policy::kMolt || requested == Policy::kHeal) && !why_not.empty()) {
    p.policy = Policy::kReleaseReprefill;
    p.note = why_not + "; released the sender and re-prefilled";
  }

  // Accounted peak: what is resident at the worst moment of each policy.
  const Rung &s = g.ladder.rung(p.from), &r = g.ladder.rung(to);
  const Footprint &fs = s.footprint(), &fr = r.footprint();
  const double kv_s = static_cast<double>(g.kv_bytes(p.from));
  const double receiver = static_cast<double>(fr.total(0) + g.kv_bytes(to));
  double peak = receiver;
  switch (p.policy) {
    case Policy::kReprefill:
      peak += static_cast<double>(s.resident_bytes()) + kv_s;
      break;
    case Policy::kMolt:
    case Policy::kHeal: {
      // The map loads before the receiver's weights are touched, then stays until applied.
      const double map = map_bytes(g.ladder, p.from, to),
                   parked_s = static_cast<double>(fs.heap_weight_bytes);
      peak = std::max(parked_s + kv_s + static_cast<double>(fr.heap_weight_bytes) + 2 * map,
                      receiver + parked_s + kv_s + map);
      break;
    }
    default:
      break;
  }
  p.peak_mib = peak / kMiB;
  if (requested == Policy::kAuto && (p.policy == Policy::kMolt || p.policy == Policy::kHeal) &&
      p.peak_mib > budget_mib && receiver / kMiB <= budget_mib) {
    p.policy = Policy::kReleaseReprefill;
    p.note += fmt::format(
        "; but the sender's cache beside the receiver ({:.1f} MiB) would not fit "
        "{:.1f} MiB: re-prefill",
        p.peak_mib, budget_mib);
    p.peak_mib = receiver / kMiB;
  }
  return p;
}

MigrationEvent migrate(Generation& g, const MigrationPlan& p) {
  Rung& sender = g.ladder.rung(p.from);
  Rung& receiver = g.ladder.rung(p.to);
  const std::span<const int32_t> context = g.context();
  const int64_t n = static_cast<int64_t>(context.size());
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

  // Evidence only, before anything moves: the sender's next-token distribution at the seam.
  g.evidence_ms = 0;
  if (g.o.measure_seams && sender.state() == RungState::kLoaded) {
    const auto t = Clock::now();
    g.sender_seam_logits = sender.model().decode(g.history.back(), *g.cache);
    g.cache->truncate(n);
    g.evidence_ms = ms_since(t);
  }
  // Measured peak = RSS high-water mark less the process's own overhead (code, tokenizer,
  // BLAS and thread buffers: RSS beyond the accounted weights and cache just before the cut).
  // The window opens once the sender is what the policy makes it: still resident for
  // reprefill, released or parked for the others (the budget cut finds it resident).
  if (g.o.measure_rss) {
    const double accounted = static_cast<double>(g.ladder.resident_bytes() + g.kv_bytes(p.from));
    g.rss_base = static_cast<size_t>(std::max(0.0, read_process_memory().rss_bytes - accounted));
  }
  auto open_rss_window = [&] {
    if (g.o.measure_rss) reset_peak_rss();
  };

  std::unique_ptr<KVCache> dst;
  Clock::time_point t0;
  switch (p.policy) {
    case Policy::kReprefill:  // C: the receiver loads beside the sender, then re-reads the text
      open_rss_window();
      e.load_ms = receiver.load();
      t0 = Clock::now();
      dst =
          prefill_chunked(receiver.model(), g.new_cache(p.to), context, g.o.prefill_chunk, nullptr);
      e.carry_ms = ms_since(t0);
      g.cache.reset();
      sender.release();
      return_free_memory();
      break;

    case Policy::kReleaseReprefill:  // the sender goes first: the peak is the receiver alone
      g.cache.reset();
      sender.release();
      return_free_memory();
      open_rss_window();
      e.load_ms = receiver.load();
      t0 = Clock::now();
      dst =
          prefill_chunked(receiver.model(), g.new_cache(p.to), context, g.o.prefill_chunk, nullptr);
      e.carry_ms = ms_since(t0);
      break;

    case Policy::kMolt:  // D: the sender's weights leave before the receiver's arrive
    case Policy::kHeal: {
      sender.park();
      open_rss_window();
      // The map loads (and is checked against both geometries) before the receiver's weights
      // are touched, so its transient does not add to theirs.
      t0 = Clock::now();
      receiver.open_parked();
      std::unique_ptr<CacheMap> map =
          CacheMap::load(g.ladder.route(p.from, p.to)->maps, sender.model(), receiver.model());
      e.carry_ms = ms_since(t0);
      e.load_ms = receiver.load();
      t0 = Clock::now();
      dst = g.new_cache(p.to);
      map->apply(sender.model(), *g.cache, receiver.model(), context, g.o.transfer, *dst);
      e.carry_ms += ms_since(t0);
      const double full = prefill_flops(receiver.config(), n);
      e.flops_saved =
          std::clamp(1.0 - map->flops_per_position() * static_cast<double>(n) / full, 0.0, 1.0);
      map.reset();  // maps are loaded per migration: memory is what is short
      g.cache.reset();
      sender.release();
      return_free_memory();
      if (p.policy == Policy::kHeal) g.heal = std::make_unique<HealJob>(receiver.model(), context);
      break;
    }
    default:
      fail("migrate: policy {} does not migrate", policy_name(p.policy));
  }
  if (dst->size() != n)
    fail("migrate: the receiver's cache holds {} positions, expected {}", dst->size(), n);
  g.cache = std::move(dst);
  g.rung = p.to;
  if (g.o.measure_rss) {
    const ProcessMemory m = read_process_memory();
    e.rss_peak_mib = (static_cast<double>(m.peak_bytes) - static_cast<double>(g.rss_base)) / kMiB;
  }
  return e;
}

}  // namespace molt::runtime
