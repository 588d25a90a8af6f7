#include "molt/transfer/stats.h"

#include <cblas.h>

#include <algorithm>
#include <cstring>
#include <fstream>

#include "molt/common/error.h"
#include "molt/formats/atomic_file.h"

namespace molt {

void Moments::reset(int64_t dx, int64_t dy, bool diag) {
  if (diag && dx != dy) fail("diagonal moments need equal dimensions ({} vs {})", dx, dy);
  dim_x = dx;
  dim_y = dy;
  diagonal = diag;
  n = 0;
  sx.assign(static_cast<size_t>(dx), 0.0);
  sy.assign(static_cast<size_t>(dy), 0.0);
  syy.assign(static_cast<size_t>(dy), 0.0);
  xx.assign(static_cast<size_t>(diag ? dx : dx * dx), 0.0);
  xy.assign(static_cast<size_t>(diag ? dx : dx * dy), 0.0);
}

void Moments::add(const double* x, const double* y, int64_t rows) {
  if (rows <= 0) return;
  n += static_cast<double>(rows);
  for (int64_t r = 0; r < rows; ++r) {
    const double* xr = x + r * dim_x;
    const double* yr = y + r * dim_y;
    for (int64_t i = 0; i < dim_x; ++i) sx[i] += xr[i];
    for (int64_t i = 0; i < dim_y; ++i) {
      sy[i] += yr[i];
      syy[i] += yr[i] * yr[i];
    }
    if (diagonal) {
      for (int64_t i = 0; i < dim_x; ++i) {
        xx[i] += xr[i] * xr[i];
        xy[i] += xr[i] * yr[i];
      }
    }
  }
  if (diagonal) return;
  const int d = static_cast<int>(dim_x), m = static_cast<int>(dim_y), k = static_cast<int>(rows);
  // Σxxᵀ += XᵀX (upper triangle), Σxyᵀ += XᵀY.
  cblas_dsyrk(CblasRowMajor, CblasUpper, CblasTrans, d, k, 1.0, x, d, 1.0, xx.data(), d);
  cblas_dgemm(CblasRowMajor, CblasTrans, CblasNoTrans, d, m, k, 1.0, x, d, y, m, 1.0, xy.data(), m);
}

void Moments::merge(const Moments& o) {
  if (o.dim_x != dim_x || o.dim_y != dim_y || o.diagonal != diagonal) {
    fail("moments of different shapes cannot merge");
  }
  n += o.n;
  auto add = [](std::vector<double>& a, const std::vector<double>& b) {
    for (size_t i = 0; i < a.size(); ++i) a[i] += b[i];
  };
  add(sx, o.sx);
  add(sy, o.sy);
  add(syy, o.syy);
  add(xx, o.xx);
  add(xy, o.xy);
}

namespace {

nlohmann::json geometry_json(const CacheGeometry& g) {
  return {{"n_layers", g.n_layers},
          {"n_kv_heads", g.n_kv_heads},
          {"head_dim", g.head_dim},
          {"hidden_size", g.hidden_size}};
}

CacheGeometry geometry_from(const nlohmann::json& j) {
  CacheGeometry g;
  g.n_layers = j.at("n_layers").get<int64_t>();
  g.n_kv_heads = j.at("n_kv_heads").get<int64_t>();
  g.head_dim = j.at("head_dim").get<int64_t>();
  g.hidden_size = j.at("hidden_size").get<int64_t>();
  return g;
}

void init_split(SplitStats& s, const StatsLayout& l) {
  const int64_t dx = l.x_dim();
  const int64_t dy = l.receiver.n_layers * l.receiver.kv_dim();
  s.sequences = 0;
  s.k.reset(dx, dy, l.diagonal());
  s.v.reset(dx, dy, l.diagonal());
  s.boundary.resize(l.boundaries.size());
  for (Moments& b : s.boundary) b.reset(l.sender.hidden_size, l.receiver.hidden_size, false);
  s.tok_count.assign(static_cast<size_t>(l.token_vocab), 0.0);
  s.tok_k.assign(static_cast<size_t>(l.token_vocab * dy), 0.0);
  s.tok_v.assign(static_cast<size_t>(l.token_vocab * dy), 0.0);
}

void visit_moments(const std::string& p, Moments& m,
                   const std::function<void(const std::string&, double*, size_t)>& f) {
  f(p + ".n", &m.n, 1);
  f(p + ".sx", m.sx.data(), m.sx.size());
  f(p + ".sy", m.sy.data(), m.sy.size());
  f(p + ".syy", m.syy.data(), m.syy.size());
  f(p + ".xx", m.xx.data(), m.xx.size());
  f(p + ".xy", m.xy.data(), m.xy.size());
}

void visit_split(const std::string& p, SplitStats& s,
                 const std::function<void(const std::string&, double*, size_t)>& f) {
  visit_moments(p + ".k", s.k, f);
  visit_moments(p + ".v", s.v, f);
  for (size_t i = 0; i < s.boundary.size(); ++i) {
    visit_moments(p + ".boundary" + std::to_string(i), s.boundary[i], f);
  }
  f(p + ".tok_count", s.tok_count.data(), s.tok_count.size());
  f(p + ".tok_k", s.tok_k.data(), s.tok_k.size());
  f(p + ".tok_v", s.tok_v.data(), s.tok_v.size());
}

constexpr char kMagic[8] = {'M', 'O', 'L', 'T', 'S', 'T', 'A', 'T'};

}  // namespace

nlohmann::json StatsLayout::to_json() const {
  nlohmann::json b = nlohmann::json::array();
  for (const BoundarySpec& s : boundaries)
    b.push_back({{"r", s.r}, {"sender_hidden", s.sender_hidden}});
  nlohmann::json j = {
      {"kind", kind},    {"sender", geometry_json(sender)}, {"receiver", geometry_json(receiver)},
      {"boundaries", b}, {"token_vocab", token_vocab},      {"embed_tokens", embed_tokens}};
  if (rotated_keys) j["keys"] = "rotated";  // absent: un-rotated, as every earlier file
  if (joint_kv) j["sender_kv"] = "joint";   // absent: keys and values apart
  if (native_layers > 0) j["native_layers"] = native_layers;  // absent: embeddings
  return j;
}

StatsLayout StatsLayout::from_json(const nlohmann::json& j, const std::string& source) {
  try {
    StatsLayout l;
    l.kind = j.at("kind").get<std::string>();
    l.sender = geometry_from(j.at("sender"));
    l.receiver = geometry_from(j.at("receiver"));
    for (const auto& b : j.at("boundaries")) {
      l.boundaries.push_back({b.at("r").get<int64_t>(), b.at("sender_hidden").get<int64_t>()});
    }
    l.token_vocab = j.at("token_vocab").get<int64_t>();
    l.embed_tokens = j.value("embed_tokens", int64_t{0});  // absent before token features
    const std::string keys = j.value("keys", std::string("un-rotated"));
    if (keys != "un-rotated" && keys != "rotated") fail("{}: layout: keys '{}'", source, keys);
    l.rotated_keys = keys == "rotated";
    const std::string kv = j.value("sender_kv", std::string("separate"));
    if (kv != "separate" && kv != "joint") fail("{}: layout: sender_kv '{}'", source, kv);
    l.joint_kv = kv == "joint";
    if (l.embed_tokens < 0 || l.embed_tokens > 16)
      fail("{}: layout: embed_tokens {}", source, l.embed_tokens);
    l.native_layers = j.value("native_layers", int64_t{0});
    if (l.native_layers < 0 || l.native_layers >= l.receiver.n_layers)
      fail("{}: layout: native_layers {}", source, l.native_layers);
    return l;
  } catch (const nlohmann::json::exception& e) {
    fail("{}: layout: {}", source, e.what());
  }
}

void RouteStats::init(const StatsLayout& l) {
  layout = l;
  init_split(train, l);
  init_split(heldout, l);
  select_windows.clear();
}

void RouteStats::add_select_window(int64_t index, std::vector<int32_t> ids) {
  select_windows.emplace_back(index, std::move(ids));
  std::sort(select_windows.begin(), select_windows.end(),
            [](const auto& a, const auto& b) { return a.first < b.first; });
  if (static_cast<int64_t>(select_windows.size()) > max_select_windows) {
    select_windows.resize(static_cast<size_t>(max_select_windows));
  }
}

void for_each_array(RouteStats& s,
                    const std::function<void(const std::string&, double*, size_t)>& f) {
  visit_split("train", s.train, f);
  visit_split("heldout", s.heldout, f);
}

void RouteStats::merge(const RouteStats& o, const std::string& source) {
  if (!(o.layout == layout)) {
    fail("{}: statistics layout differs ({} vs {})", source, o.layout.to_json().dump(),
         layout.to_json().dump());
  }
  if (o.settings != settings) {
    fail("{}: fit settings differ from the other shards ({} vs {})", source, o.settings.dump(),
         settings.dump());
  }
  if (o.shard_count != shard_count) {
    fail("{}: shard of {} but the others are of {}", source, o.shard_count, shard_count);
  }
  for (int64_t i : o.shards_merged) {
    if (std::find(shards_merged.begin(), shards_merged.end(), i) != shards_merged.end()) {
      fail("{}: shard {}/{} is already merged", source, i + 1, shard_count);
    }
  }
  RouteStats& other = const_cast<RouteStats&>(o);
  std::vector<std::pair<double*, size_t>> mine;
  for_each_array(*this, [&](const std::string&, double* p, size_t n) { mine.emplace_back(p, n); });
  size_t i = 0;
  for_each_array(other, [&](const std::string&, double* p, size_t n) {
    for (size_t e = 0; e < n; ++e) mine[i].first[e] += p[e];
    ++i;
  });
  train.sequences += o.train.sequences;
  heldout.sequences += o.heldout.sequences;
  for (const auto& [idx, ids] : o.select_windows) add_select_window(idx, ids);
  shards_merged.insert(shards_merged.end(), o.shards_merged.begin(), o.shards_merged.end());
  std::sort(shards_merged.begin(), shards_merged.end());
}

void RouteStats::save(const std::filesystem::path& path) const {
  RouteStats& self = const_cast<RouteStats&>(*this);
  nlohmann::json arrays = nlohmann::json::array();
  for_each_array(self, [&](const std::string& name, double*, size_t n) {
    arrays.push_back({{"name", name}, {"count", n}});
  });
  nlohmann::json windows = nlohmann::json::array();
  for (const auto& [idx, ids] : select_windows) windows.push_back({{"index", idx}, {"ids", ids}});
  const nlohmann::json header = {{"format", "molt-route-stats"},
                                 {"version", 1},
                                 {"layout", layout.to_json()},
                                 {"settings", settings},
                                 {"shard", {shard_index, shard_count}},
                                 {"shards_merged", shards_merged},
                                 {"sequences", {train.sequences, heldout.sequences}},
                                 {"max_select_windows", max_select_windows},
                                 {"select_windows", windows},
                                 {"arrays", arrays}};
  const std::string h = header.dump();
  AtomicFile f(path);  // a full disk leaves no truncated statistics under the real name
  const uint64_t len = h.size();
  f.write(kMagic, 8);
  f.write(&len, 8);
  f.write(h);
  for_each_array(self,
                 [&](const std::string&, double* p, size_t n) { f.write(p, n * sizeof(double)); });
  f.commit();
}

RouteStats RouteStats::load(const std::filesystem::path& path) {
  const std::string src = path.string();
  std::ifstream f(path, std::ios::binary);
  if (!f) fail("{}: cannot open statistics file", src);
  char magic[8];
  uint64_t len = 0;
  if (!f.read(magic, 8) || std::memcmp(magic, kMagic, 8) != 0) {
    fail("{}: not a molt statistics file (bad magic)", src);
  }
  if (!f.read(reinterpret_cast<char*>(&len), 8) || len > (uint64_t{1} << 30)) {
    fail("{}: bad header length", src);
  }
  std::string h(len, '\0');
  if (!f.read(h.data(), static_cast<std::streamsize>(len))) fail("{}: truncated header", src);
  RouteStats s;
  try {
    const nlohmann::json j = nlohmann::json::parse(h);
    if (j.at("format") != "molt-route-stats" || j.at("version") != 1) {
      fail("{}: unsupported statistics format {} version {}", src, j.at("format").dump(),
           j.at("version").dump());
    }
    s.init(StatsLayout::from_json(j.at("layout"), src));
    s.settings = j.at("settings");
    s.shard_index = j.at("shard").at(0).get<int64_t>();
    s.shard_count = j.at("shard").at(1).get<int64_t>();
    s.shards_merged = j.at("shards_merged").get<std::vector<int64_t>>();
    s.train.sequences = j.at("sequences").at(0).get<int64_t>();
    s.heldout.sequences = j.at("sequences").at(1).get<int64_t>();
    s.max_select_windows = j.at("max_select_windows").get<int64_t>();
    for (const auto& w : j.at("select_windows")) {
      s.select_windows.emplace_back(w.at("index").get<int64_t>(),
                                    w.at("ids").get<std::vector<int32_t>>());
    }
    const auto& arrays = j.at("arrays");
    size_t i = 0;
    for_each_array(s, [&](const std::string& name, double* p, size_t n) {
      if (i >= arrays.size() || arrays[i].at("name") != name || arrays[i].at("count") != n) {
        fail("{}: array '{}' does not match the layout", src, name);
      }
      if (!f.read(reinterpret_cast<char*>(p), static_cast<std::streamsize>(n * sizeof(double)))) {
        fail("{}: truncated at array '{}'", src, name);
      }
      ++i;
    });
  } catch (const nlohmann::json::exception& e) {
    fail("{}: header: {}", src, e.what());
  }
  if (f.peek() != std::char_traits<char>::eof()) fail("{}: trailing bytes after the arrays", src);
  return s;
}

}  // namespace molt
