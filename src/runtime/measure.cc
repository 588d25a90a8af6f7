// Evidence around a migration (seam KL, RSS high-water mark), kept out of its timed cost.
#include <algorithm>

#include "molt/ladder/process_memory.h"
#include "molt/transfer/eval.h"
#include "runtime/state.h"

namespace molt::runtime {

void SeamMeter::baseline(const State& g) {
  if (!rss_) return;
  // The process's own overhead (code, tokenizer, BLAS and thread buffers): what RSS holds
  // beyond the accounted weights and cache once the first prefill has run.
  const double rss = static_cast<double>(read_process_memory().rss_bytes);
  const double accounted = static_cast<double>(g.ladder.resident_bytes() + g.kv_bytes(g.rung));
  rss_base_ = static_cast<size_t>(std::max(0.0, rss - accounted));
}

double SeamMeter::before(State& g, const MigrationPlan& p) {
  const Clock::time_point t0 = Clock::now();
  Rung& sender = g.ladder.rung(p.from);
  sender_.clear();
  // The sender's next-token distribution at the seam: decode the pending token, then undo it.
  if (seams_ && sender.state() == RungState::kLoaded) {
    const int64_t n = g.cache->size();
    sender_.resize(static_cast<size_t>(sender.config().vocab_size));
    sender.model().forward(std::span<const int32_t>(&g.window.back(), 1), *g.cache, {}, sender_);
    g.cache->truncate(n);
  }
  // Measured peak = RSS high-water mark less the process's own overhead just before the cut.
  if (rss_) {
    const double accounted = static_cast<double>(g.ladder.resident_bytes() + g.kv_bytes(p.from));
    rss_base_ = static_cast<size_t>(std::max(0.0, read_process_memory().rss_bytes - accounted));
  }
  return ms_between(t0, Clock::now());
}

void SeamMeter::window_open() {
  if (rss_) reset_peak_rss();
}

void SeamMeter::after(MigrationEvent& e) {
  if (!rss_) return;
  const ProcessMemory m = read_process_memory();
  e.rss_peak_mib = (static_cast<double>(m.peak_bytes) - static_cast<double>(rss_base_)) / kMiB;
}

void SeamMeter::seam_logits(const State& g, MigrationEvent& e) {
  if (!seams_) return;
  const int64_t vocab = g.ladder.vocab_size();
  if (!sender_.empty()) e.seam_kl = kl_logits(sender_, g.logits, vocab);
  sender_.clear();
  const Rung& r = g.ladder.rung(g.rung);
  if (r.state() != RungState::kLoaded || g.window.empty()) return;
  // Native on the receiver, its cache of the same type as the generation's.
  KVCache native = r.model().new_cache(static_cast<int64_t>(g.window.size()), false, g.o.kv_dtype);
  std::vector<float> logits(static_cast<size_t>(r.config().vocab_size));
  r.model().forward(g.window, native, {}, logits);
  e.transfer_kl = kl_logits(logits, g.logits, vocab);
}

}  // namespace molt::runtime
