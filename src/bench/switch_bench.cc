#include "molt/bench/switch_bench.h"

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <filesystem>
#include <nlohmann/json.hpp>

#include "molt/common/error.h"
#include "molt/runtime/switch_cost.h"

namespace molt {

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
            runs.push_back(measure_switch(ladder, from, to, ids, so));
            if (progress) progress(++done, total);
          }
          std::vector<double> ms;
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
