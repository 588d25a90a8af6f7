#include "molt/bench/switch_bench.h"

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <random>

#include "molt/common/error.h"
#include "molt/runtime/switch_cost.h"
#include "molt/transfer/map_file.h"

namespace molt {

bool write_shape_map(const Ladder& l, int from, int to, int64_t k) {
  const ManifestRoute* route = l.route(from, to);
  if (route == nullptr || route->method != "maps") {
    fail("shape map: ladder.json has no maps route {} → {}", l.rung(from).name(),
         l.rung(to).name());
  }
  if (route->maps_present()) return false;
  auto s = Model::load(l.rung(from).path()), r = Model::load(l.rung(to).path());
  MapData map;
  map.method = "ridge";
  map.sender = RungSpec::of(*s, l.rung(from).name());
  map.receiver = RungSpec::of(*r, l.rung(to).name());
  const CacheGeometry gs = s->cache_geometry(), gr = r->cache_geometry();
  k = std::min(k, gs.n_layers);
  std::mt19937 rng(7);
  std::uniform_real_distribution<float> u(-0.01f, 0.01f);
  for (int64_t j = 0; j < gr.n_layers; ++j) {
    LayerMap L;
    L.kv_s = gs.kv_dim();
    const int64_t centre = (2 * j + 1) * gs.n_layers / (2 * gr.n_layers);
    const int64_t first = std::clamp<int64_t>(centre - k / 2, 0, gs.n_layers - k);
    for (int64_t i = 0; i < k; ++i) L.k_sources.push_back(first + i);
    L.v_sources = L.k_sources;
    L.k_weight.resize(static_cast<size_t>(gr.kv_dim() * k * gs.kv_dim()));
    for (float& w : L.k_weight) w = u(rng);
    L.v_weight = L.k_weight;
    L.k_bias.assign(static_cast<size_t>(gr.kv_dim()), 0.0f);
    L.v_bias = L.k_bias;
    map.layers.push_back(std::move(L));
  }
  map.info["k"] = k;
  map.info["note"] =
      fmt::format("shape-only map (k = {}) written by molt bench switch: random values", k);
  write_map_dir(route->maps, map);
  return true;
}

int evict_page_cache(const std::string& dir) {
  int n = 0;
  for (const auto& e : std::filesystem::directory_iterator(dir)) {
    if (!e.is_regular_file()) continue;
    const int fd = ::open(e.path().c_str(), O_RDONLY);
    if (fd < 0) continue;
    n += ::posix_fadvise(fd, 0, 0, POSIX_FADV_DONTNEED) == 0;
    ::close(fd);
  }
  return n;
}

nlohmann::json run_switch_bench(Ladder& ladder, std::span<const int32_t> text,
                                const SwitchBenchOptions& o,
                                const std::function<void(int64_t, int64_t)>& progress) {
  using json = nlohmann::json;
  if (o.routes.empty() || o.contexts.empty() || o.policies.empty() || o.repeats < 1) {
    fail("switch bench: no routes, contexts, policies or repeats");
  }
  const int64_t longest = *std::max_element(o.contexts.begin(), o.contexts.end());
  if (static_cast<int64_t>(text.size()) <= longest) {
    fail("switch bench: {} tokens of text, a context of {} needs more", text.size(), longest);
  }
  json rows = json::array();
  const int64_t total = static_cast<int64_t>(
      o.routes.size() * o.contexts.size() * o.policies.size() * 2 * static_cast<size_t>(o.repeats));
  int64_t done = 0;
  for (const auto& [from_name, to_name] : o.routes) {
    const int from = ladder.index(from_name), to = ladder.index(to_name);
    for (const int64_t n : o.contexts) {
      const std::span<const int32_t> ids = text.first(static_cast<size_t>(n + 1));
      for (const Policy p : o.policies) {
        for (const bool cold : {false, true}) {
          std::vector<MigrationEvent> runs;
          for (int i = 0; i < o.repeats; ++i) {
            if (cold) evict_page_cache(ladder.rung(to).path().string());
            SwitchCostOptions so;
            so.policy = p;
            so.native_sender_cache = !o.fill_sender;
            runs.push_back(measure_switch(ladder, from, to, ids, so));
            if (progress) progress(++done, total);
          }
          std::vector<double> ms;
          ms.reserve(runs.size());
          for (const MigrationEvent& e : runs) ms.push_back(e.ms);
          std::vector<double> sorted = ms;
          std::sort(sorted.begin(), sorted.end());
          const size_t mid = sorted.size() / 2;
          const MigrationEvent& m = *std::find_if(
              runs.begin(), runs.end(), [&](const auto& e) { return e.ms == sorted[mid]; });
          rows.push_back({{"from", from_name},
                          {"to", to_name},
                          {"context", n},
                          {"policy", policy_name(p)},
                          {"ran", m.policy},
                          {"cache", cold ? "cold" : "warm"},
                          {"ms", m.ms},
                          {"runs", ms},
                          {"load_ms", m.load_ms},
                          {"carry_ms", m.carry_ms},
                          {"first_decode_ms", m.first_decode_ms},
                          {"flops_saved", m.flops_saved},
                          {"peak_mib", m.peak_mib}});
        }
      }
    }
  }
  json policies = json::array();
  for (Policy p : o.policies) policies.push_back(policy_name(p));
  return {{"contexts", o.contexts}, {"policies", policies}, {"repeats", o.repeats}, {"rows", rows}};
}

}  // namespace molt
