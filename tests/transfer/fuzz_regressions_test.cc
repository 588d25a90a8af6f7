// Inputs the map fuzzers found (tests/fuzz/regressions/map_meta, map_index): each is refused
// with a molt::Error naming the map file, and nothing else escapes (no nlohmann::json
// exception from a metadata field of the wrong type, no std::filesystem_error).
#include "fuzz_regressions.h"

#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include "fuzz/map_fixture.h"
#include "molt/transfer/map_file.h"

namespace molt {
namespace {

// As map_meta_fuzz.cc: the input is the metadata as a JSON object over a real map's tensors.
TEST(FuzzRegressions, MapMetadata) {
  const fuzz::MapTemplate diagonal =
      fuzz::load_template(MOLT_SOURCE_DIR "/models/tiny-ladder/maps/l-l-int8/map.safetensors");
  const fuzz::MapTemplate ridge = fuzz::load_template(fuzz::write_ridge_map());
  test::TempDir dir;
  test::expect_all_refused(
      "map_meta",
      [&](const std::string& bytes) {
        const nlohmann::json j = nlohmann::json::parse(bytes);
        std::map<std::string, std::string> meta;
        for (const auto& [key, value] : j.items()) {
          meta[key] = value.is_string() ? value.get<std::string>() : value.dump();
        }
        const bool is_diagonal = meta.count("method") && meta["method"] == "diagonal";
        write_safetensors(dir / "map.safetensors", (is_diagonal ? diagonal : ridge).tensors, meta);
        const nlohmann::json index = {
            {"format", "molt-map-index"},
            {"files", {{"map.safetensors", {{"sha256", sha256_file(dir / "map.safetensors")}}}}}};
        test::write_file(dir / "index.json", index.dump());
        EXPECT_NO_THROW(summarize_map_dir(dir.path()));
        read_map_dir(dir.path());
      },
      "map.safetensors");
}

TEST(FuzzRegressions, MapIndex) {
  const std::filesystem::path dir = fuzz::write_ridge_map().parent_path();
  test::expect_all_refused(
      "map_index",
      [&](const std::string& bytes) {
        test::write_file(dir / "index.json", bytes);
        read_map_dir(dir);
      },
      "index.json");
}

}  // namespace
}  // namespace molt
