#include "molt/runtime/switch_cost.h"

#include <cmath>
#include <vector>

#include "molt/common/error.h"
#include "molt/runtime/generation.h"

namespace molt {

MigrationEvent measure_switch(Ladder& ladder, int from, int to, std::span<const int32_t> ids,
                              const SwitchCostOptions& so) {
  if (ids.size() < 2) fail("measure_switch: need a context and a pending token");
  ladder.release_unused();
  SessionOptions o;
  o.policy = so.policy;
  o.prefill_chunk = so.prefill_chunk;
  o.transfer = so.transfer;
  o.max_tokens = 1;
  o.capacity = static_cast<int64_t>(ids.size()) + 1;
  const std::span<const int32_t> context = ids.first(ids.size() - 1);
  const int64_t n = static_cast<int64_t>(context.size());

  Rung& sender = ladder.rung(from);
  sender.load();  // warm: its pages are touched before the clock starts
  KVCache cache =
      sender.model().new_cache(o.capacity, so.transfer.recompute_layers > 0, o.kv_dtype);
  if (so.native_sender_cache) {
    for (int64_t i = 0; i < n; i += so.prefill_chunk) {
      const int64_t len = std::min(so.prefill_chunk, n - i);
      sender.model().forward(context.subspan(static_cast<size_t>(i), static_cast<size_t>(len)),
                             cache, {});
    }
  } else {
    cache.set_size(n);
    const int64_t rows = n * cache.geometry().kv_dim();
    std::vector<float> k(static_cast<size_t>(rows)), v(k.size());
    for (int64_t l = 0; l < cache.geometry().n_layers; ++l) {
      for (int64_t i = 0; i < rows; ++i) {
        k[i] = std::sin(0.01f * static_cast<float>(i + l));
        v[i] = std::cos(0.01f * static_cast<float>(i + l));
      }
      cache.write_k(l, 0, n, k.data());
      cache.write_v(l, 0, n, v.data());
    }
  }
  // The same migrate() a generation runs, timed from the budget check to the receiver's
  // first logits.
  auto g = Generation::resume(ladder, nullptr, from, std::move(cache),
                              std::vector<int32_t>(ids.begin(), ids.end()), o);
  g->force_migration(to);
  const Step s = g->step();
  if (!s.migration) fail("measure_switch: no migration ran from rung {} to {}", from, to);
  g.reset();
  ladder.release_unused();
  return *s.migration;
}

}  // namespace molt
