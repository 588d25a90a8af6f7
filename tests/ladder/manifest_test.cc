// ladder.json: parsing, validation messages, footprint order, the one-tokenizer rule.
#include <gtest/gtest.h>
#include <unistd.h>

#include <nlohmann/json.hpp>

#include "ladder/shared_fixture.h"
#include "molt/common/error.h"
#include "molt/ladder/ladder.h"
#include "molt/ladder/synthetic.h"
#include "test_util.h"

namespace molt {
namespace {

namespace fs = std::filesystem;

// One small synthetic ladder shared by the tests of this file (written once).
const fs::path& ladder_dir() {
  static const fs::path d = test::shared_fixture("manifest-ladder", [](const fs::path& dir) {
    SyntheticLadderOptions o;
    o.vocab = 300;
    write_synthetic_ladder(dir, o);
  });
  return d;
}

// A manifest beside the shared rungs, private to this process (tests run in parallel).
fs::path scratch_manifest(const std::string& name, const nlohmann::json& j) {
  const fs::path file = ladder_dir() / (name + "-" + std::to_string(::getpid()) + ".json");
  test::write_file(file, j.dump());
  return file;
}

// The error opening `j`, with the file called "bad.json".
std::string error_of(const nlohmann::json& j) {
  const fs::path file = scratch_manifest("bad", j);
  std::string msg;
  try {
    Ladder::open(file);
  } catch (const Error& e) {
    msg = e.what();
  }
  fs::remove(file);
  for (size_t p; (p = msg.find(file.string())) != std::string::npos;)
    msg.replace(p, file.string().size(), "bad.json");
  return msg;
}

nlohmann::json good() {
  return nlohmann::json::parse(test::read_file(ladder_dir() / "ladder.json"));
}

TEST(Manifest, SyntheticLadderOpensInFootprintOrder) {
  auto l = Ladder::open(ladder_dir() / "ladder.json");
  ASSERT_EQ(l->size(), 3);
  EXPECT_EQ(l->name(), "synthetic-ladder");
  EXPECT_EQ(l->rung(0).name(), "l");
  EXPECT_EQ(l->rung(1).name(), "m");
  EXPECT_EQ(l->rung(2).name(), "s");
  EXPECT_GT(l->rung(0).footprint().weight_bytes, l->rung(1).footprint().weight_bytes);
  EXPECT_GT(l->rung(1).footprint().weight_bytes, l->rung(2).footprint().weight_bytes);
  EXPECT_EQ(l->rung(0).path(), ladder_dir() / "l");
  ASSERT_NE(l->tokenizer(), nullptr);
  EXPECT_NE(l->tokenizer_note().find("shared by 3 rung(s)"), std::string::npos)
      << l->tokenizer_note();
  EXPECT_EQ(l->vocab_size(), 300);
  const ManifestRoute* r = l->route(0, 1);
  ASSERT_NE(r, nullptr);
  EXPECT_EQ(r->method, "maps");
  EXPECT_EQ(r->maps, ladder_dir() / "maps" / "l-m");
  EXPECT_FALSE(r->maps_present());
  EXPECT_EQ(l->manifest().routes.size(), 6u);  // every ordered pair
  EXPECT_EQ(l->index("m"), 1);
  EXPECT_THROW(l->index("xl"), Error);
}

TEST(Manifest, OrderComesFromFootprintNotFromTheFile) {
  nlohmann::json j = good();
  std::swap(j["rungs"][0], j["rungs"][2]);  // s, m, l
  const fs::path file = scratch_manifest("reordered", j);
  auto l = Ladder::open(file);
  fs::remove(file);
  EXPECT_EQ(l->rung(0).name(), "l");
  EXPECT_EQ(l->rung(2).name(), "s");
}

TEST(Manifest, BadManifestsNameFileAndField) {
  nlohmann::json j = good();
  j.erase("name");
  EXPECT_NE(error_of(j).find("bad.json: missing field 'name'"), std::string::npos) << error_of(j);

  j = good();
  j["rungs"] = nlohmann::json::array();
  EXPECT_NE(error_of(j).find("lists no rungs"), std::string::npos);

  j = good();
  j["rungs"][1]["name"] = "l";
  EXPECT_NE(error_of(j).find("rungs[1].name: rung 'l' is listed twice"), std::string::npos)
      << error_of(j);

  j = good();
  j["rungs"][2]["path"] = "nowhere";
  EXPECT_NE(error_of(j).find("rungs[2].path: checkpoint folder"), std::string::npos) << error_of(j);

  j = good();
  j["rungs"][0].erase("precision");
  EXPECT_NE(error_of(j).find("rungs[0]: missing field 'precision'"), std::string::npos)
      << error_of(j);

  j = good();
  j["routes"][0]["to"] = "xl";
  EXPECT_NE(error_of(j).find("routes[0]: rung 'xl' is not one of the manifest's rungs"),
            std::string::npos)
      << error_of(j);

  j = good();
  j["routes"][0]["method"] = "reprefill";
  EXPECT_NE(error_of(j).find("routes[0]: give exactly one of 'maps'"), std::string::npos)
      << error_of(j);

  j = good();
  j["routes"][0].erase("maps");
  j["routes"][0]["method"] = "teleport";
  EXPECT_NE(error_of(j).find("routes[0].method: 'teleport' is not a method"), std::string::npos)
      << error_of(j);

  j = good();
  j["routes"][0]["to"] = j["routes"][0]["from"];
  EXPECT_NE(error_of(j).find("goes from rung 'l' to itself"), std::string::npos) << error_of(j);

  j = good();
  j["routes"].push_back(j["routes"][0]);
  EXPECT_NE(error_of(j).find("is listed twice"), std::string::npos) << error_of(j);

  // A route's evidence (what auto reads): every number checked, named by its place.
  const nlohmann::json evidence = {{"nll_gap", 0.05},
                                   {"token_identity_nll_gap", 0.09},
                                   {"prefix", 768},
                                   {"needles",
                                    {{{"tokens", 700}, {"receiver", 0.9}, {"map", 0.1}},
                                     {{"tokens", 2000}, {"receiver", 0.5}, {"map", 0.0}}}}};
  j = good();
  j["routes"][0]["evidence"] = evidence;
  EXPECT_EQ(error_of(j), "") << "good evidence refused";
  j["routes"][0]["evidence"]["needles"][1]["receiver"] = 1.5;
  EXPECT_NE(error_of(j).find("routes[0].evidence.needles[1].receiver: 1.5 is outside [0, 1]"),
            std::string::npos)
      << error_of(j);
  j = good();
  j["routes"][0]["evidence"] = evidence;
  j["routes"][0]["evidence"]["needles"][1]["tokens"] = 600;
  EXPECT_NE(error_of(j).find("needles[1].tokens: not above the previous entry's"),
            std::string::npos)
      << error_of(j);
  j = good();
  j["routes"][0]["evidence"] = evidence;
  j["routes"][0]["evidence"].erase("nll_gap");
  EXPECT_NE(error_of(j).find("routes[0].evidence.nll_gap: missing or not a number"),
            std::string::npos)
      << error_of(j);

  EXPECT_NE(error_of(nlohmann::json::array()).find("expected an object"), std::string::npos);
  try {
    Ladder::open(ladder_dir() / "absent.json");
    ADD_FAILURE();
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("absent.json: ladder manifest not found"),
              std::string::npos);
  }
}

TEST(Manifest, RefusesRungsWithDifferentTokenizers) {
  test::TempDir dir;
  SyntheticLadderOptions o;
  o.vocab = 300;
  o.tokenizer_salt = "other";
  o.rungs = {{"a", 64, 2, 2, 1, 32, 128}, {"b", 64, 1, 2, 1, 32, 128}};
  const fs::path manifest = write_synthetic_ladder(dir.path(), o);
  try {
    Ladder::open(manifest);
    ADD_FAILURE() << "a ladder with two tokenizers opened";
  } catch (const Error& e) {
    const std::string m = e.what();
    EXPECT_NE(m.find("has a different tokenizer from rung"), std::string::npos) << m;
    EXPECT_NE(m.find("fingerprints"), std::string::npos) << m;
  }
}

TEST(Manifest, RungsWithoutTokenizerFilesCompareVocabSize) {
  test::TempDir dir;
  SyntheticLadderOptions o;
  o.vocab = 300;
  o.tokenizer = false;
  o.rungs = {{"a", 64, 2, 2, 1, 32, 128}, {"b", 64, 1, 2, 1, 32, 128}};
  const fs::path manifest = write_synthetic_ladder(dir.path(), o);
  auto l = Ladder::open(manifest);
  EXPECT_EQ(l->tokenizer(), nullptr);
  EXPECT_NE(l->tokenizer_note().find("compared config vocab_size only"), std::string::npos)
      << l->tokenizer_note();

  // A rung with another vocabulary size is refused.
  SyntheticLadderOptions o2 = o;
  o2.vocab = 320;
  o2.rungs = {{"c", 64, 1, 2, 1, 32, 128}};
  write_synthetic_ladder(dir.path() / "other", o2);
  nlohmann::json j = nlohmann::json::parse(test::read_file(manifest));
  j["rungs"].push_back({{"name", "c"}, {"path", "other/c"}, {"precision", "bf16"}});
  test::write_file(dir.path() / "mixed.json", j.dump());
  try {
    Ladder::open(dir.path() / "mixed.json");
    ADD_FAILURE();
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("has vocab_size 320"), std::string::npos) << e.what();
  }
}

TEST(Manifest, ReprefillRoutesAndAbsolutePaths) {
  nlohmann::json j = good();
  j["rungs"][0]["path"] = (ladder_dir() / "l").string();
  j["routes"] = {{{"from", "l"}, {"to", "s"}, {"method", "reprefill"}}};
  const fs::path file = scratch_manifest("abs", j);
  auto l = Ladder::open(file);
  fs::remove(file);
  const ManifestRoute* r = l->route(0, 2);
  ASSERT_NE(r, nullptr);
  EXPECT_EQ(r->method, "reprefill");
  EXPECT_TRUE(r->maps.empty());
  EXPECT_FALSE(r->maps_present());
  EXPECT_EQ(l->route(0, 1), nullptr);
}

}  // namespace
}  // namespace molt
