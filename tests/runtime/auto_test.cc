// auto chooses per migration from the re-read's estimated stall and the route's evidence
// (ladder.json), and its note says why.
#include <fmt/format.h>
#include <gtest/gtest.h>

#include <fstream>
#include <nlohmann/json.hpp>

#include "runtime_fixture.h"

namespace molt {
namespace {

namespace fs = std::filesystem;

// The fixture's ladder with `evidence` on its first mapped route, written beside it (its rung
// and map paths are relative to that folder). Returns the manifest and the route's ends.
struct EvidenceLadder {
  fs::path manifest;
  std::string from, to;
};
EvidenceLadder with_evidence(const std::string& name, const nlohmann::json& evidence) {
  const fs::path base = test::runtime_ladder().with_maps;
  nlohmann::json j = nlohmann::json::parse(test::read_file(base));
  EvidenceLadder e;
  for (auto& r : j["routes"]) {
    if (!r.contains("maps")) continue;
    if (!evidence.is_null()) r["evidence"] = evidence;
    e.from = r["from"];
    e.to = r["to"];
    break;
  }
  e.manifest = base.parent_path() / ("ladder-auto-" + name + ".json");
  std::ofstream(e.manifest) << j.dump(1);
  return e;
}

nlohmann::json needles(double receiver, double map) {
  return {{"nll_gap", 0.05},
          {"token_identity_nll_gap", 0.09},
          {"prefix", 768},
          {"needles",
           {{{"tokens", 40}, {"receiver", receiver}, {"map", map}},
            {{"tokens", 2000}, {"receiver", 0.9}, {"map", 0.0}}}}};
}

// One auto migration from the route's sender to its receiver after a 40-token prompt.
MigrationEvent migrate_auto(const EvidenceLadder& e, SessionOptions o) {
  if (!test::runtime_ladder().maps_note.empty()) return {};
  auto l = Ladder::open(e.manifest);
  o.policy = Policy::kAuto;
  o.max_tokens = 6;
  o.stop_at_eos = false;
  o.up_after = int64_t{1} << 40;
  Generation g(*l, nullptr, test::test_prompt(40), o);
  g.force_migration(l->index(e.from));
  g.step();
  g.step();
  g.force_migration(l->index(e.to));
  while (!g.finished()) g.step();
  if (g.migrations().empty()) {
    ADD_FAILURE() << "no migration";
    return {};
  }
  return g.migrations().back();
}

class Auto : public testing::Test {
 protected:
  void SetUp() override {
    if (!test::runtime_ladder().maps_note.empty()) GTEST_SKIP() << test::runtime_ladder().maps_note;
  }
};

TEST_F(Auto, MoltWhenTheMapKeepsTheSpecifics) {
  SessionOptions o;
  o.auto_max_stall_ms = 0;  // never re-read
  const MigrationEvent m = migrate_auto(with_evidence("keeps", needles(0.9, 0.855)), o);
  EXPECT_EQ(m.policy, "molt") << m.note;
  EXPECT_NE(m.note.find("the map keeps 0.95 of the receiver's needle accuracy at ~40 tokens"),
            std::string::npos)
      << m.note;
}

TEST_F(Auto, HealWhenTheMapLosesThem) {
  SessionOptions o;
  o.auto_max_stall_ms = 0;
  o.heal_chunk = 16;
  const EvidenceLadder e = with_evidence("loses", needles(0.9, 0.09));
  const MigrationEvent m = migrate_auto(e, o);
  EXPECT_EQ(m.policy, "heal") << m.note;
  EXPECT_NE(m.note.find("keeps 0.10 of the receiver's needle accuracy"), std::string::npos)
      << m.note;
  // The receiver's layers × chunks of 16 over the carried context.
  auto l = Ladder::open(e.manifest);
  const int64_t layers = l->rung(l->index(e.to)).config().num_hidden_layers;
  const int64_t steps = layers * ((m.context + 15) / 16);
  EXPECT_NE(m.note.find(fmt::format("native again after {} decode steps", steps)),
            std::string::npos)
      << m.note;
}

TEST_F(Auto, HealWhenTheEvidenceCannotJudge) {
  SessionOptions o;
  o.auto_max_stall_ms = 0;
  MigrationEvent m = migrate_auto(with_evidence("weak", needles(0.1, 0.1)), o);
  EXPECT_EQ(m.policy, "heal") << m.note;
  EXPECT_NE(m.note.find("too few to judge the map"), std::string::npos) << m.note;
  m = migrate_auto(with_evidence("none", nullptr), o);
  EXPECT_EQ(m.policy, "heal") << m.note;
  EXPECT_NE(m.note.find("no evidence for the route"), std::string::npos) << m.note;
}

TEST_F(Auto, ReReadsWhenItsStallFits) {
  SessionOptions o;
  o.auto_max_stall_ms = 1e9;
  MigrationEvent m = migrate_auto(with_evidence("cheap", needles(0.9, 0.855)), o);
  EXPECT_EQ(m.policy, "release-reprefill") << m.note;
  EXPECT_NE(m.note.find("at this generation's prefill speed"), std::string::npos) << m.note;
  o.auto_max_stall_ms = 0;
  o.auto_reprefill_below = 1000;
  m = migrate_auto(with_evidence("short", needles(0.9, 0.855)), o);
  EXPECT_EQ(m.policy, "release-reprefill") << m.note;
  EXPECT_NE(m.note.find("< auto_reprefill_below 1000"), std::string::npos) << m.note;
}

}  // namespace
}  // namespace molt
