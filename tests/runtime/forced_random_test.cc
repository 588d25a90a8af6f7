// Forced random migrations (the shape of vLLM's forced-preemption test): on the bundled tiny
// ladder, before every token but the first, with probability p, the generation is forced to a
// random other rung, for every policy that migrates, over many seeds. Invariants:
//   - the stream is contiguous (indices 0 … max_tokens − 1, none repeated or lost), every event
//     says where it happened, and nothing throws;
//   - each migration ran a policy the requested one may run (auto: any; molt and heal fall back
//     to release-reprefill only on routes without maps, and then say so);
//   - after a re-read (reprefill, release-reprefill, whoever asked for it) the receiver's cache
//     is its native prefill of the same text, and every token until the next mapped seam is the
//     receiver's own greedy choice on that history;
//   - after heal completes, the cache equals the receiver's native cache to f32 round-off (on
//     an int8 rung, the position decoded right after it within decode's int8 activation
//     rounding) and every later token (until the next mapped seam) is its native greedy choice.
// The reference is computed independently: a fresh prefill of the history on a separately loaded
// copy of the receiver, then greedy decode of the generation's own tokens.
//
// Seeds: MOLT_FORCED_SEEDS per policy (default 100: 500 generations over the five policies), from
// MOLT_FORCED_FIRST (0); MOLT_FORCED_P overrides p (0.15). A failure stops at its seed and names
// it, with the moves that led there.
#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <map>
#include <memory>
#include <optional>
#include <random>
#include <string>
#include <vector>

#include "molt/kernels/threads.h"
#include "molt/ladder/ladder.h"
#include "molt/model/model.h"
#include "molt/runtime/generation.h"

namespace molt {
namespace {

constexpr int64_t kTokens = 48;

int64_t env_int(const char* name, int64_t fallback) {
  const char* v = std::getenv(name);
  return v && *v ? std::strtoll(v, nullptr, 10) : fallback;
}

double env_double(const char* name, double fallback) {
  const char* v = std::getenv(name);
  return v && *v ? std::strtod(v, nullptr) : fallback;
}

// The ladder the generations run on, and oracle copies of its rungs loaded on their own.
struct Fixture {
  std::unique_ptr<Ladder> ladder;
  std::vector<std::unique_ptr<Model>> models;
  std::vector<std::vector<int32_t>> prompts;
  int64_t vocab = 0;
  std::string skip;

  Fixture() {
    const std::filesystem::path manifest =
        std::filesystem::path(MOLT_SOURCE_DIR) / "models/tiny-ladder/ladder.json";
    if (!std::filesystem::exists(manifest)) {
      skip = manifest.string() + " is absent (make tiny-ladder)";
      return;
    }
    set_num_threads(1);
    ladder = Ladder::open(manifest);
    if (ladder->size() < 2 || ladder->tokenizer() == nullptr) {
      skip = "the tiny ladder needs two rungs and a tokenizer";
      return;
    }
    for (int i = 0; i < ladder->size(); ++i) models.push_back(Model::load(ladder->rung(i).path()));
    vocab = ladder->vocab_size();
    // Short prompts: every context stays within one prefill chunk (the reference's prefill is
    // one forward, like the runtime's re-read of a context shorter than prefill_chunk).
    for (const char* text : {"initrd provides the capability to load a RAM disk.",
                             "The kernel schedules tasks on every CPU.", "Once upon a time"})
      prompts.push_back(ladder->tokenizer()->encode(text));
  }
};

Fixture& fixture() {
  static Fixture f;
  return f;
}

int32_t greedy(std::span<const float> logits, int64_t vocab) {
  return static_cast<int32_t>(std::max_element(logits.begin(), logits.begin() + vocab) -
                              logits.begin());
}

// The receiver's native view of a history: a cache holding every id of it but the last (the
// pending one, not yet decoded) and, once decoded, the logits of the next token.
struct Reference {
  int rung = -1;
  const Model* model = nullptr;
  std::unique_ptr<KVCache> cache;
  std::vector<float> logits;
  std::optional<int32_t> pending;  // decoded before the next check

