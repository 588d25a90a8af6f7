// models/tiny-ladder/TRANSFER.md and ladder.json's routes trace to the runs in maps/eval/ and the
// committed maps (issue 24): the page and the routes are what `molt bench transfer-report |
// transfer-routes` make of them now, byte for byte; every SHA-256 a run recorded is the
// committed file's; and the cheapest route's map row, re-measured now, is the recorded one.
// MOLT_TRACE_ROOT stands in for the source tree (a broken copy, to see these fail).
#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <nlohmann/json.hpp>
#include <sstream>

#include "molt/bench/ladder_card.h"
#include "molt/bench/transfer_report.h"
#include "molt/ladder/manifest.h"
#include "molt/transfer/map_file.h"
#include "test_util.h"

namespace molt {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;
using test::run_molt;

fs::path root() {
  return test::trace_root();
}
fs::path ladder() {
  return root() / "models" / "tiny-ladder";
}

// Line by line, so that a failure names the first line that differs.
void expect_same_text(const std::string& have, const std::string& want, const std::string& page,
                      const std::string& fix) {
  std::istringstream ws(want), hs(have);
  std::string w, h;
  for (int line = 1; want != have; ++line) {
    const bool more_w = static_cast<bool>(std::getline(ws, w));
    const bool more_h = static_cast<bool>(std::getline(hs, h));
    ASSERT_EQ(h, w) << page << " line " << line << " is not what generates it now: " << fix;
    ASSERT_TRUE(more_w || more_h) << page << " differs from what generates it in its line ends";
  }
}

// Every run of a route in maps/eval/: <name>.transfer.json, .depth-remap.json, .needle-*.json,
// .heal-*.json.
std::vector<std::pair<std::string, json>> runs_of(const TransferRoute& r) {
  std::vector<std::pair<std::string, json>> out;
  for (const auto& e : fs::directory_iterator(ladder() / "maps" / "eval")) {
    const std::string f = e.path().filename().string();
    const std::string kind = f.substr(0, f.find('.') == std::string::npos ? 0 : f.find('.'));
    if (kind == r.name() && e.path().extension() == ".json") {
      out.emplace_back(f, json::parse(test::read_file(e.path())));
    }
  }
  return out;
}

TEST(TransferTrace, PageIsGeneratedFromItsJson) {
  test::TempDir t;
  const auto r = run_molt("bench transfer-report --ladder " + ladder().string() + " --out " +
                          (t / "TRANSFER.md").string());
  ASSERT_EQ(r.exit_code, 0) << r.output;
  const std::string fix =
      "run molt bench transfer-report --ladder models/tiny-ladder --out "
      "models/tiny-ladder/TRANSFER.md (routes.sh does) and commit it";
  expect_same_text(test::read_file(ladder() / "TRANSFER.md"), test::read_file(t / "TRANSFER.md"),
                   "models/tiny-ladder/TRANSFER.md", fix);
  // Its plots, too: every one the page links, as generated now.
  int plots = 0;
  for (const auto& e : fs::recursive_directory_iterator(t.path())) {
    if (e.path().extension() != ".svg") continue;
    const fs::path rel = fs::relative(e.path(), t.path());
    expect_same_text(test::read_file(ladder() / rel), test::read_file(e.path()),
                     "models/tiny-ladder/" + rel.string(), fix);
    EXPECT_NE(test::read_file(t / "TRANSFER.md").find("](" + rel.string() + ")"), std::string::npos)
        << rel << " is not linked from the page";
    ++plots;
  }
  EXPECT_GT(plots, 0) << "TRANSFER.md has no plot of heal (routes.sh HEAL_ONLY=1)";
}

TEST(TransferTrace, LadderRoutesAreDerivedFromTheFittedOnes) {
  // routes.sh rewrites ladder.json from the routes it fitted; the committed file must be that.
  test::TempDir t;
  fs::copy_file(ladder() / "ladder.json", t / "ladder.json");
  // The routes' evidence comes from their runs.
  fs::create_directories(t / "maps");
  fs::copy(ladder() / "maps" / "eval", t / "maps" / "eval");
  std::string routes;
  for (const TransferRoute& r : fitted_routes(ladder())) {
    routes += (routes.empty() ? "" : " ") + r.from + ":" + r.to;
  }
  const auto r = run_molt(
      fmt::format("bench transfer-routes --ladder {} --routes \"{}\"", t.path().string(), routes));
  ASSERT_EQ(r.exit_code, 0) << r.output;
  expect_same_text(test::read_file(ladder() / "ladder.json"), test::read_file(t / "ladder.json"),
                   "models/tiny-ladder/ladder.json",
                   "run molt bench transfer-routes --ladder models/tiny-ladder --routes \"" +
                       routes + "\" (routes.sh does) and commit it");
}

TEST(TransferTrace, RunsRecordTheCommittedFiles) {
  const LadderManifest m = LadderManifest::load(ladder() / "ladder.json");
  auto rung_path = [&](const std::string& name) {
    const auto it = std::find_if(m.rungs.begin(), m.rungs.end(),
                                 [&](const ManifestRung& r) { return r.name == name; });
    EXPECT_NE(it, m.rungs.end()) << name;
    return it == m.rungs.end() ? fs::path() : it->path;
  };
  for (const TransferRoute& route : fitted_routes(ladder())) {
    SCOPED_TRACE(route.name());
    const fs::path maps = ladder() / "maps" / route.name();
    // The committed map folder agrees with its own index.
    EXPECT_NO_THROW(verify_map_index_entry(maps, "map.safetensors"));
    EXPECT_NO_THROW(verify_map_index_entry(maps, "floor.safetensors"));
    int checked = 0;
    for (const auto& [file, run] : runs_of(route)) {
      SCOPED_TRACE(file);
      if (run.contains("token_identity_floor") && run.at("token_identity_floor").is_object()) {
        const json& f = run.at("token_identity_floor");
        const fs::path read = f.at("file").get<std::string>();
        ASSERT_EQ(read.filename(), "floor.safetensors");
        ASSERT_EQ(read.parent_path().filename(), route.name()) << "not the route's committed floor";
        EXPECT_EQ(sha256_file(maps / "floor.safetensors"), f.at("sha256").get<std::string>())
            << "the floor changed since measured";
        ++checked;
      }
      if (run.value("conditions", json::array()).empty() && !run.contains("rows")) {
        continue;  // nothing was measured
      }
      ASSERT_TRUE(run.contains("sha256")) << "the run records no checksums: re-run it";
      // The recorded map folder is the route's, or one of its comparisons under ablations/ (the
      // depth remap, the reference ridge, the embedding-feature map); all are committed.
      const fs::path recorded = run.at("maps").get<std::string>();
      fs::path read_maps;
      if (recorded.filename() == route.name() && recorded.parent_path().filename() == "maps") {
        read_maps = maps;
      } else if (recorded.parent_path().filename() == "ablations" &&
                 (recorded.filename() == route.name() + "-depth" ||
                  recorded.filename() == route.name() + "-ridge" ||
                  recorded.filename() == route.name() + "-embed")) {
        read_maps = ladder() / "maps" / "ablations" / recorded.filename();
        EXPECT_NO_THROW(verify_map_index_entry(read_maps, "map.safetensors"));
      }
      ASSERT_FALSE(read_maps.empty()) << recorded << " is not a committed map folder";
      const std::vector<std::pair<std::string, fs::path>> roles = {{"from", rung_path(route.from)},
                                                                   {"to", rung_path(route.to)},
                                                                   {"maps", read_maps},
                                                                   {"input", ladder() / "data"},
                                                                   {"filler", ladder() / "data"}};
      for (const auto& [role, dir] : roles) {
        if (dir.empty()) continue;
        if (role == "filler" && !run.contains("filler")) continue;  // heal runs alone read one
        for (const auto& [name, sha] : run.at("sha256").at(role).items()) {
          EXPECT_EQ(sha256_file(dir / name), sha.get<std::string>())
              << role << "/" << name << " changed since measured";
          ++checked;
        }
      }
    }
    EXPECT_GT(checked, 0) << "no run of the route records a checksum";
  }
}

TEST(TransferTrace, PairedComparisonsAreThoseOfTheWindows) {
  // The page's paired line, recomputed here from the per-window gaps the runs recorded.
  const std::string page = test::read_file(ladder() / "TRANSFER.md");
  int checked = 0;
  for (const TransferRoute& route : fitted_routes(ladder())) {
    SCOPED_TRACE(route.name());
    const fs::path eval = ladder() / "maps" / "eval";
    const json ev = json::parse(test::read_file(eval / (route.name() + ".transfer.json")));
    const fs::path ref_file = eval / (route.name() + ".reference-ridge.json");
    if (!fs::exists(ref_file)) continue;
    const json ref = json::parse(test::read_file(ref_file));
    if (ref.at("conditions").empty()) continue;
    const json& map = ev.at("conditions").at(0);
    ASSERT_TRUE(map.at("condition").get<std::string>().starts_with("map ("));
    const auto find = [](const json& run, const std::string& prefix) {
      for (const json& c : run.at("conditions")) {
        if (c.at("condition").get<std::string>().starts_with(prefix)) return c;
      }
      return json();
    };
    for (const auto& [other, label] :
         {std::pair{find(ev, "token-identity"), std::string("token-identity floor")},
          std::pair{find(ref, "map ("), std::string("reference ridge")}}) {
      ASSERT_TRUE(other.is_object()) << label;
      const auto a = map.at("window_nll_gaps").get<std::vector<double>>();
      const auto b = other.at("window_nll_gaps").get<std::vector<double>>();
      ASSERT_EQ(a.size(), b.size());
      ASSERT_EQ(static_cast<int64_t>(a.size()), ev.at("windows").get<int64_t>());
      double mean = 0, ss = 0;
      for (size_t w = 0; w < a.size(); ++w) mean += a[w] - b[w];
      mean /= static_cast<double>(a.size());
      for (size_t w = 0; w < a.size(); ++w) ss += std::pow(a[w] - b[w] - mean, 2);
      const double n = static_cast<double>(a.size());
      const std::string want = fmt::format(
          "map − {} {:+.4f} ± {:.4f} (gap ratio {:.2f}×)", label, mean, std::sqrt(ss / (n - 1) / n),
          map.at("nll_gap").get<double>() / other.at("nll_gap").get<double>());
      // The page wraps lines: compare with its line breaks turned into spaces.
      std::string flat = page;
      std::replace(flat.begin(), flat.end(), '\n', ' ');
      EXPECT_NE(flat.find(want), std::string::npos) << want << " is not on the page";
      ++checked;
    }
  }
  EXPECT_GT(checked, 0) << "no route has a reference ridge run";
}

TEST(TransferTrace, MapRowOfTheCheapestRouteReproduces) {
  // The cheapest cell: the route whose two rungs have the fewest parameters, without floors.
  const LadderManifest m = LadderManifest::load(ladder() / "ladder.json");
  auto params = [&](const std::string& name) {
    for (const ManifestRung& r : m.rungs) {
      if (r.name == name) return parameter_count(r.path);
    }
    return int64_t{0};
  };
  std::vector<TransferRoute> routes = fitted_routes(ladder());
  const auto route = std::min_element(routes.begin(), routes.end(), [&](auto& a, auto& b) {
    return params(a.from) + params(a.to) < params(b.from) + params(b.to);
  });
  ASSERT_NE(route, routes.end());
  SCOPED_TRACE(route->name());
  const json was =
      json::parse(test::read_file(ladder() / "maps" / "eval" / (route->name() + ".transfer.json")));
  const int64_t windows = was.at("windows").get<int64_t>();
  // Each window scores every continuation token after the first (its target is the prefix's).
  const int64_t continuation = was.at("scored_tokens").get<int64_t>() / windows + 1;
  const auto rung = [&](const std::string& n) {
    for (const ManifestRung& r : m.rungs) {
      if (r.name == n) return r.path.string();
    }
    return std::string();
  };
  const auto r = run_molt(fmt::format(
      "transfer eval --from {} --to {} --maps {} --text-file {} --prefix {} --continuation {} "
      "--windows {} --no-floors --threads 2 --json",
      rung(route->from), rung(route->to), (ladder() / "maps" / route->name()).string(),
      (ladder() / "data" / "test.txt").string(), was.at("prefix").get<int64_t>(), continuation,
      windows));
  ASSERT_EQ(r.exit_code, 0) << r.output;
  json now;
  std::istringstream lines(r.output);
  for (std::string line; std::getline(lines, line);) {
    if (line.starts_with("{")) now = json::parse(line);
  }
  ASSERT_TRUE(now.is_object()) << r.output;
  EXPECT_EQ(now.at("scored_tokens"), was.at("scored_tokens"));
  // To the page's four decimals and better (threads may reorder sums, not change figures).
  constexpr double kTol = 1e-4;
  for (const char* key : {"native_nll", "sender_nll", "native_seam_kl"}) {
    EXPECT_NEAR(now.at(key).get<double>(), was.at(key).get<double>(), kTol)
        << key << " is not what the committed rungs score now";
  }
  const json& c = now.at("conditions").at(0);
  const auto w =
      std::find_if(was.at("conditions").begin(), was.at("conditions").end(),
                   [&](const json& x) { return x.at("condition") == c.at("condition"); });
  ASSERT_NE(w, was.at("conditions").end()) << c.at("condition") << " not recorded";
  for (const char* key : {"nll", "nll_gap", "transfer_kl", "seam_kl"}) {
    EXPECT_NEAR(c.at(key).get<double>(), w->at(key).get<double>(), kTol)
        << c.at("condition").get<std::string>() << " " << key
        << " is not what the committed map gives now";
  }
}

}  // namespace
}  // namespace molt
