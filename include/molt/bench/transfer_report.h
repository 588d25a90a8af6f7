// The tiny ladder's KV transfer per route, models/tiny-ladder/TRANSFER.md: tools/tiny-ladder/
// routes.sh fits each route's map and runs `molt transfer eval | needle --json` into maps/eval/;
// transfer_report() writes the page from those runs and the maps' metadata, transfer_routes()
// the routes of ladder.json. No number is typed by hand; tests/cli/transfer_trace_test.cc
// regenerates both, checks the checksums the runs recorded and re-measures one cell.
#pragma once

#include <filesystem>
#include <map>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

namespace molt {

struct TransferRoute {
  std::string from, to;
  std::string name() const { return from + "-" + to; }  // maps/<name>, maps/eval/<name>.*.json
};

// "l:l-int8 l:m" → routes; errors name the item that is not FROM:TO.
std::vector<TransferRoute> parse_transfer_routes(const std::string& text);

// The routes of `ladder`/ladder.json that have a map folder of their own (maps/<from>-<to>), in
// the manifest's order: the ones routes.sh fitted and evaluated.
std::vector<TransferRoute> fitted_routes(const std::filesystem::path& ladder);

// TRANSFER.md for `routes`, from `ladder`/maps/<name>/ (map.safetensors' metadata, read and
// checksum-verified through read_map_dir) and `ladder`/maps/eval/<name>.transfer.json,
// .depth-remap.json and .needle-<context>.json.
std::string transfer_report(const std::filesystem::path& ladder,
                            const std::vector<TransferRoute>& routes);
// The page's plots, (path relative to the page, SVG text): needle accuracy against h for each
// route with `molt transfer heal` runs (maps/eval/<name>.heal-<context>.json).
std::vector<std::pair<std::string, std::string>> transfer_figures(
    const std::filesystem::path& ladder, const std::vector<TransferRoute>& routes);

// `manifest` (ladder.json, key order kept) with its routes derived from the fitted `routes`:
// those first, in the order given; then routes the manifest had that are neither fitted, derived
// nor re-prefill; then each precision rung ("<parent>-int8") leaving by its parent's maps; then
// re-prefill for every upward move left. The same routes always give the same file.
// Each fitted route carries its `evidence` (route_evidence, by route name) for auto; a precision
// rung's derived routes carry their parent's.
nlohmann::ordered_json transfer_routes(
    const nlohmann::ordered_json& manifest, const std::vector<TransferRoute>& routes,
    const std::map<std::string, nlohmann::ordered_json>& evidence = {});

// What auto reads about a route (ladder/manifest.h RouteEvidence), from its runs in
// `ladder`/maps/eval/: the map's and the token-identity floor's NLL gap (<name>.transfer.json)
// and needle accuracy of the receiver and the map per context (<name>.needle-*.json). Null
// when the route has no runs.
nlohmann::ordered_json route_evidence(const std::filesystem::path& ladder,
                                      const TransferRoute& route);

// What a `molt transfer eval | needle --json` run read, by role, checksummed after the
// measurement: {"from": {file: SHA-256}} (the sender's checkpoint files and tokenizer.json),
// "to" (the receiver's checkpoint files), "maps" (every file of the map folder) and "input"
// (the evaluation text or needle file, by file name).
nlohmann::json transfer_run_sha256(const std::filesystem::path& from,
                                   const std::filesystem::path& to,
                                   const std::filesystem::path& maps,
                                   const std::filesystem::path& input);

}  // namespace molt