  // A fresh native prefill of `history` on rung r. `whole`: prefill all of it and keep the last
  // logits (how a generation starts); otherwise prefill all but the last id and decode it (how
  // a re-read receiver resumes).
  Reference(const Fixture& f, int r, std::span<const int32_t> history, bool whole)
      : rung(r), model(f.models[static_cast<size_t>(r)].get()) {
    cache =
        std::make_unique<KVCache>(model->new_cache(static_cast<int64_t>(history.size()) + kTokens));
    logits.resize(static_cast<size_t>(model->config().vocab_size));
    if (whole) {
      model->forward(history, *cache, {}, logits);
    } else {
      model->forward(history.first(history.size() - 1), *cache, {});
      model->decode(history.back(), *cache, logits);
    }
  }
  std::span<const float> next() {
    if (pending) {
      model->decode(*pending, *cache, logits);
      pending.reset();
    }
    return logits;
  }
};

struct Tally {
  int64_t runs = 0, migrations = 0, fallbacks = 0, heals = 0, heals_unchecked = 0;
  int64_t native_tokens = 0, differed = 0, cache_checks = 0;
  double max_reread_diff = 0, max_heal_diff = 0, max_heal_last = 0, max_gap = 0;
  std::map<std::string, int64_t> routes;  // "ran: from → to"
};

// Which policies a requested one may run.
bool may_run(Policy requested, const std::string& ran) {
  switch (requested) {
    case Policy::kAuto:
      return ran == "molt" || ran == "heal" || ran == "reprefill" || ran == "release-reprefill";
    case Policy::kMolt:
    case Policy::kHeal:
      return ran == policy_name(requested) || ran == "release-reprefill";
    default:
      return ran == policy_name(requested);
  }
}

// The position whose row differs most (for the failure message).
int64_t worst_position(std::span<const float> a, std::span<const float> b, int64_t kv_dim,
                       int64_t n) {
  int64_t worst = 0;
  float most = -1;
  for (int64_t p = 0; p < n; ++p) {
    for (int64_t j = p * kv_dim; j < (p + 1) * kv_dim; ++j) {
      const float d = std::fabs(a[static_cast<size_t>(j)] - b[static_cast<size_t>(j)]);
      if (d > most) most = d, worst = p;
    }
  }
  return worst;
}

// Compares the generation's cache with the reference's, every layer, every position held:
// relative to the layer's largest |K| or |V|, within `tol` for all but the last position and
// within `last_tol` for the last one (`max_diff` and `max_last` keep the largest seen).
void expect_native_cache(const KVCache& got, const KVCache& want, double tol, double last_tol,
                         double& max_diff, double& max_last, const std::string& what) {
  ASSERT_EQ(got.size(), want.size()) << what;
  ASSERT_EQ(got.geometry().n_layers, want.geometry().n_layers) << what;
  ASSERT_EQ(got.geometry().kv_dim(), want.geometry().kv_dim()) << what;
  const int64_t kv = want.geometry().kv_dim(), n = want.size();
  const size_t body = static_cast<size_t>((n - 1) * kv), rows = static_cast<size_t>(n * kv);
  for (int64_t layer = 0; layer < want.geometry().n_layers; ++layer) {
    for (const bool is_k : {true, false}) {
      const std::span<const float> a = is_k ? got.k(layer) : got.v(layer),
                                   b = is_k ? want.k(layer) : want.v(layer);
      double scale = 0, d_body = 0, d_last = 0;
      for (size_t j = 0; j < rows; ++j) {
        scale = std::max(scale, static_cast<double>(std::fabs(b[j])));
        double& d = j < body ? d_body : d_last;
        d = std::max(d, static_cast<double>(std::fabs(a[j] - b[j])));
      }
      scale = std::max(scale, 1e-30);
      max_diff = std::max(max_diff, d_body / scale);
      max_last = std::max(max_last, d_last / scale);
      EXPECT_LE(d_body / scale, tol)
          << (is_k ? "K" : "V") << " of layer " << layer << " (worst at position "
          << worst_position(a, b, kv, n - 1) << " of " << n << "), " << what;
      EXPECT_LE(d_last / scale, last_tol) << (is_k ? "K" : "V") << " of layer " << layer
                                          << " at the last position (" << n - 1 << "), " << what;
    }
  }
}

// One seeded generation of kTokens tokens under `policy` with forced random moves.
void run_seed(Fixture& f, Policy policy, uint64_t seed, double p, Tally& t) {
  Ladder& l = *f.ladder;
  std::mt19937_64 rng(seed * 0x9E3779B97F4A7C15ull + static_cast<uint64_t>(policy));
  auto uniform = [&rng] { return static_cast<double>(rng() >> 11) * 0x1.0p-53; };
  const std::vector<int32_t>& prompt = f.prompts[rng() % f.prompts.size()];
  SessionOptions o;
  o.policy = policy;
  o.max_tokens = kTokens;
  o.stop_at_eos = false;
  o.up_after = int64_t{1} << 40;  // no budget: the generation moves only when forced
  // Caches are compared row by row with f32 references (f16 and int8 seams: kv_dtype_test.cc).
  o.kv_dtype = KvDType::kF32;
  if (policy == Policy::kAuto) {  // let auto choose re-read, molt and heal
    const int64_t below[] = {0, 24, 1000};
    const double stall_ms[] = {0, 5, 1e9};
    const double retention[] = {0, 0.9, 2};
    o.auto_reprefill_below = below[rng() % 3];
    o.auto_max_stall_ms = stall_ms[rng() % 3];
    o.auto_min_retention = retention[rng() % 3];
  }
  const int start = static_cast<int>(rng() % static_cast<uint64_t>(l.size()));
  std::string trace = "seed " + std::to_string(seed) + " policy " + policy_name(policy) +
                      " start " + l.rung(start).name();
  if (policy == Policy::kAuto) {
    trace += " auto_reprefill_below " + std::to_string(o.auto_reprefill_below) +
             " auto_max_stall_ms " + std::to_string(o.auto_max_stall_ms) + " auto_min_retention " +
             std::to_string(o.auto_min_retention);
  }
  SCOPED_TRACE(trace);  // the seed and options; each move is added to `trace` below

  Generation g(l, nullptr, prompt, o);
  if (start != 0) g.force_migration(start);
  std::optional<Reference> ref;  // set while the cache is native on its rung
  bool ref_exact = true;         // ... and computed as the reference computes it (not healed)
  bool healing = false;
  int rung = start;
  std::vector<int64_t> indices;
  for (int64_t i = 0; i < kTokens; ++i) {
    const std::vector<int32_t> h(g.history().begin(), g.history().end());  // before this token
    int target = -1;
    if (i > 0 && uniform() < p) {
      target = static_cast<int>(rng() % static_cast<uint64_t>(l.size() - 1));
      if (target >= rung) ++target;  // a random other rung
      g.force_migration(target);
      trace += "; " + std::to_string(i) + ": " + l.rung(rung).name() + "→" + l.rung(target).name();
    }
    Step st;
    try {
      st = g.step();
    } catch (const std::exception& e) {
      FAIL() << "step " << i << " threw: " << e.what() << "\n" << trace;
    }
    ASSERT_TRUE(st.token.has_value()) << "no token at step " << i << "\n" << trace;
    ASSERT_EQ(st.kind, i + 1 < kTokens ? StepKind::kToken : StepKind::kDone) << trace;
    indices.push_back(st.token->index);
    ASSERT_EQ(st.token->index, i) << trace;
    ASSERT_FALSE(st.park.has_value()) << trace;

    if (target < 0) {
      ASSERT_FALSE(st.migration.has_value()) << "an unforced migration at " << i << "\n" << trace;
    } else {
      ASSERT_TRUE(st.migration.has_value()) << "forced move not taken at " << i << "\n" << trace;
      const MigrationEvent& m = *st.migration;
      trace += " (" + m.policy + ")";
      ++t.migrations;
      ++t.routes[m.policy + ": " + m.from + " → " + m.to];
      EXPECT_EQ(m.from, l.rung(rung).name()) << trace;
      EXPECT_EQ(m.to, l.rung(target).name()) << trace;
      EXPECT_EQ(m.at_token, i) << trace;
      EXPECT_EQ(m.context, static_cast<int64_t>(h.size()) - 1) << trace;
      EXPECT_EQ(m.requested, policy_name(policy)) << trace;
      EXPECT_TRUE(may_run(policy, m.policy))
          << m.policy << " ran for " << policy_name(policy) << "\n"
          << trace;
      if (m.policy != policy_name(policy)) {
        if (policy != Policy::kAuto) ++t.fallbacks;
        EXPECT_FALSE(m.note.empty()) << "fallback to " << m.policy << " without a note\n" << trace;
        if (policy != Policy::kAuto) {  // only routes without maps fall back
          const ManifestRoute* route = l.route(rung, target);
          ASSERT_NE(route, nullptr) << trace;
          EXPECT_NE(route->method, "maps") << m.note << "\n" << trace;
        }
      }
      rung = target;
      const bool reread = m.policy == "reprefill" || m.policy == "release-reprefill";
      healing = m.policy == "heal";
      ref.reset();
      if (reread) {
        ref.emplace(f, rung, h, /*whole=*/false);
        ref_exact = true;
        if (!g.finished()) {  // the same arithmetic as the reference: equal to round-off
          ++t.cache_checks;
          expect_native_cache(
              *g.cache(), *ref->cache, 1e-5, 1e-5, t.max_reread_diff, t.max_reread_diff,
              "cache after the re-read at token " + std::to_string(i) + "\n" + trace);
        }
      }
      if (!g.finished()) {
        EXPECT_EQ(g.heal_progress().active, healing) << trace;
      }
    }
    const bool int8 = l.rung(rung).precision() == "int8";
    if (i == 0) ref.emplace(f, rung, h, /*whole=*/true);  // the start: a native prefill
    if (st.heal) {
      ++t.heals;
      EXPECT_TRUE(healing) << "a heal event with no heal running\n" << trace;
      EXPECT_EQ(st.heal->rung, l.rung(rung).name()) << trace;
      EXPECT_EQ(st.heal->at_token, i) << trace;
      healing = false;
      ref.emplace(f, rung, h, /*whole=*/false);
      ref_exact = false;
      if (g.finished()) {
        ++t.heals_unchecked;  // healed on the last token: the cache went with the generation
      } else {
        // The healed positions to f32 round-off. The last one, decoded just now on the healed
        // cache, too on f32 rungs; an int8 rung's decode rounds its activations to int8, which
        // turns that round-off into up to a quantum's worth (~1/127) of difference downstream.
        ++t.cache_checks;
        expect_native_cache(
            *g.cache(), *ref->cache, 1e-4, int8 ? 2e-2 : 1e-4, t.max_heal_diff, t.max_heal_last,
            "cache healed at token " + std::to_string(i) + " (" +
                std::to_string(st.heal->positions) + " carried positions)\n" + trace);
      }
    }
    EXPECT_EQ(st.token->rung, l.rung(rung).name()) << trace;

    if (ref) {  // native: the token is the receiver's own greedy choice on this history
      const std::span<const float> logits = ref->next();
      const int32_t want = greedy(logits, f.vocab), got = st.token->token_id;
      ++t.native_tokens;
      if (got != want) {
        // Only a near-tie may break the other way: to f32 round-off where the reference ran
        // the generation's own arithmetic; on a healed int8 cache, within the int8 rounding of
        // decode (the margin the session test allows an int8 rung).
        const double best = logits[static_cast<size_t>(want)];
        const double gap = best - logits[static_cast<size_t>(got)];
        t.max_gap = std::max(t.max_gap, gap);
        ++t.differed;
        EXPECT_LE(gap, !ref_exact && int8 ? 0.05 : 1e-4 * std::max(1.0, std::fabs(best)))
            << "token " << i << " on " << l.rung(rung).name() << ": " << got
            << ", the receiver's greedy choice is " << want << "\n"
            << trace;
      }
      ref->pending = got;
    }
    if (::testing::Test::HasFatalFailure()) return;
  }
  ASSERT_TRUE(g.finished()) << trace;
  const DoneEvent& d = g.summary();
  EXPECT_EQ(d.reason, "max_tokens") << trace;
  EXPECT_EQ(d.tokens, kTokens) << trace;
  EXPECT_EQ(g.answer().size(), static_cast<size_t>(kTokens)) << trace;
  EXPECT_EQ(g.history().size(), prompt.size() + static_cast<size_t>(kTokens)) << trace;
  EXPECT_EQ(d.migrations, static_cast<int64_t>(g.migrations().size())) << trace;
  for (size_t i = 0; i < indices.size(); ++i) EXPECT_EQ(indices[i], static_cast<int64_t>(i));
  ++t.runs;
  l.release_unused();
}

class ForcedRandom : public ::testing::TestWithParam<Policy> {};

TEST_P(ForcedRandom, StreamsStayContiguousAndReReadsStayNative) {
  Fixture& f = fixture();
  if (!f.skip.empty()) GTEST_SKIP() << f.skip;
  const Policy policy = GetParam();
  const int64_t seeds = env_int("MOLT_FORCED_SEEDS", 100), first = env_int("MOLT_FORCED_FIRST", 0);
  const double p = env_double("MOLT_FORCED_P", 0.15);
  Tally t;
  const auto t0 = std::chrono::steady_clock::now();
  for (int64_t s = first; s < first + seeds; ++s) {
    run_seed(f, policy, static_cast<uint64_t>(s), p, t);
    if (HasFailure()) {  // the first failing seed is the repro; the rest would repeat it
      ADD_FAILURE() << "stopped at seed " << s << " (" << policy_name(policy)
                    << "); rerun it alone with MOLT_FORCED_FIRST=" << s << " MOLT_FORCED_SEEDS=1";
      break;
    }
  }
  const double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  std::printf(
      "%-17s %lld seeds × %lld tokens, p %.2f: %lld migrations (%lld fallbacks), %lld heals "
      "completed (%lld on the last token), %lld native tokens checked (%lld differed, max logit "
      "gap %.2g), %lld caches compared (max rel diff: re-read %.2g, healed %.2g, last position "
      "after healing %.2g), %.1f s\n",
      policy_name(policy), static_cast<long long>(seeds), static_cast<long long>(kTokens), p,
      static_cast<long long>(t.migrations), static_cast<long long>(t.fallbacks),
      static_cast<long long>(t.heals), static_cast<long long>(t.heals_unchecked),
      static_cast<long long>(t.native_tokens), static_cast<long long>(t.differed), t.max_gap,
      static_cast<long long>(t.cache_checks), t.max_reread_diff, t.max_heal_diff, t.max_heal_last,
      secs);
  for (const auto& [route, n] : t.routes)
    std::printf("    %-36s %lld\n", route.c_str(), static_cast<long long>(n));
  EXPECT_EQ(t.runs, seeds);
  if (seeds >= 20) {
    EXPECT_GT(t.migrations, seeds);  // the forcing happened
    if (policy == Policy::kHeal) {
      EXPECT_GT(t.heals, 0);
    }
  }
}

INSTANTIATE_TEST_SUITE_P(EveryMigratingPolicy, ForcedRandom,
                         ::testing::Values(Policy::kMolt, Policy::kHeal, Policy::kReprefill,
                                           Policy::kReleaseReprefill, Policy::kAuto),
                         [](const auto& info) {
                           std::string n = policy_name(info.param);
                           std::replace(n.begin(), n.end(), '-', '_');
                           return n;
                         });

}  // namespace
}  // namespace molt
