// The C API in process: the stream it hands out is the generation's own (same tokens, rungs
// and migrations as molt::Generation), a budget pushed from another thread parks and resumes
// the generation, cancel from another thread ends it, and two generations interleaved on one
// ladder each produce what they produce alone.
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <cmath>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

#include "molt/molt.h"
#include "molt/pressure/trace.h"
#include "molt/runtime/generation.h"
#include "molt/runtime/prompt.h"

namespace molt {
namespace {

const std::string kSrc = MOLT_SOURCE_DIR;
const std::string kTiny = kSrc + "/models/tiny-ladder/ladder.json";
const std::string kSpike = kSrc + "/traces/spike_mid_answer.json";
const char* kPrompt = "initrd provides the capability to load a RAM disk by the boot loader.";

struct Stream {
  std::vector<int32_t> ids;
  std::vector<std::string> rungs, migrations;  // "from>to"
  int parks = 0, resumes = 0, waits = 0;
  molt_done_event done{};
  std::string reason;
};

molt_ladder* open_tiny() {
  molt_ladder* l = nullptr;
  EXPECT_EQ(molt_ladder_open(kTiny.c_str(), &l), MOLT_OK) << molt_last_error();
  return l;
}

molt_options options(int max_tokens) {
  molt_options o = molt_default_options();
  o.max_tokens = max_tokens;
  o.stop_at_eos = 0;
  o.threads = 1;
  return o;
}

// Steps to DONE; `on_event` sees every event first.
template <typename F>
Stream drain(molt_generation* g, F on_event) {
  Stream s;
  molt_event e;
  for (int i = 0; i < 100000; ++i) {
    const molt_status st = molt_step(g, &e);
    EXPECT_EQ(st, MOLT_OK) << molt_last_error();
    if (st != MOLT_OK) break;
    on_event(e);
    if (e.kind == MOLT_EVENT_TOKEN) {
      EXPECT_EQ(e.token.index, static_cast<int64_t>(s.ids.size()));
      EXPECT_EQ(std::strlen(e.token.text), e.token.text_len);
      s.ids.push_back(e.token.id);
      s.rungs.emplace_back(e.token.rung);
    } else if (e.kind == MOLT_EVENT_MIGRATION) {
      s.migrations.push_back(std::string(e.migration.from) + ">" + e.migration.to);
    } else if (e.kind == MOLT_EVENT_PARK) {
      ++s.parks;
    } else if (e.kind == MOLT_EVENT_RESUME) {
      ++s.resumes;
    } else if (e.kind == MOLT_EVENT_WAITING) {
      ++s.waits;
    } else if (e.kind == MOLT_EVENT_DONE) {
      s.done = e.done;
      s.reason = e.done.reason;
      break;
    }
  }
  return s;
}

Stream drain(molt_generation* g) {
  return drain(g, [](const molt_event&) {});
}

TEST(Capi, StreamIsTheGenerationsOwn) {
  molt_ladder* l = open_tiny();
  ASSERT_EQ(molt_ladder_set_budget_source(l, ("trace:" + kSpike).c_str()), MOLT_OK);
  molt_options o = options(48);
  molt_generation* g = nullptr;
  ASSERT_EQ(molt_generation_start_prompt(l, kPrompt, &o, &g), MOLT_OK) << molt_last_error();
  const Stream c = drain(g);
  molt_generation_free(g);
  molt_ladder_free(l);

  auto ladder = Ladder::open(kTiny);
  TraceBudget budget(PressureTrace::load(kSpike));
  SessionOptions so;
  so.max_tokens = 48;
  so.stop_at_eos = false;
  Generation ref(*ladder, &budget, encode_text(*ladder, kPrompt).ids, so);
  std::vector<std::string> migrations;
  while (!ref.finished()) {
    const Step s = ref.step();
    if (s.migration) migrations.push_back(s.migration->from + ">" + s.migration->to);
  }
  EXPECT_EQ(c.ids, std::vector<int32_t>(ref.answer().begin(), ref.answer().end()));
  EXPECT_EQ(c.rungs, ref.answer_rungs());
  EXPECT_EQ(c.migrations, migrations);
  EXPECT_FALSE(c.migrations.empty());
  EXPECT_EQ(c.done.tokens, 48);
  EXPECT_EQ(c.reason, "max_tokens");
  EXPECT_EQ(c.done.migrations, static_cast<int64_t>(migrations.size()));
}

TEST(Capi, ChatTurnsAndOptionsJson) {
  molt_ladder* l = open_tiny();
  molt_options o = molt_default_options();
  o.threads = 1;
  o.json =
      R"({"max_tokens": 5, "stop_at_eos": false, "sampling": {"temperature": 0.8, "seed": 3}})";
  const molt_message m[] = {{"system", "Be brief."}, {"user", "What is a RAM disk?"}};
  molt_generation* g = nullptr;
  ASSERT_EQ(molt_generation_start_chat(l, m, 2, &o, &g), MOLT_OK) << molt_last_error();
  const Stream s = drain(g);
  EXPECT_EQ(s.done.tokens, 5);  // the JSON's max_tokens wins over the struct's 64
  molt_generation_free(g);
  molt_ladder_free(l);
}

TEST(Capi, PushedBudgetParksAndResumesFromAnotherThread) {
  molt_ladder* l = open_tiny();
  ASSERT_EQ(molt_ladder_set_budget_source(l, "push"), MOLT_OK);
  molt_options o = options(20);
  o.json = R"({"poll_ms": 1000})";  // a push must wake the wait long before this
  molt_generation* g = nullptr;
  ASSERT_EQ(molt_generation_start_prompt(l, kPrompt, &o, &g), MOLT_OK) << molt_last_error();
  std::vector<std::thread> app;
  int tokens = 0;
  bool resumed_push = false;
  const auto t0 = std::chrono::steady_clock::now();
  const Stream s = drain(g, [&](const molt_event& e) {
    if (e.kind == MOLT_EVENT_TOKEN && ++tokens == 5) {
      app.emplace_back([l] { molt_set_budget_mib(l, 0); });  // a memory warning
      app.back().join();
    }
    if (e.kind == MOLT_EVENT_WAITING && !resumed_push) {
      resumed_push = true;
      app.emplace_back([l] {
        std::this_thread::sleep_for(std::chrono::milliseconds(30));
        molt_set_budget_mib(l, INFINITY);
      });
    }
  });
  for (auto& t : app) {
    if (t.joinable()) t.join();
  }
  const double s_elapsed =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  EXPECT_EQ(s.done.tokens, 20);
  EXPECT_EQ(s.ids.size(), 20u);
  EXPECT_EQ(s.parks, 1);
  EXPECT_EQ(s.resumes, 1);
  EXPECT_GE(s.waits, 1);
  EXPECT_LT(s_elapsed, 30.0);
  molt_generation_free(g);
  molt_ladder_free(l);
}

TEST(Capi, CancelFromAnotherThread) {
  molt_ladder* l = open_tiny();
  molt_options o = options(2000);
  molt_generation* g = nullptr;
  ASSERT_EQ(molt_generation_start_prompt(l, kPrompt, &o, &g), MOLT_OK) << molt_last_error();
  std::thread ui;
  const Stream s = drain(g, [&](const molt_event& e) {
    if (e.kind == MOLT_EVENT_TOKEN && e.token.index == 3) ui = std::thread([g] { molt_cancel(g); });
  });
  ui.join();
  EXPECT_EQ(s.reason, "cancelled");
  EXPECT_LT(s.done.tokens, 2000);
  molt_generation_free(g);
  molt_ladder_free(l);
}

TEST(Capi, InterleavedGenerationsMatchEachAlone) {
  molt_ladder* l = open_tiny();
  molt_options o = options(12);
  const char* prompts[] = {kPrompt, "the boot loader reads the kernel"};
  std::vector<std::vector<int32_t>> alone;
  for (const char* p : prompts) {
    molt_generation* g = nullptr;
    ASSERT_EQ(molt_generation_start_prompt(l, p, &o, &g), MOLT_OK);
    alone.push_back(drain(g).ids);
    molt_generation_free(g);
  }
  molt_generation *a = nullptr, *b = nullptr;
  ASSERT_EQ(molt_generation_start_prompt(l, prompts[0], &o, &a), MOLT_OK);
  ASSERT_EQ(molt_generation_start_prompt(l, prompts[1], &o, &b), MOLT_OK);
  std::vector<int32_t> got[2];
  bool done[2] = {false, false};
  molt_event e;
  while (!done[0] || !done[1]) {
    for (int i = 0; i < 2; ++i) {
      if (done[i]) continue;
      ASSERT_EQ(molt_step(i == 0 ? a : b, &e), MOLT_OK) << molt_last_error();
      if (e.kind == MOLT_EVENT_TOKEN) got[i].push_back(e.token.id);
      done[i] = e.kind == MOLT_EVENT_DONE;
    }
  }
  EXPECT_EQ(got[0], alone[0]);
  EXPECT_EQ(got[1], alone[1]);
  molt_generation_free(a);
  molt_generation_free(b);
  int32_t released = -1;
  EXPECT_EQ(molt_ladder_release_unused(l, &released), MOLT_OK);
  EXPECT_GE(released, 1);  // the top rung stayed loaded for them; nobody holds it now
  molt_ladder_free(l);
}

}  // namespace
}  // namespace molt
