// molt bench transfer-report | transfer-routes: models/tiny-ladder/TRANSFER.md from the runs of
// tools/tiny-ladder/routes.sh (maps/eval/) and the maps' metadata, and ladder.json's routes
// from the routes it fitted.

#include "command.h"
#include "molt/bench/needles.h"
#include "molt/bench/transfer_report.h"
#include "molt/common/error.h"
#include "molt/formats/atomic_file.h"

namespace molt::cli {
namespace {

namespace fs = std::filesystem;

struct Args {
  std::string ladder, routes, out;
};

const bool registered = register_command([](CLI::App& root) {
  CLI::App* bench = group(root, "bench", "Benchmarks that print figures");
  {
    auto a = std::make_shared<Args>();
    CLI::App* r = bench->add_subcommand(
        "transfer-report", "models/tiny-ladder/TRANSFER.md from maps/eval/ and the maps");
    r->add_option("--ladder", a->ladder, "ladder folder (ladder.json, maps/, maps/eval/)")
        ->required();
    r->add_option("--routes", a->routes,
                  "\"FROM:TO ...\" in page order (default: the routes of ladder.json with a map "
                  "folder of their own, in its order)");
    r->add_option("--out", a->out, "page to write")->required();
    r->callback([a] {
      const auto routes =
          a->routes.empty() ? fitted_routes(a->ladder) : parse_transfer_routes(a->routes);
      // The plots beside the page, where its links point.
      for (const auto& [path, svg] : transfer_figures(a->ladder, routes)) {
        const fs::path file = fs::path(a->out).parent_path() / path;
        fs::create_directories(file.parent_path());
        write_file_atomically(file, svg);
      }
      write_file_atomically(a->out, transfer_report(a->ladder, routes));
    });
  }
  {
    auto a = std::make_shared<Args>();
    CLI::App* r = bench->add_subcommand(
        "transfer-routes",
        "Rewrite ladder.json's routes from the routes fitted (routes.sh), with the evidence of "
        "their runs in maps/eval/");
    r->add_option("--ladder", a->ladder, "ladder folder (ladder.json)")->required();
    r->add_option("--routes", a->routes, "\"FROM:TO ...\": the routes with fitted maps")
        ->required();
    r->callback([a] {
      const fs::path file = fs::path(a->ladder) / "ladder.json";
      const nlohmann::ordered_json m = nlohmann::ordered_json::parse(read_text_file(file));
      const auto routes = parse_transfer_routes(a->routes);
      std::map<std::string, nlohmann::ordered_json> evidence;
      for (const TransferRoute& r : routes) evidence[r.name()] = route_evidence(a->ladder, r);
      write_file_atomically(
          file, transfer_routes(m, routes, evidence).dump(2, ' ', /*ensure_ascii=*/true) + "\n");
    });
  }
});

}  // namespace
}  // namespace molt::cli
