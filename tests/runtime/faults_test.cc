// Forced faults in the middle of an answer: a map refused by its checksum falls back to a re-read
// and says why; a receiver whose checkpoint became unreadable after the ladder opened is skipped
// — the answer so far is kept and the context is re-read on another rung, or the generation
// parks with a clear event. Never a crash, never a lost or repeated token.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <limits>

#include "molt/common/error.h"
#include "molt/runtime/generation.h"
#include "runtime_fixture.h"

namespace molt {
namespace {

namespace fs = std::filesystem;
using test::footprint_mib;
using test::runtime_ladder;

// A private copy of the fixture ladder (maps included) that a test may break.
fs::path copy_ladder(const test::TempDir& dir) {
  const fs::path src = runtime_ladder().with_maps.parent_path();
  fs::copy(src, dir.path() / "ladder", fs::copy_options::recursive);
  return dir.path() / "ladder" / "ladder.json";
}

struct Outcome {
  std::vector<Step> steps;
  std::vector<int32_t> answer;
};

// Starts on l, then from the check before token 4 only `to` (or nothing, when to < 0) fits.
Outcome run_squeezed(Ladder& l, Policy policy, int to, int64_t tokens = 10) {
  SessionOptions o;
  o.policy = policy;
  o.max_tokens = tokens;
  o.stop_at_eos = false;
  o.max_parked_steps = 20;
  const int64_t cap = static_cast<int64_t>(test::test_prompt().size()) + tokens;
  FunctionBudget b([&](const BudgetQuery& q) {
    if (q.step < 4) return std::numeric_limits<double>::infinity();
    return to < 0 ? 0.0 : footprint_mib(l, to, cap) * 1.05;
  });
  Generation g(l, &b, test::test_prompt(), o);
  Outcome r;
  while (!g.finished()) {
    try {
      r.steps.push_back(g.step());
    } catch (const Error& e) {
      ADD_FAILURE() << "step threw: " << e.what();
      break;
    }
    if (r.steps.size() > 200) break;
  }
  r.answer.assign(g.answer().begin(), g.answer().end());
  return r;
}

void expect_contiguous(const Outcome& r) {
  int64_t next = 0;
  for (const Step& s : r.steps) {
    if (s.token) {
      EXPECT_EQ(s.token->index, next++);
    }
  }
  EXPECT_EQ(next, static_cast<int64_t>(r.answer.size()));
}

const MigrationEvent* first_migration(const Outcome& r) {
  for (const Step& s : r.steps) {
    if (s.migration) return &*s.migration;
  }
  return nullptr;
}

TEST(Faults, ACorruptMapIsRefusedAndTheReceiverReReads) {
  if (!runtime_ladder().maps_note.empty()) GTEST_SKIP() << runtime_ladder().maps_note;
  for (const char* damage : {"corrupt", "deleted"}) {
    SCOPED_TRACE(damage);
    test::TempDir dir;
    const fs::path manifest = copy_ladder(dir);
    auto l = Ladder::open(manifest);
    const fs::path map = l->route(0, 1)->maps / "map.safetensors";
    if (std::string(damage) == "deleted") {
      fs::remove(map);
    } else {
      std::fstream f(map, std::ios::in | std::ios::out | std::ios::binary);
      f.seekp(static_cast<std::streamoff>(fs::file_size(map) / 2));
      f.write("molt", 4);  // the checksum in index.json no longer matches
    }
    const Outcome r = run_squeezed(*l, Policy::kMolt, 1);
    expect_contiguous(r);
    EXPECT_EQ(r.answer.size(), 10u);
    const MigrationEvent* m = first_migration(r);
    ASSERT_NE(m, nullptr);
    EXPECT_EQ(m->to, "m");
    EXPECT_EQ(m->policy, "release-reprefill");
    EXPECT_NE(m->note.find("map refused"), std::string::npos) << m->note;
    // Re-read: from the seam on, m's native tokens.
    std::vector<int32_t> prefix = test::test_prompt();
    for (size_t i = 0; i < r.answer.size(); ++i) {
      if (i >= 4) {
        EXPECT_EQ(r.answer[i], runtime_ladder().oracle(1, prefix)) << i;
      }
      prefix.push_back(r.answer[i]);
    }
  }
}

// Truncates rung `name`'s checkpoint after the ladder opened it.
void truncate_checkpoint(const Ladder& l, const std::string& name) {
  for (const auto& e : fs::directory_iterator(l.rung(l.index(name)).path())) {
    if (e.path().extension() == ".safetensors") fs::resize_file(e.path(), fs::file_size(e) / 3);
  }
}

TEST(Faults, AnUnreadableReceiverMovesTheAnswerToAnotherRung) {
  for (Policy p : {Policy::kReleaseReprefill, Policy::kMolt, Policy::kReprefill}) {
    SCOPED_TRACE(policy_name(p));
    test::TempDir dir;
    auto l = Ladder::open(copy_ladder(dir));
    truncate_checkpoint(*l, "m");
    const Outcome r = run_squeezed(*l, p, 1);  // m fits, and fails to load: s is what is left
    expect_contiguous(r);
    EXPECT_EQ(r.answer.size(), 10u);
    const MigrationEvent* m = first_migration(r);
    ASSERT_NE(m, nullptr);
    EXPECT_EQ(m->to, "s");
    EXPECT_NE(m->note.find("rung 'm' failed to load"), std::string::npos) << m->note;
    std::vector<int32_t> prefix = test::test_prompt();
    for (size_t i = 0; i < r.answer.size(); ++i) {
      if (i >= 4) {
        EXPECT_EQ(r.answer[i], runtime_ladder().oracle(2, prefix)) << i;
      }
      prefix.push_back(r.answer[i]);
    }
  }
}

TEST(Faults, WithNothingElseLoadableItParksAndKeepsTheAnswer) {
  test::TempDir dir;
  auto l = Ladder::open(copy_ladder(dir));
  truncate_checkpoint(*l, "m");
  truncate_checkpoint(*l, "s");
  SessionOptions o;
  o.policy = Policy::kReleaseReprefill;
  o.max_tokens = 10;
  o.stop_at_eos = false;
  o.max_parked_steps = 5;
  const int64_t cap = static_cast<int64_t>(test::test_prompt().size()) + o.max_tokens;
  FunctionBudget b([&](const BudgetQuery& q) {
    return q.step < 4 ? std::numeric_limits<double>::infinity() : footprint_mib(*l, 1, cap) * 1.05;
  });
  Generation g(*l, &b, test::test_prompt(), o);
  bool parked = false;
  std::string note;
  try {
    for (int i = 0; i < 30 && !g.finished(); ++i) {
      const Step s = g.step();
      if (s.park) {
        parked = true;
        note = s.park->note;
      }
    }
  } catch (const Error& e) {
    // The budget never lets l back in: after max_parked_steps the generation says so.
    EXPECT_NE(std::string(e.what()).find("parked for"), std::string::npos) << e.what();
  }
  EXPECT_TRUE(parked);
  EXPECT_NE(note.find("failed to load"), std::string::npos) << note;
  EXPECT_EQ(g.tokens(), 4);  // the answer so far is kept
}

}  // namespace
}  // namespace molt
