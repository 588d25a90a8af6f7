// The ladder manifest, ladder.json (DESIGN.md §5):
//
//   {"name": "tiny-ladder",
//    "rungs":  [{"name": "l", "path": "l", "precision": "bf16"}, ...],
//    "routes": [{"from": "l", "to": "m", "maps": "maps/l-m"},
//               {"from": "m", "to": "l", "method": "reprefill"}, ...]}
//
// A route with maps may carry "evidence": what the route's map measured on held-out text
// (tools/tiny-ladder/routes.sh → `molt bench transfer-routes`), which policy auto reads:
//   "evidence": {"nll_gap": 0.0587, "token_identity_nll_gap": 0.0883, "prefix": 768,
//                "needles": [{"tokens": 694, "receiver": 0.9, "map": 0.0333}, ...]}
//
// Paths are relative to the manifest's folder (absolute paths are kept). A route carries a cache
// either through a map folder (transfer.h: index.json + map.safetensors) or by re-prefill.
// A map folder that does not exist yet is not an error here: the runtime falls back to
// re-prefill and says so.
#pragma once

#include <cstdint>
#include <filesystem>
#include <nlohmann/json_fwd.hpp>
#include <string>
#include <vector>

namespace molt {

struct ManifestRung {
  std::string name;
  std::filesystem::path path;  // resolved
  std::string precision;       // "f32", "bf16", "int8", ... as the manifest says
};

// Quality of a route's map on held-out text: NLL gap (nats/token after a carried prefix) beside
// the token-identity floor's, and needle accuracy with the switch right before the answer,
// the receiver reading the prompt itself beside the map, at each measured context.
struct RouteEvidence {
  struct Needles {
    double tokens = 0, receiver = 0, map = 0;
  };
  bool present = false;
  double nll_gap = 0, token_identity_nll_gap = 0;
  int64_t prefix = 0;
  std::vector<Needles> needles;  // by tokens, ascending
};

struct ManifestRoute {
  std::string from, to;
  std::filesystem::path maps;  // resolved map folder; empty for method "reprefill"
  std::string method;          // "maps" or "reprefill"
  RouteEvidence evidence;      // maps routes only; present when ladder.json records it
  bool maps_present() const;   // maps/index.json exists
};

struct LadderManifest {
  std::filesystem::path file;
  std::string name;
  std::vector<ManifestRung> rungs;
  std::vector<ManifestRoute> routes;

  // Errors name the file and the field ("ladder.json: rungs[1].path: ...").
  static LadderManifest load(const std::filesystem::path& file);
  static LadderManifest parse(const nlohmann::json& j, const std::filesystem::path& file);
  const ManifestRoute* route(const std::string& from, const std::string& to) const;
};

}  // namespace molt
