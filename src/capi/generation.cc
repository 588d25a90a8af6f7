// C API: generations. Each molt_step hands out one event; a Step (generation.h) that carries
// several is queued, and the strings the events point at live in that Step until the queue is
// empty and the next step() replaces it.
#include "molt/runtime/generation.h"

#include <atomic>
#include <deque>

#include "capi/internal.h"
#include "molt/kernels/threads.h"
#include "molt/runtime/prompt.h"

using molt::capi::guard;
using molt::capi::phase;
using molt::capi::refuse;

struct molt_generation {
  std::shared_ptr<molt::capi::LadderState> ladder;  // outlives `gen` (declared first)
  std::unique_ptr<molt::Generation> gen;
  std::atomic<bool> cancel_requested{false};
  molt::Step step;                       // the step whose events are queued
  std::deque<molt_event> queue;          // pointing into `step`
  bool waiting = false;                  // the last step parked: idle before the next
  std::string failed;                    // a step threw: the generation is over, with this message
  std::string rungs_used, reason, tail;  // DONE's strings
};

namespace molt::capi {
namespace {

molt_event done_event(molt_generation& g, const DoneEvent& d) {
  g.rungs_used = fmt::format("{}", fmt::join(d.rungs_used, ","));
  g.reason = d.reason;
  g.tail = d.tail;
  molt_event e{};
  e.kind = MOLT_EVENT_DONE;
  e.done = {d.tokens,         d.migrations,         d.parks,        d.killed ? 1 : 0,
            g.reason.c_str(), g.rungs_used.c_str(), g.tail.c_str(), d.migration_ms,
            d.peak_mib,       d.elapsed_ms};
  return e;
}

// The events of g.step in molt::emit's order, then WAITING when it parked.
void queue_events(molt_generation& g) {
  const Step& s = g.step;
  auto add = [&g](molt_event_kind kind) -> molt_event& {
    molt_event e{};
    e.kind = kind;
    g.queue.push_back(e);
    return g.queue.back();
  };
  if (s.budget) add(MOLT_EVENT_BUDGET).budget = {s.budget->mib};
  if (s.park) {
    add(MOLT_EVENT_PARK).park = {s.park->rung.c_str(), s.park->budget_mib, s.park->need_mib};
  }
  if (s.resume) {
    add(MOLT_EVENT_RESUME).resume = {s.resume->rung.c_str(), s.resume->waited_steps,
                                     s.resume->waited_ms};
  }
  if (s.heal) {
    add(MOLT_EVENT_HEAL).heal = {s.heal->rung.c_str(), s.heal->at_token, s.heal->positions,
                                 s.heal->steps, s.heal->ms};
  }
  if (s.migration) {
    const MigrationEvent& m = *s.migration;
    add(MOLT_EVENT_MIGRATION).migration = {
        m.from.c_str(), m.to.c_str(), m.policy.c_str(), m.ms,       m.flops_saved,
        m.pressure,     m.budget_mib, m.context,        m.at_token, m.note.c_str()};
  }
  if (s.token) {
    const TokenEvent& t = *s.token;
    add(MOLT_EVENT_TOKEN).token = {t.index, t.text.c_str(), t.text.size(), t.token_id,
                                   t.rung.c_str()};
  }
  if (s.done) g.queue.push_back(done_event(g, *s.done));
  if (s.kind == StepKind::kWaiting) add(MOLT_EVENT_WAITING);
}

void advance(molt_generation& g) {
  if (g.cancel_requested.load(std::memory_order_acquire)) g.gen->cancel();
  if (g.waiting && !g.gen->finished()) g.ladder->budget.idle(g.gen->options().poll_ms);
  g.queue.clear();
  g.step = Step{};
  try {
    g.step = g.gen->step();
  } catch (const Error& e) {
    g.failed = e.what();
    throw Failure{MOLT_ERR_GENERATION, g.failed};
  }
  g.waiting = g.step.kind == StepKind::kWaiting;
  queue_events(g);
}

// The common part of the three starts: options, the prompt, the generation.
template <typename MakePrompt>
molt_status start(molt_ladder* ladder, const molt_options* options, molt_generation** out,
                  const char* fn, MakePrompt make_prompt) {
  return guard(MOLT_ERR_INVALID_ARGUMENT, [&] {
    if (out == nullptr) refuse(MOLT_ERR_INVALID_ARGUMENT, "{}: out is NULL", fn);
    *out = nullptr;
    if (ladder == nullptr) refuse(MOLT_ERR_INVALID_ARGUMENT, "{}: ladder is NULL", fn);
    SessionOptions o = session_options(options);
    const Ladder& l = *ladder->state->ladder;
    const Prompt p = phase(MOLT_ERR_INVALID_ARGUMENT, [&] { return make_prompt(l); });
    o.stop_ids.insert(o.stop_ids.end(), p.stop_ids.begin(), p.stop_ids.end());
    set_num_threads(options != nullptr ? options->threads : 0);
    auto g = std::make_unique<molt_generation>();
    g->ladder = ladder->state;
    g->gen =
        std::make_unique<Generation>(*g->ladder->ladder, &g->ladder->budget, p.ids, std::move(o));
    *out = g.release();
  });
}

}  // namespace
}  // namespace molt::capi

