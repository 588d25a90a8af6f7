#include "molt/runtime/switch_cost.h"

#include <chrono>
#include <cmath>
#include <limits>

#include "molt/common/error.h"
#include "molt/kernels/threads.h"
#include "runtime/generation.h"

namespace molt {

MigrationEvent measure_switch(Ladder& ladder, int from, int to, std::span<const int32_t> ids,
                              const SwitchCostOptions& so) {
  using Clock = std::chrono::steady_clock;
  if (ids.size() < 2) fail("measure_switch: need a context and a pending token");
  for (int r = 0; r < ladder.size(); ++r) ladder.rung(r).release();
  SessionOptions o;
  o.policy = so.policy;
  o.prefill_chunk = so.prefill_chunk;
  o.transfer = so.transfer;
  runtime::Generation g(ladder, o);
  g.history.assign(ids.begin(), ids.end());
  g.capacity = static_cast<int64_t>(ids.size()) + 1;
  g.keep_hidden = so.transfer.recompute_layers > 0;
  ladder.reshape(FootprintShape{so.prefill_chunk, g.capacity, num_threads()});

  Rung& sender = ladder.rung(from);
  sender.load();
  g.rung = from;
  const auto context = g.context();
  if (so.native_sender_cache) {
    g.cache = runtime::prefill_chunked(sender.model(), g.new_cache(from), context, so.prefill_chunk,
                                       nullptr);
  } else {
    g.cache = g.new_cache(from);
    const int64_t n = static_cast<int64_t>(context.size());
    g.cache->set_size(n);
    const int64_t rows = n * g.cache->geometry().kv_dim();
    for (int64_t l = 0; l < g.cache->geometry().n_layers; ++l) {
      auto k = g.cache->k(l), v = g.cache->v(l);
      for (int64_t i = 0; i < rows; ++i) {
        k[i] = std::sin(0.01f * static_cast<float>(i + l));
        v[i] = std::cos(0.01f * static_cast<float>(i + l));
      }
    }
  }

  const Clock::time_point t0 = Clock::now();
  const runtime::MigrationPlan plan =
      runtime::plan_migration(g, to, std::numeric_limits<double>::infinity());
  MigrationEvent e = runtime::migrate(g, plan);
  const Clock::time_point t1 = Clock::now();
  ladder.rung(to).model().decode(g.history.back(), *g.cache);
  const Clock::time_point t2 = Clock::now();
  e.first_decode_ms = std::chrono::duration<double, std::milli>(t2 - t1).count();
  e.ms = std::chrono::duration<double, std::milli>(t2 - t0).count();
  g.cache.reset();
  g.heal.reset();
  for (int r = 0; r < ladder.size(); ++r) ladder.rung(r).release();
  return e;
}

}  // namespace molt
