// The decode loop: sample, emit, check the budget, change rung if needed, decode the next.
#include "molt/runtime/session.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <optional>
#include <tuple>

#include "molt/common/error.h"
#include "molt/kernels/threads.h"
#include "molt/ladder/process_memory.h"
#include "molt/transfer/map_file.h"
#include "runtime/generation.h"

namespace molt {
namespace {

constexpr double kMiB = 1024.0 * 1024.0;
using Clock = std::chrono::steady_clock;

double ms_between(Clock::time_point a, Clock::time_point b) {
  return std::chrono::duration<double, std::milli>(b - a).count();
}

}  // namespace

Session::Session(Ladder& ladder, BudgetSource& budget, EventSink& sink, SessionOptions options)
    : ladder_(ladder), budget_(budget), sink_(sink), o_(std::move(options)) {
  if (o_.max_tokens <= 0) fail("max_tokens must be positive, not {}", o_.max_tokens);
}

Session::~Session() = default;

SessionResult Session::run(std::span<const int32_t> prompt) {
  using runtime::Generation;
  const int64_t vocab = ladder_.vocab_size();
  if (prompt.empty()) fail("the prompt has no tokens");
  for (int32_t id : prompt) {
    if (id < 0 || id >= vocab)
      fail("prompt token id {} is outside the ladder's vocabulary [0, {})", id, vocab);
  }
  for (int r = 0; r < ladder_.size(); ++r) ladder_.rung(r).release();

  Generation g(ladder_, o_);
  g.capacity = static_cast<int64_t>(prompt.size()) + o_.max_tokens;
  ladder_.reshape(FootprintShape{o_.prefill_chunk, g.capacity, num_threads()});
  g.keep_hidden = o_.transfer.recompute_layers > 0;
  g.history.assign(prompt.begin(), prompt.end());
  // Measurement only: page in the map verifier's code (SHA-256) once, so the first map load's
  // library pages are not counted as the migration's memory.
  if (o_.measure_rss) sha256_file(ladder_.manifest().file);
  const int bottom = ladder_.size() - 1;
  const double reference_mib = g.footprint_mib(0);
  const bool hold = o_.policy == Policy::kHold, small = o_.policy == Policy::kSmall;

  SessionResult res;
  DoneEvent& done = res.done;
  Sampler sampler(o_.sampling);
  std::unique_ptr<StreamDecoder> text;
  if (ladder_.tokenizer())
    text = std::make_unique<StreamDecoder>(*ladder_.tokenizer(), /*skip_special=*/true);
  const Clock::time_point t_start = Clock::now();
  int64_t step = 0;
  double last_budget = NAN;

  auto used_mib = [&] {
    double b = static_cast<double>(ladder_.resident_bytes());
    if (g.cache) b += static_cast<double>(g.kv_bytes(g.rung));
    if (g.rung >= 0 && ladder_.rung(g.rung).state() == RungState::kLoaded) {
      b += static_cast<double>(ladder_.rung(g.rung).footprint().scratch_bytes);
    }
    if (g.heal) {
      b += static_cast<double>(
          runtime::HealJob::extra_bytes(ladder_.rung(g.rung).config(), g.heal->positions()));
    }
    return b / kMiB;
  };
  auto query = [&] {
    BudgetQuery q{step, ms_between(t_start, Clock::now()), reference_mib, used_mib()};
    const double b = budget_.budget_mib(q);
    if (!(b == last_budget)) sink_.on_budget(BudgetEvent{b});
    last_budget = b;
    return b;
  };
  auto pressure = [&](double budget) { return std::clamp(1.0 - budget / reference_mib, 0.0, 1.0); };
  // The largest rung this policy may run that fits; -1 when none does.
  auto choose = [&](double budget) {
    for (int r = 0; r <= bottom; ++r) {
      if ((hold && r != 0) || (small && r != bottom)) continue;
      if (g.footprint_mib(r) <= budget) return r;
    }
    return -1;
  };
  auto use = [&](int r) {
    const std::string& name = ladder_.rung(r).name();
    if (std::find(done.rungs_used.begin(), done.rungs_used.end(), name) == done.rungs_used.end()) {
      done.rungs_used.push_back(name);
    }
  };
  auto note_usage = [&](double budget) {
    const double used = used_mib();
    done.peak_mib = std::max(done.peak_mib, used);
    done.max_overshoot_mib = std::max(done.max_overshoot_mib, used - budget);
  };
  // Parks the current rung (if any) and waits until some rung fits; returns it.
  auto park_and_wait = [&](double budget) {
    const std::string name = g.rung >= 0 ? ladder_.rung(g.rung).name() : "";
    if (g.rung >= 0) ladder_.rung(g.rung).park();
    g.heal.reset();
    sink_.on_park(ParkEvent{name, budget, g.footprint_mib(bottom)});
    ++done.parks;
    const Clock::time_point t0 = Clock::now();
    int64_t waited = 0;
    for (;;) {
      ++step;
      ++waited;
      budget_.idle(o_.poll_ms);
      budget = query();
      note_usage(budget);
      if (const int r = choose(budget); r >= 0)
        return std::tuple{r, waited, ms_between(t0, Clock::now()), budget};
      if (waited >= o_.max_parked_steps) {
        fail(
            "parked for {} budget checks: the budget ({:.1f} MiB) never came back above the "
            "smallest rung ({:.1f} MiB)",
            waited, budget, g.footprint_mib(bottom));
      }
    }
  };

  // Start on the largest rung that fits (hold: the top rung whatever the budget).
  double budget = query();
  int start = hold ? 0 : choose(budget);
  if (start < 0) {
    auto [r, waited, ms, b] = park_and_wait(budget);
    start = r;
    budget = b;
    sink_.on_resume(ResumeEvent{ladder_.rung(r).name(), waited, ms});
  }
  ladder_.rung(start).load();
  g.rung = start;
  use(start);
  std::vector<float> logits;
  // The whole prompt goes in; from here on the cache holds every token but the pending one.
  g.cache = runtime::prefill_chunked(ladder_.rung(start).model(), g.new_cache(start), g.history,
                                     o_.prefill_chunk, &logits);
  // The process's own overhead (code, tokenizer, BLAS and thread buffers): what RSS holds
  // beyond the accounted weights and cache once the first prefill has run.
  if (o_.measure_rss) {
    const double rss = static_cast<double>(read_process_memory().rss_bytes);
    g.rss_base = static_cast<size_t>(
        std::max(0.0, rss - static_cast<double>(ladder_.resident_bytes() + g.kv_bytes(start))));
  }
  note_usage(budget);

  int64_t over = 0, up_count = 0;
  done.reason = "max_tokens";
  for (int64_t i = 0; i < o_.max_tokens; ++i) {
    if (i > 0) {
      // Between token i-1 and token i: the budget check.
      ++step;
      budget = query();
      const Clock::time_point t_check = Clock::now();
      std::optional<MigrationEvent> moved;
      auto move_to = [&](int target) {
        const runtime::MigrationPlan plan = runtime::plan_migration(g, target, budget);
        MigrationEvent e = runtime::migrate(g, plan);
        e.pressure = pressure(budget);
        e.budget_mib = budget;
        e.at_token = i;
        if (g.heal) {
          const double need =
              g.footprint_mib(g.rung) +
              runtime::HealJob::extra_bytes(ladder_.rung(g.rung).config(), g.heal->positions()) /
                  kMiB;
          if (need > budget) {
            g.heal.reset();
            e.note +=
                fmt::format("heal skipped: it needs {:.1f} MiB > budget {:.1f} MiB", need, budget);
          }
        }
        done.peak_mib = std::max(done.peak_mib, e.peak_mib);
        use(target);
        moved = e;
      };

      const double need = g.footprint_mib(g.rung);
      if (hold) {
        over = need > budget ? over + 1 : 0;
        if (over > o_.grace_steps) {
          done.killed = true;
          done.reason = "killed";
          break;
        }
      } else if (need > budget) {
        up_count = 0;
        const int target = choose(budget);
        if (target >= 0) {
          move_to(target);
        } else {
          auto [r, waited, ms, b] = park_and_wait(budget);
          budget = b;
          if (r == g.rung) {
            ladder_.rung(r).unpark();
          } else {
            move_to(r);
          }
          sink_.on_resume(ResumeEvent{ladder_.rung(r).name(), waited, ms});
        }
      } else if (!small && g.rung > 0) {
        int up = -1;
        for (int r = 0; r < g.rung && up < 0; ++r) {
          if (g.footprint_mib(r) * (1 + o_.up_margin) <= budget) up = r;
        }
        up_count = up >= 0 ? up_count + 1 : 0;
        if (up >= 0 && up_count >= o_.up_after) {
          up_count = 0;
          move_to(up);
        }
      }
      note_usage(budget);

      // Heal a chunk (not at the seam itself: the mapped resume is what the user waits for).
      const Model& model = ladder_.rung(g.rung).model();
      if (g.heal && !moved) {
        if (g.heal->step(model, *g.cache, g.history, o_.heal_chunk)) {
          sink_.on_heal(HealEvent{ladder_.rung(g.rung).name(), i, g.heal->positions(),
                                  g.heal->steps(), g.heal->ms()});
          g.heal.reset();
        }
      }
      const Clock::time_point t_decode = Clock::now();
      logits = model.decode(g.history.back(), *g.cache);
      if (moved) {
        const Clock::time_point t_end = Clock::now();
        moved->first_decode_ms = ms_between(t_decode, t_end);
        moved->ms = ms_between(t_check, t_end) - g.evidence_ms;
        if (!g.sender_seam_logits.empty()) {
          moved->seam_kl = kl_from_logits(g.sender_seam_logits, logits, vocab);
          g.sender_seam_logits.clear();
        }
        done.migration_ms += moved->ms;
        ++done.migrations;
        res.migrations.push_back(*moved);
        sink_.on_migration(*moved);
      }
    }

    const int32_t tok =
        sampler.sample(std::span<float>(logits.data(), static_cast<size_t>(vocab)), g.history);
    g.history.push_back(tok);
    res.tokens.push_back(tok);
    res.rungs.push_back(ladder_.rung(g.rung).name());
    TokenEvent te{i, text ? text->push(tok) : fmt::format("<{}>", tok), tok,
                  ladder_.rung(g.rung).name()};
    sink_.on_token(te);
    const auto& eos = ladder_.rung(g.rung).config().eos_token_ids;
    const bool stop = std::find(eos.begin(), eos.end(), tok) != eos.end() ||
                      std::find(o_.stop_ids.begin(), o_.stop_ids.end(), tok) != o_.stop_ids.end();
    if (stop && o_.stop_at_eos) {
      done.reason = "eos";
      break;
    }
  }

  done.tokens = static_cast<int64_t>(res.tokens.size());
  if (text) done.tail = text->flush();
  done.elapsed_ms = ms_between(t_start, Clock::now());
  g.cache.reset();
  g.heal.reset();
  for (int r = 0; r < ladder_.size(); ++r) ladder_.rung(r).release();
  sink_.on_done(done);
  return res;
}

}  // namespace molt
