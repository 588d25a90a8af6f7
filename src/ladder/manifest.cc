// ladder.json parsing and validation.
#include "molt/ladder/manifest.h"

#include <nlohmann/json.hpp>
#include <set>

#include "molt/common/error.h"
#include "molt/formats/hf_config.h"

namespace molt {
namespace {

namespace fs = std::filesystem;

const nlohmann::json& field(const nlohmann::json& obj, const std::string& key,
                            const std::string& where) {
  if (!obj.contains(key)) fail("{}: missing field '{}'", where, key);
  return obj[key];
}

std::string string_field(const nlohmann::json& obj, const std::string& key,
                         const std::string& where) {
  const nlohmann::json& v = field(obj, key, where);
  if (!v.is_string()) fail("{}.{}: is a {}, expected a string", where, key, v.type_name());
  std::string s = v.get<std::string>();
  if (s.empty()) fail("{}.{}: is empty", where, key);
  return s;
}

fs::path resolve(const fs::path& base, const std::string& p) {
  fs::path path(p);
  return path.is_absolute() ? path : (base / path).lexically_normal();
}

RouteEvidence parse_evidence(const nlohmann::json& e, const std::string& where) {
  if (!e.is_object()) fail("{}: is a {}, expected an object", where, e.type_name());
  auto number = [&](const nlohmann::json& o, const char* key, const std::string& at, double lo,
                    double hi) {
    if (!o.contains(key) || !o.at(key).is_number()) fail("{}.{}: missing or not a number", at, key);
    const double v = o.at(key).get<double>();
    if (!(v >= lo && v <= hi)) fail("{}.{}: {} is outside [{}, {}]", at, key, v, lo, hi);
    return v;
  };
  RouteEvidence r;
  r.present = true;
  r.nll_gap = number(e, "nll_gap", where, -100, 100);
  r.token_identity_nll_gap = number(e, "token_identity_nll_gap", where, -100, 100);
  r.prefix = static_cast<int64_t>(number(e, "prefix", where, 0, 1e9));
  if (!e.contains("needles") || !e.at("needles").is_array()) {
    fail("{}.needles: missing or not an array", where);
  }
  for (size_t i = 0; i < e.at("needles").size(); ++i) {
    const std::string at = fmt::format("{}.needles[{}]", where, i);
    const nlohmann::json& n = e.at("needles")[i];
    if (!n.is_object()) fail("{}: is a {}, expected an object", at, n.type_name());
    r.needles.push_back({number(n, "tokens", at, 1, 1e9), number(n, "receiver", at, 0, 1),
                         number(n, "map", at, 0, 1)});
    if (i > 0 && r.needles[i].tokens <= r.needles[i - 1].tokens) {
      fail("{}.tokens: not above the previous entry's", at);
    }
  }
  return r;
}

}  // namespace

bool ManifestRoute::maps_present() const {
  std::error_code ec;
  return !maps.empty() && fs::is_regular_file(maps / "index.json", ec);
}

LadderManifest LadderManifest::load(const fs::path& file) {
  if (!fs::exists(file)) fail("{}: ladder manifest not found", file.string());
  return parse(read_json_file(file), file);
}

LadderManifest LadderManifest::parse(const nlohmann::json& j, const fs::path& file) {
  const std::string src = file.string();
  const fs::path base = file.parent_path();
  if (!j.is_object()) fail("{}: is a JSON {}, expected an object", src, j.type_name());
  LadderManifest m;
  m.file = file;
  m.name = string_field(j, "name", src);

  const nlohmann::json& rungs = field(j, "rungs", src);
  if (!rungs.is_array())
    fail("{}: field 'rungs' is a {}, expected an array", src, rungs.type_name());
  if (rungs.empty()) fail("{}: field 'rungs' lists no rungs", src);
  std::set<std::string> names;
  for (size_t i = 0; i < rungs.size(); ++i) {
    const std::string where = fmt::format("{}: rungs[{}]", src, i);
    if (!rungs[i].is_object()) fail("{}: is a {}, expected an object", where, rungs[i].type_name());
    ManifestRung r;
    r.name = string_field(rungs[i], "name", where);
    r.path = resolve(base, string_field(rungs[i], "path", where));
    r.precision = string_field(rungs[i], "precision", where);
    if (!names.insert(r.name).second) fail("{}.name: rung '{}' is listed twice", where, r.name);
    std::error_code ec;  // a path the file system cannot look up (too long, ...) does not exist
    if (!fs::is_directory(r.path, ec)) {
      fail("{}.path: checkpoint folder {} does not exist", where, r.path.string());
    }
    m.rungs.push_back(std::move(r));
  }

  if (j.contains("routes")) {
    const nlohmann::json& routes = j["routes"];
    if (!routes.is_array()) {
      fail("{}: field 'routes' is a {}, expected an array", src, routes.type_name());
    }
    std::set<std::pair<std::string, std::string>> seen;
    for (size_t i = 0; i < routes.size(); ++i) {
      const std::string where = fmt::format("{}: routes[{}]", src, i);
      const nlohmann::json& o = routes[i];
      if (!o.is_object()) fail("{}: is a {}, expected an object", where, o.type_name());
      ManifestRoute r;
      r.from = string_field(o, "from", where);
      r.to = string_field(o, "to", where);
      for (const std::string* end : {&r.from, &r.to}) {
        if (!names.count(*end)) {
          fail("{}: rung '{}' is not one of the manifest's rungs", where, *end);
        }
      }
      if (r.from == r.to) fail("{}: goes from rung '{}' to itself", where, r.from);
      if (!seen.insert({r.from, r.to}).second) {
        fail("{}: route {} → {} is listed twice", where, r.from, r.to);
      }
      const bool has_maps = o.contains("maps"), has_method = o.contains("method");
      if (has_maps == has_method) {
        fail("{}: give exactly one of 'maps' (a map folder) or 'method' (\"reprefill\")", where);
      }
      if (has_maps) {
        r.maps = resolve(base, string_field(o, "maps", where));
        r.method = "maps";
      } else {
        r.method = string_field(o, "method", where);
        if (r.method != "reprefill") {
          fail("{}.method: '{}' is not a method (\"reprefill\"; carry a cache with 'maps')", where,
               r.method);
        }
      }
      if (o.contains("evidence")) {
        if (!has_maps) fail("{}.evidence: only a route with maps has evidence", where);
        r.evidence = parse_evidence(o.at("evidence"), where + ".evidence");
      }
      m.routes.push_back(std::move(r));
    }
  }
  return m;
}

const ManifestRoute* LadderManifest::route(const std::string& from, const std::string& to) const {
  for (const ManifestRoute& r : routes) {
    if (r.from == from && r.to == to) return &r;
  }
  return nullptr;
}

}  // namespace molt
