#include "molt/transfer/eval.h"

#include <algorithm>
#include <cmath>
#include <limits>

#include "molt/common/error.h"

namespace molt {
namespace {

// log-softmax of one row, in double.
std::vector<double> log_softmax(std::span<const float> x) {
  double mx = -std::numeric_limits<double>::infinity();
  for (float v : x) mx = std::max(mx, static_cast<double>(v));
  double s = 0;
  for (float v : x) s += std::exp(static_cast<double>(v) - mx);
  const double lse = mx + std::log(s);
  std::vector<double> out(x.size());
  for (size_t i = 0; i < x.size(); ++i) out[i] = static_cast<double>(x[i]) - lse;
  return out;
}

}  // namespace

double window_nll(const Model& m, std::span<const int32_t> window, KvDType kv,
                  std::vector<float>& logits) {
  const auto n = static_cast<int64_t>(window.size());
  if (n < 2) fail("window_nll: a window of {} tokens scores nothing (at least 2)", n);
  const int64_t vocab = m.config().vocab_size;
  const auto size = static_cast<size_t>(n * vocab);
  if (logits.size() < size) logits.resize(size);
  KVCache cache = m.new_cache(n, false, kv);
  m.forward(window, cache, std::span<float>(logits).first(size));
  return mean_nll(std::span<const float>(logits).first(static_cast<size_t>((n - 1) * vocab)),
                  window.subspan(1), vocab);
}

double mean_nll(std::span<const float> logits, std::span<const int32_t> targets, int64_t vocab) {
  if (targets.empty()) return 0;
  double total = 0;
  for (size_t i = 0; i < targets.size(); ++i) {
    std::span<const float> row =
        logits.subspan(i * static_cast<size_t>(vocab), static_cast<size_t>(vocab));
    double mx = -std::numeric_limits<double>::infinity();
    for (float v : row) mx = std::max(mx, static_cast<double>(v));
    double s = 0;
    for (float v : row) s += std::exp(static_cast<double>(v) - mx);
    total += mx + std::log(s) - static_cast<double>(row[static_cast<size_t>(targets[i])]);
  }
  return total / static_cast<double>(targets.size());
}

double kl_logits(std::span<const float> p, std::span<const float> q, int64_t vocab) {
  if (vocab < 0 && p.size() != q.size()) {
    fail("kl_logits: logit vectors of {} and {} entries (pass the vocabulary to compare)", p.size(),
         q.size());
  }
  const size_t V = vocab < 0 ? p.size() : static_cast<size_t>(vocab);
  if (p.size() < V || q.size() < V) {
    fail("kl_logits: vocabulary of {} but logit vectors of {} and {} entries", V, p.size(),
         q.size());
  }
  const std::vector<double> lp = log_softmax(p.first(V)), lq = log_softmax(q.first(V));
  double kl = 0;
  for (size_t i = 0; i < lp.size(); ++i) kl += std::exp(lp[i]) * (lp[i] - lq[i]);
  return std::max(kl, 0.0);
}

void fill_zero_cache(int64_t n, KVCache& dst) {
  dst.set_size(n);
  const std::vector<float> zeros(static_cast<size_t>(n * dst.geometry().kv_dim()), 0.0f);
  for (int64_t l = 0; l < dst.geometry().n_layers; ++l) {
    dst.write_k(l, 0, n, zeros.data());
    dst.write_v(l, 0, n, zeros.data());
  }
}

TransferEval evaluate_transfer(const Model& sender, const Model& receiver,
                               const std::vector<std::vector<int32_t>>& windows, int64_t prefix,
                               const std::vector<Condition>& conditions, bool sender_hidden) {
  TransferEval out;
  out.prefix = prefix;
  out.conditions.resize(conditions.size());
  for (size_t c = 0; c < conditions.size(); ++c) out.conditions[c].name = conditions[c].name;
  const int64_t Vr = receiver.config().vocab_size, Vs = sender.config().vocab_size;
  // Rungs share a tokenizer; rows past the smaller vocabulary are padding.
  const int64_t shared_vocab = std::min(Vr, Vs);
  double native_nll = 0, sender_nll = 0, native_seam = 0;
  std::vector<double> nll(conditions.size(), 0.0), tkl(conditions.size(), 0.0),
      skl(conditions.size(), 0.0);
  int64_t scored = 0;
  for (const auto& w : windows) {
    const int64_t T = static_cast<int64_t>(w.size()), P = prefix;
    if (P < 1 || T < P + 2) fail("evaluation window of {} tokens is too short for prefix {}", T, P);
    const int64_t n = T - 1 - P;  // scored tokens t_{P+1} .. t_{T−1}
    const std::span<const int32_t> ids(w);
    const std::span<const int32_t> head = ids.subspan(0, static_cast<size_t>(P));
    const std::span<const int32_t> feed =
        ids.subspan(static_cast<size_t>(P), static_cast<size_t>(n));
    const std::span<const int32_t> targets = ids.subspan(static_cast<size_t>(P + 1));

    KVCache src = sender.new_cache(T, sender_hidden);
    sender.forward(head, src, {});
    std::vector<float> ls(static_cast<size_t>(n * Vs));
    sender.forward(feed, src, ls);
    src.truncate(P);
    sender_nll += mean_nll(ls, targets, Vs) * static_cast<double>(n);
    const std::span<const float> sender_seam(ls.data(), static_cast<size_t>(Vs));

    std::vector<float> ln(static_cast<size_t>(n * Vr));
    {
      KVCache nat = receiver.new_cache(T);
      receiver.forward(head, nat, {});
      receiver.forward(feed, nat, ln);
    }
    const std::span<const float> native_seam_row(ln.data(), static_cast<size_t>(Vr));
    const double native_window = mean_nll(ln, targets, Vr);
    native_nll += native_window * static_cast<double>(n);
    native_seam += kl_logits(sender_seam, native_seam_row, shared_vocab);

    std::vector<float> lc(static_cast<size_t>(n * Vr));
    for (size_t c = 0; c < conditions.size(); ++c) {
      KVCache dst = receiver.new_cache(T);
      conditions[c].fill(src, head, dst);
      if (dst.size() != P) {
        fail("condition '{}' filled {} positions, expected {}", conditions[c].name, dst.size(), P);
      }
      receiver.forward(feed, dst, lc);
      const std::span<const float> seam(lc.data(), static_cast<size_t>(Vr));
      const double window = mean_nll(lc, targets, Vr);
      nll[c] += window * static_cast<double>(n);
      out.conditions[c].window_gaps.push_back(window - native_window);
      tkl[c] += kl_logits(native_seam_row, seam);
      skl[c] += kl_logits(sender_seam, seam, shared_vocab);
    }
    scored += n;
    ++out.windows;
  }
  if (out.windows == 0) fail("no evaluation windows");
  const double W = static_cast<double>(out.windows), N = static_cast<double>(scored);
  out.scored_tokens = scored;
  out.native_nll = native_nll / N;
  out.sender_nll = sender_nll / N;
  out.native_seam_kl = native_seam / W;
  for (size_t c = 0; c < conditions.size(); ++c) {
    ConditionScore& s = out.conditions[c];
    s.nll = nll[c] / N;
    s.nll_gap = s.nll - out.native_nll;
    s.transfer_kl = tkl[c] / W;
    s.seam_kl = skl[c] / W;
  }
  return out;
}

}  // namespace molt
