// Starting a generation on a chosen rung, and moving a shed cache into a smaller allocation.
#include "scheduler/spawn.h"

#include <algorithm>
#include <cstring>
#include <limits>

#include "molt/common/error.h"
#include "molt/kernels/threads.h"
#include "molt/scheduler/scheduler.h"

namespace molt::sched {
namespace {

// Copies the filled rows of every block (K, V, hidden states) from `from` into `to` (the same
// KV type: the rows are copied as stored).
void copy_rows(const KVCache& from, KVCache& to) {
  const CacheGeometry& g = from.geometry();
  const size_t n = static_cast<size_t>(from.size());
  if (from.kv_dtype() != to.kv_dtype()) fail("copy_rows: KV caches of different types");
  const size_t kv = n * from.row_bytes();
  for (int64_t l = 0; l < g.n_layers; ++l) {
    std::memcpy(const_cast<void*>(to.k_rows(l)), from.k_rows(l), kv);
    std::memcpy(const_cast<void*>(to.v_rows(l)), from.v_rows(l), kv);
  }
  if (from.keeps_hidden()) {
    const size_t h = n * static_cast<size_t>(g.hidden_size);
    for (int64_t i = 0; i <= g.n_layers; ++i)
      std::memcpy(to.hidden(i).data(), from.hidden(i).data(), h * sizeof(float));
  }
  to.set_size(from.size());
}

}  // namespace

SessionOptions tenant_options(SessionOptions o, int64_t capacity, int64_t max_tokens) {
  if (o.policy == Policy::kHold || o.policy == Policy::kSmall) {
    fail(
        "a tenant's policy must migrate (molt, heal, reprefill, release-reprefill or auto), not "
        "'{}'",
        policy_name(o.policy));
  }
  o.capacity = capacity;
  o.max_tokens = max_tokens;
  o.shed_sink = -1;  // the capacity always holds the rest of the answer: a full cache is a bug
  o.up_after = std::numeric_limits<int64_t>::max();  // moving up is the scheduler's call
  o.validate();
  return o;
}

std::unique_ptr<Generation> start_on(Ladder& ladder, int rung, std::span<const int32_t> window,
                                     const SessionOptions& o) {
  if (window.size() < 2) fail("a tenant needs at least two prompt tokens (got {})", window.size());
  Rung& r = ladder.rung(rung);
  r.load();
  const Model& m = r.model();
  KVCache cache = m.new_cache(o.capacity, o.transfer.recompute_layers > 0, o.kv_dtype);
  const std::span<const int32_t> context = window.first(window.size() - 1);
  const size_t chunk = static_cast<size_t>(std::max<int64_t>(1, o.prefill_chunk));
  for (size_t i = 0; i < context.size(); i += chunk) {
    m.forward(context.subspan(i, std::min(chunk, context.size() - i)), cache, {});
  }
  return Generation::resume(ladder, nullptr, rung, std::move(cache),
                            std::vector<int32_t>(window.begin(), window.end()), o);
}

std::unique_ptr<Generation> shed_into(Ladder& ladder, Generation& g, std::vector<int32_t>& window,
                                      int64_t sink, int64_t drop, const SessionOptions& o) {
  const int rung = g.rung();
  if (rung < 0 || g.cache() == nullptr) fail("shed: the generation has no cache");
  if (static_cast<int64_t>(window.size()) != g.positions() + 1) {
    fail("shed: the scheduler tracks {} ids, the cache holds {} positions (expected one fewer)",
         window.size(), g.positions());
  }
  const int64_t dropped = g.shed(sink, drop);
  window.erase(window.begin() + sink, window.begin() + sink + dropped);
  const KVCache& old = *g.cache();
  KVCache next =
      ladder.rung(rung).model().new_cache(o.capacity, old.keeps_hidden(), old.kv_dtype());
  copy_rows(old, next);
  return Generation::resume(ladder, nullptr, rung, std::move(next), window, o);
}

double own_at(const Ladder& ladder, int rung, int64_t capacity, const SessionOptions& o) {
  const FootprintShape shape{o.prefill_chunk, capacity, num_threads(), o.kv_dtype};
  const Rung& r = ladder.rung(rung);
  const Footprint f = r.footprint_for(shape);
  double b = static_cast<double>(f.kv_bytes(capacity) + f.scratch_bytes);
  if (o.transfer.recompute_layers > 0) {  // the cache keeps the hidden states too
    const ModelConfig& c = r.config();
    b += static_cast<double>((c.num_hidden_layers + 1) * c.hidden_size * capacity) * sizeof(float);
  }
  return b / (1024.0 * 1024.0);
}

}  // namespace molt::sched