extern "C" {

molt_status molt_generation_start_chat(molt_ladder* ladder, const molt_message* messages,
                                       size_t n_messages, const molt_options* options,
                                       molt_generation** out) {
  const char* fn = "molt_generation_start_chat";
  return molt::capi::start(ladder, options, out, fn, [&](const molt::Ladder& l) {
    if (messages == nullptr && n_messages > 0) {
      refuse(MOLT_ERR_INVALID_ARGUMENT, "{}: messages is NULL", fn);
    }
    std::vector<molt::ChatMessage> chat;
    for (size_t i = 0; i < n_messages; ++i) {
      if (messages[i].role == nullptr || messages[i].content == nullptr) {
        refuse(MOLT_ERR_INVALID_ARGUMENT, "{}: messages[{}].{} is NULL", fn, i,
               messages[i].role == nullptr ? "role" : "content");
      }
      chat.push_back({messages[i].role, messages[i].content});
    }
    return molt::encode_chat(l, chat, "messages");
  });
}

molt_status molt_generation_start_prompt(molt_ladder* ladder, const char* prompt,
                                         const molt_options* options, molt_generation** out) {
  const char* fn = "molt_generation_start_prompt";
  return molt::capi::start(ladder, options, out, fn, [&](const molt::Ladder& l) {
    if (prompt == nullptr) refuse(MOLT_ERR_INVALID_ARGUMENT, "{}: prompt is NULL", fn);
    return molt::encode_text(l, prompt, "prompt");
  });
}

molt_status molt_generation_start_ids(molt_ladder* ladder, const int32_t* ids, size_t n_ids,
                                      const molt_options* options, molt_generation** out) {
  const char* fn = "molt_generation_start_ids";
  return molt::capi::start(ladder, options, out, fn, [&](const molt::Ladder& l) {
    if (ids == nullptr && n_ids > 0) refuse(MOLT_ERR_INVALID_ARGUMENT, "{}: ids is NULL", fn);
    return molt::prompt_from_ids(l, std::vector<int32_t>(ids, ids + n_ids), "ids");
  });
}

void molt_generation_free(molt_generation* generation) {
  delete generation;
}

molt_status molt_step(molt_generation* generation, molt_event* out) {
  return guard(MOLT_ERR_GENERATION, [&] {
    if (generation == nullptr) refuse(MOLT_ERR_INVALID_ARGUMENT, "molt_step: generation is NULL");
    if (out == nullptr) refuse(MOLT_ERR_INVALID_ARGUMENT, "molt_step: out is NULL");
    molt_generation& g = *generation;
    if (!g.failed.empty()) refuse(MOLT_ERR_GENERATION, "{}", g.failed);
    if (g.queue.empty()) {
      if (g.gen->finished()) {
        *out = molt::capi::done_event(g, g.gen->summary());
        return;
      }
      molt::capi::advance(g);
    }
    *out = g.queue.front();
    g.queue.pop_front();
  });
}

molt_status molt_cancel(molt_generation* generation) {
  if (generation == nullptr) {
    molt::capi::set_error("molt_cancel: generation is NULL");
    return MOLT_ERR_INVALID_ARGUMENT;
  }
  generation->cancel_requested.store(true, std::memory_order_release);
  return MOLT_OK;
}

const char* molt_generation_rung(const molt_generation* generation) {
  if (generation == nullptr) {
    molt::capi::set_error("molt_generation_rung: generation is NULL");
    return "";
  }
  return generation->gen->rung_name().c_str();
}

}  // extern "C"
