#include "molt/transfer/map_file.h"

#include <openssl/evp.h>

#include <cstring>
#include <fstream>
#include <list>
#include <memory>
#include <nlohmann/json.hpp>

#include "molt/common/error.h"
#include "molt/formats/atomic_dir.h"
#include "molt/formats/atomic_file.h"
#include "molt/formats/hf_config.h"
#include "molt/formats/safetensors.h"
#include "molt/model/model.h"

namespace molt {
namespace {

constexpr const char* kMapFile = "map.safetensors";
constexpr const char* kIndexFile = "index.json";
constexpr const char* kRopeStyle = "rotate-half";  // Hugging Face / Qwen2 RoPE

// Metadata keys the reader interprets itself; the rest go to MapData::info.
const char* const kStructuralKeys[] = {"format",   "format_version", "method",   "sender",
                                       "receiver", "sources",        "boundary", "features"};

// Largest embed_tokens a map may declare (lags beyond t − 2 were measured to add nothing).
constexpr int64_t kMaxEmbedTokens = 16;

std::span<const std::byte> as_bytes(const float* p, size_t n) {
  return {reinterpret_cast<const std::byte*>(p), n * sizeof(float)};
}

std::string head_name(int64_t j, char kv, int64_t h, const char* what) {
  return fmt::format("layers.{}.{}.heads.{}.{}", j, kv, h, what);
}

// A positive integer no larger than `max` (bounds every size the reader multiplies or
// allocates from: kv_dim, layer counts, tensor shapes).
int64_t size_field(const nlohmann::json& j, const char* key, int64_t max, const char* side) {
  if (!j.is_object() || !j.contains(key)) fail("'{}' lacks '{}'", side, key);
  const nlohmann::json& v = j[key];
  if (!v.is_number_integer() || (v.is_number_unsigned() && v.get<uint64_t>() > uint64_t(max)) ||
      v.get<int64_t>() <= 0 || v.get<int64_t>() > max) {
    fail("'{}.{}' is {}, expected an integer in 1..{}", side, key, v.dump(), max);
  }
  return v.get<int64_t>();
}

RungSpec rung_from_json(const nlohmann::json& j, const char* side) {
  constexpr int64_t kMaxCount = int64_t{1} << 16, kMaxHidden = int64_t{1} << 24;
  if (!j.is_object()) fail("'{}' is a JSON {}, expected an object", side, j.type_name());
  RungSpec r;
  if (j.contains("name") && j["name"].is_string()) r.name = j["name"].get<std::string>();
  r.geometry.n_layers = size_field(j, "n_layers", kMaxCount, side);
  r.geometry.n_kv_heads = size_field(j, "n_kv_heads", kMaxCount, side);
  r.geometry.head_dim = size_field(j, "head_dim", kMaxCount, side);
  r.geometry.hidden_size = size_field(j, "hidden_size", kMaxHidden, side);
  const std::string rope_side = std::string(side) + ".rope";
  if (!j.contains("rope") || !j["rope"].is_object()) fail("'{}' is not an object", rope_side);
  const nlohmann::json& rope = j["rope"];
  r.rope.head_dim = size_field(rope, "head_dim", kMaxCount, rope_side.c_str());
  if (!rope.contains("theta") || !rope["theta"].is_number() || !(rope["theta"].get<double>() > 0)) {
    fail("'{}.theta' is not a positive number", rope_side);
  }
  r.rope.theta = rope["theta"].get<double>();
  if (!rope.contains("style") || !rope["style"].is_string() ||
      rope["style"].get<std::string>() != kRopeStyle) {
    fail("'{}.style' is {}; only \"{}\" is supported", rope_side,
         rope.contains("style") ? rope["style"].dump() : "absent", kRopeStyle);
  }
  return r;
}

// A list of layer indices (each an integer in [0, n_layers)).
std::vector<int64_t> layer_list(const nlohmann::json& v, int64_t n_layers,
                                const std::string& what) {
  if (!v.is_array()) fail("{} is a JSON {}, expected a list of sender layers", what, v.type_name());
  std::vector<int64_t> out;
  for (const nlohmann::json& s : v) {
    if (!s.is_number_integer() || s.get<int64_t>() < 0 || s.get<int64_t>() >= n_layers ||
        (s.is_number_unsigned() && s.get<uint64_t>() >= uint64_t(n_layers))) {
      fail("{} lists {}, not a sender layer (sender has {})", what, s.dump(), n_layers);
    }
    out.push_back(s.get<int64_t>());
  }
  if (out.empty()) fail("{} lists no source layers", what);
  return out;
}

// A boundary entry's integer field.
int64_t boundary_field(const nlohmann::json& b, const char* key, const std::string& what) {
  if (!b.is_object() || !b.contains(key) || !b[key].is_number_integer()) {
    fail("{} needs an integer '{}'", what, key);
  }
  return b[key].get<int64_t>();
}

// Metadata value → JSON: objects, arrays, numbers and booleans are parsed, the rest stay strings.
nlohmann::json meta_value(const std::string& s) {
  if (!s.empty() && (s[0] == '{' || s[0] == '[' || s[0] == '-' || (s[0] >= '0' && s[0] <= '9') ||
                     s == "true" || s == "false")) {
    auto j = nlohmann::json::parse(s, nullptr, /*allow_exceptions=*/false);
    if (!j.is_discarded()) return j;
  }
  return s;
}

// A tensor of `shape` as f32; `dtype` is what the file must hold (F32, or BF16 converted exactly).
std::vector<float> read_f32(const SafetensorsFile& f, const std::string& name,
                            const std::vector<int64_t>& shape, DType dtype = DType::F32) {
  const TensorView* t = f.find(name);
  if (t == nullptr) fail("{}: tensor '{}' is missing", f.path().string(), name);
  if (t->dtype != dtype) {
    fail("{}: tensor '{}' has dtype {}, expected {}", f.path().string(), name, dtype_name(t->dtype),
         dtype_name(dtype));
  }
  if (t->shape != shape) {
    fail("{}: tensor '{}' has shape {}, expected [{}]", f.path().string(), name, t->shape_str(),
         fmt::join(shape, ", "));
  }
  std::vector<float> out(static_cast<size_t>(t->numel()));
  if (dtype == DType::BF16) {
    const auto* h = static_cast<const std::byte*>(t->data);
    for (size_t i = 0; i < out.size(); ++i) {
      uint16_t x;
      std::memcpy(&x, h + 2 * i, 2);
      out[i] = bf16_to_f32(x);
    }
  } else {
    std::memcpy(out.data(), t->data, t->nbytes);
  }
  return out;
}

void check_side(const char* side, const RungSpec& in_map, const Model& m,
                const std::filesystem::path& file) {
  const CacheGeometry g = m.cache_geometry();
  const std::string model_dir = m.store().dir().string();
  auto field = [&](const char* name, int64_t want, int64_t have) {
    if (want != have) {
      fail("{}: {} {} is {} in the map but {} in {}: this map is for another route", file.string(),
           side, name, want, have, model_dir);
    }
  };
  field("n_layers", in_map.geometry.n_layers, g.n_layers);
  field("n_kv_heads", in_map.geometry.n_kv_heads, g.n_kv_heads);
  field("head_dim", in_map.geometry.head_dim, g.head_dim);
  field("hidden_size", in_map.geometry.hidden_size, g.hidden_size);
  const RopeSpec r = m.rope();
  if (in_map.rope.head_dim != r.head_dim || in_map.rope.theta != r.theta) {
    fail(
        "{}: {} RoPE spec (theta {}, head_dim {}) differs from {} (theta {}, head_dim {}): "
        "keys would be un-rotated at the wrong angles",
        file.string(), side, in_map.rope.theta, in_map.rope.head_dim, model_dir, r.theta,
        r.head_dim);
  }
}

// dir/index.json, checked to be a molt map index whose names are all files inside the folder.
nlohmann::json read_index(const std::filesystem::path& dir) {
  const std::filesystem::path index_path = dir / kIndexFile;
  std::error_code ec;
  if (!std::filesystem::exists(index_path, ec)) {
    fail("{}: missing; a map directory holds map.safetensors and index.json (its checksums)",
         index_path.string());
  }
  nlohmann::json index;
  try {
    index = read_json_file(index_path);  // refuses 1e400 and absurd nesting too
  } catch (const Error& e) {
    fail("{}: not valid JSON: {}", index_path.string(), e.what());
  }
  if (!index.is_object() || !index.contains("format") || index["format"] != "molt-map-index" ||
      !index.contains("files") || !index["files"].is_object()) {
    fail("{}: not a molt map index (needs \"format\": \"molt-map-index\" and \"files\")",
         index_path.string());
  }
  for (const auto& [name, entry] : index["files"].items()) {
    // Only files of the map folder itself: the index must not make us read anything else.
    if (name.empty() || name == "." || name == ".." ||
        name.find_first_of(std::string("/\0", 2)) != std::string::npos) {
      fail("{}: lists '{}', which is not a file name inside the map folder", index_path.string(),
           name);
    }
    const std::filesystem::path p = dir / name;
    if (!std::filesystem::is_regular_file(p, ec))
      fail("{}: lists {} which is missing", index_path.string(), name);
    if (!entry.is_object() || !entry.contains("sha256") || !entry["sha256"].is_string()) {
      fail("{}: entry '{}' has no sha256", index_path.string(), name);
    }
  }
  return index;
}

// The file's SHA-256, checked against a listed entry of `index`.
std::string verify_entry(const std::filesystem::path& dir, const nlohmann::json& index,
                         const std::string& name) {
  const std::filesystem::path index_path = dir / kIndexFile;
  if (!index["files"].contains(name)) fail("{}: does not list {}", index_path.string(), name);
  std::string have = sha256_file(dir / name);  // returned: not const, so it moves
  const std::string want = index["files"][name]["sha256"].get<std::string>();
  if (have != want) {
    fail(
        "{}: SHA-256 of {} is {} but the index says {}: the file is corrupt or was changed "
        "after fitting",
        index_path.string(), name, have, want);
  }
  return have;
}

}  // namespace

int64_t LayerMap::k_in() const {
  return static_cast<int64_t>(k_sources.size()) * kv_s * (joint_kv ? 2 : 1) + embed_in;
}
int64_t LayerMap::v_in() const {
  return static_cast<int64_t>(v_sources.size()) * kv_s * (joint_kv ? 2 : 1) + embed_in;
}

RungSpec RungSpec::from_json(const nlohmann::json& j, const char* side) {
  return rung_from_json(j, side);
}

RungSpec RungSpec::of(const Model& m, const std::string& name) {
  return {name, m.cache_geometry(), m.rope()};
}

nlohmann::json RungSpec::to_json() const {
  return {{"name", name},
          {"n_layers", geometry.n_layers},
          {"n_kv_heads", geometry.n_kv_heads},
          {"head_dim", geometry.head_dim},
          {"hidden_size", geometry.hidden_size},
          {"rope", {{"theta", rope.theta}, {"head_dim", rope.head_dim}, {"style", kRopeStyle}}}};
}

std::string sha256_file(const std::filesystem::path& path) {
  std::ifstream f(path, std::ios::binary);
  if (!f) fail("{}: cannot open to checksum", path.string());
  std::unique_ptr<EVP_MD_CTX, decltype(&EVP_MD_CTX_free)> ctx(EVP_MD_CTX_new(), EVP_MD_CTX_free);
  if (!ctx || EVP_DigestInit_ex(ctx.get(), EVP_sha256(), nullptr) != 1) {
    fail("SHA-256: OpenSSL init failed");
  }
  std::vector<char> buf(1 << 20);
  while (f) {
    f.read(buf.data(), static_cast<std::streamsize>(buf.size()));
    const std::streamsize got = f.gcount();
    if (got > 0) EVP_DigestUpdate(ctx.get(), buf.data(), static_cast<size_t>(got));
  }
  unsigned char md[EVP_MAX_MD_SIZE];
  unsigned int len = 0;
  EVP_DigestFinal_ex(ctx.get(), md, &len);
  std::string hex;
  for (unsigned int i = 0; i < len; ++i) hex += fmt::format("{:02x}", md[i]);
  return hex;
}

void write_map_dir(const std::filesystem::path& dir, const MapData& map,
                   const std::function<void(const std::filesystem::path&)>& beside) {
  const CacheGeometry& gr = map.receiver.geometry;
  const int64_t hd = gr.head_dim, kvr = gr.kv_dim();
  if (static_cast<int64_t>(map.layers.size()) != gr.n_layers) {
    fail("map: {} layer maps for a receiver of {} layers", map.layers.size(), gr.n_layers);
  }
  const bool diagonal = map.method == "diagonal";
  if (map.weight_dtype != DType::F32 && (diagonal || map.weight_dtype != DType::BF16)) {
    fail("map: weights stored as {} (a {} map stores F32{})", dtype_name(map.weight_dtype),
         map.method, diagonal ? "" : " or BF16");
  }
  const bool bf16 = map.weight_dtype == DType::BF16;
  std::list<std::vector<uint16_t>> rounded;  // BF16 copies the tensors point into (stable)
  std::vector<TensorToWrite> tensors;
  nlohmann::json src_k = nlohmann::json::array(), src_v = nlohmann::json::array();
  for (int64_t j = 0; j < gr.n_layers; ++j) {
    const LayerMap& L = map.layers[static_cast<size_t>(j)];
    src_k.push_back(L.k_sources);
    src_v.push_back(L.v_sources);
    for (int64_t h = 0; h < gr.n_kv_heads; ++h) {
      if (diagonal) {
        const std::pair<const char*, const std::vector<float>*> parts[] = {
            {"k.scale", &L.k_scale},
            {"k.offset", &L.k_offset},
            {"v.scale", &L.v_scale},
            {"v.offset", &L.v_offset}};
        for (const auto& [what, vec] : parts) {
          if (static_cast<int64_t>(vec->size()) != kvr)
            fail("map: layer {} {} has a bad size", j, what);
          tensors.push_back({head_name(j, what[0], h, what + 2),
                             DType::F32,
                             {hd},
                             as_bytes(vec->data() + h * hd, static_cast<size_t>(hd))});
        }
        continue;
      }
      for (char kv : {'k', 'v'}) {
        const std::vector<float>& w = kv == 'k' ? L.k_weight : L.v_weight;
        const std::vector<float>& b = kv == 'k' ? L.k_bias : L.v_bias;
        const int64_t in = kv == 'k' ? L.k_in() : L.v_in();
        if (static_cast<int64_t>(w.size()) != kvr * in || static_cast<int64_t>(b.size()) != kvr) {
          fail("map: layer {} {} map has a bad size", j, kv);
        }
        if (bf16) {
          std::vector<uint16_t>& b16 = rounded.emplace_back(static_cast<size_t>(hd * in));
          for (int64_t i = 0; i < hd * in; ++i) b16[i] = f32_to_bf16(w[h * hd * in + i]);
          tensors.push_back({head_name(j, kv, h, "weight"),
                             DType::BF16,
                             {hd, in},
                             std::as_bytes(std::span<const uint16_t>(b16))});
        } else {
          tensors.push_back({head_name(j, kv, h, "weight"),
                             DType::F32,
                             {hd, in},
                             as_bytes(w.data() + h * hd * in, static_cast<size_t>(hd * in))});
        }
        tensors.push_back({head_name(j, kv, h, "bias"),
                           DType::F32,
                           {hd},
                           as_bytes(b.data() + h * hd, static_cast<size_t>(hd))});
      }
    }
  }
  nlohmann::json boundary = nlohmann::json::array();
  for (const BoundaryMap& b : map.boundaries) {
    const int64_t hr = gr.hidden_size, hs = map.sender.geometry.hidden_size;
    if (static_cast<int64_t>(b.weight.size()) != hr * hs) fail("map: boundary r={} bad size", b.r);
    boundary.push_back(
        {{"r", b.r}, {"sender_hidden", b.sender_hidden}, {"receiver_hidden", gr.n_layers - b.r}});
    tensors.push_back({fmt::format("boundary.r{}.weight", b.r),
                       DType::F32,
                       {hr, hs},
                       as_bytes(b.weight.data(), b.weight.size())});
    tensors.push_back({fmt::format("boundary.r{}.bias", b.r),
                       DType::F32,
                       {hr},
                       as_bytes(b.bias.data(), b.bias.size())});
  }
  std::map<std::string, std::string> meta;
  for (const auto& [key, value] : map.info.items()) {
    meta[key] = value.is_string() ? value.get<std::string>() : value.dump();
  }
  meta["format"] = "molt-kv-map";
  meta["format_version"] = std::to_string(kMapFormatVersion);
  meta["method"] = map.method;
  meta["sender"] = map.sender.to_json().dump();
  meta["receiver"] = map.receiver.to_json().dump();
  meta["sources"] = nlohmann::json{{"k", src_k}, {"v", src_v}}.dump();
  meta["boundary"] = boundary.dump();
  meta["features"] = map.features.to_json().dump();

  // The map and its index appear together or not at all (a reader never meets an index whose
  // files are incomplete); within the staging folder the index is still written last.
  AtomicDir out(dir);
  const std::filesystem::path file = out / kMapFile;
  write_safetensors(file, tensors, meta);
  const nlohmann::json index = {
      {"format", "molt-map-index"},
      {"format_version", kMapFormatVersion},
      {"files",
       {{kMapFile, {{"sha256", sha256_file(file)}, {"bytes", std::filesystem::file_size(file)}}}}}};
  write_file_atomically(out / kIndexFile, index.dump(2) + "\n");
  if (beside) beside(out.staging());
  // Whatever else the folder held (statistics, reports) stays; stale temporaries do not.
  out.commit([](const std::string& name) {
    return !(name.size() > 4 && name.compare(name.size() - 4, 4, ".tmp") == 0);
  });
}

MapData read_map_dir(const std::filesystem::path& dir) {
  const std::filesystem::path file = dir / kMapFile;
  verify_entry(dir, read_index(dir), kMapFile);

  auto st = SafetensorsFile::open(file);
  const auto& meta = st->metadata();
  auto get = [&](const char* key) -> const std::string& {
    auto it = meta.find(key);
    if (it == meta.end()) fail("{}: __metadata__ lacks '{}'", file.string(), key);
    return it->second;
  };
  if (get("format") != "molt-kv-map")
    fail("{}: format '{}' is not molt-kv-map", file.string(), get("format"));
  int version = 0;
  for (int v = kMinMapFormatVersion; v <= kMapFormatVersion; ++v) {
    if (get("format_version") == std::to_string(v)) version = v;
  }
  if (version == 0) {
    fail("{}: format_version {} is not supported (this molt reads {} to {})", file.string(),
         get("format_version"), kMinMapFormatVersion, kMapFormatVersion);
  }
  MapData map;
  nlohmann::json sources, boundary, features = nlohmann::json::object();
  try {
    map.method = get("method");
    map.sender = rung_from_json(parse_json_text(get("sender"), "'sender'"), "sender");
    map.receiver = rung_from_json(parse_json_text(get("receiver"), "'receiver'"), "receiver");
    sources = parse_json_text(get("sources"), "'sources'");
    boundary = parse_json_text(get("boundary"), "'boundary'");
    if (version >= 2) features = parse_json_text(get("features"), "'features'");
  } catch (const nlohmann::json::exception& e) {
    fail("{}: __metadata__: {}", file.string(), e.what());
  } catch (const Error& e) {
    fail("{}: __metadata__: {}", file.string(), e.what());
  }
  if (map.method != "ridge" && map.method != "depth-remap" && map.method != "diagonal") {
    fail("{}: unknown method '{}'", file.string(), map.method);
  }
  for (const auto& [key, value] : meta) {
    if (std::find(std::begin(kStructuralKeys), std::end(kStructuralKeys), key) ==
        std::end(kStructuralKeys)) {
      map.info[key] = meta_value(value);
    }
  }
  // How the keys were mapped: un-rotated (the RoPE sandwich; absent in every file before the
  // ablation) or as cached ("rotated", the ablation's maps).
  if (map.info.contains("keys") && map.info["keys"] != "un-rotated" &&
      map.info["keys"] != "rotated") {
    fail("{}: __metadata__ 'keys' is {}, expected \"un-rotated\" or \"rotated\"", file.string(),
         map.info["keys"].dump());
  }
  const CacheGeometry& gs = map.sender.geometry;
  const CacheGeometry& gr = map.receiver.geometry;
  const int64_t hd = gr.head_dim, kvr = gr.kv_dim(), kvs = gs.kv_dim();
  const bool diagonal = map.method == "diagonal";
  if (!features.is_object()) {
    fail("{}: __metadata__ 'features' is a JSON {}, expected an object", file.string(),
         features.type_name());
  }
  if (features.contains("embed_tokens")) {
    const nlohmann::json& e = features["embed_tokens"];
    if (!e.is_number_integer() || e.get<int64_t>() < 0 || e.get<int64_t>() > kMaxEmbedTokens ||
        (e.is_number_unsigned() && e.get<uint64_t>() > uint64_t(kMaxEmbedTokens))) {
      fail("{}: __metadata__ 'features.embed_tokens' is {}, expected an integer in 0..{}",
           file.string(), e.dump(), kMaxEmbedTokens);
    }
    map.features.embed_tokens = e.get<int64_t>();
  }
  if (features.contains("sender_kv")) {
    const nlohmann::json& j = features["sender_kv"];
    if (version < 3 || !j.is_string() || (j != "joint" && j != "separate")) {
      fail(
          "{}: __metadata__ 'features.sender_kv' is {}, expected \"joint\" or \"separate\" "
          "(format_version 3)",
          file.string(), j.dump());
    }
    map.features.joint_kv = j == "joint";
  }
  if (features.contains("native_layers")) {
    const nlohmann::json& j = features["native_layers"];
    if (version < 4 || !j.is_number_integer() || j.get<int64_t>() < 0 ||
        j.get<int64_t>() >= gr.n_layers ||
        (j.is_number_unsigned() && j.get<uint64_t>() >= uint64_t(gr.n_layers))) {
      fail(
          "{}: __metadata__ 'features.native_layers' is {}, expected an integer in 0..{} "
          "(format_version 4)",
          file.string(), j.dump(), gr.n_layers - 1);
    }
    map.features.native_layers = j.get<int64_t>();
  }
  if (diagonal &&
      (map.features.embed_tokens > 0 || map.features.joint_kv || map.features.native_layers > 0)) {
    fail("{}: a diagonal map takes no token features or native layers and reads K and V apart",
         file.string());
  }
  if (diagonal && kvs != kvr) fail("{}: a diagonal map needs equal KV widths", file.string());
  if (!sources.is_object() || !sources.contains("k") || !sources.contains("v") ||
      !sources["k"].is_array() || !sources["v"].is_array() ||
      static_cast<int64_t>(sources["k"].size()) != gr.n_layers ||
      static_cast<int64_t>(sources["v"].size()) != gr.n_layers) {
    fail("{}: __metadata__ 'sources' must list sources for each of {} receiver layers",
         file.string(), gr.n_layers);
  }
  if (!diagonal) {
    // Every weight of a file has the dtype of the first (F32 or BF16).
    const TensorView* first = st->find(head_name(0, 'k', 0, "weight"));
    if (first != nullptr && first->dtype == DType::BF16) map.weight_dtype = DType::BF16;
  }
  map.layers.resize(static_cast<size_t>(gr.n_layers));
  for (int64_t j = 0; j < gr.n_layers; ++j) {
    LayerMap& L = map.layers[static_cast<size_t>(j)];
    L.kv_s = kvs;
    L.embed_in = map.features.embed_tokens * gr.hidden_size;
    L.joint_kv = map.features.joint_kv;
    for (const char kv : {'k', 'v'}) {
      (kv == 'k' ? L.k_sources : L.v_sources) =
          layer_list(sources[std::string(1, kv)][static_cast<size_t>(j)], gs.n_layers,
                     fmt::format("{}: __metadata__ 'sources.{}[{}]'", file.string(), kv, j));
    }
    auto gather = [&](char kv, const char* what, int64_t in) {
      std::vector<float> out;
      for (int64_t h = 0; h < gr.n_kv_heads; ++h) {
        std::vector<int64_t> shape =
            in > 0 ? std::vector<int64_t>{hd, in} : std::vector<int64_t>{hd};
        std::vector<float> part = read_f32(*st, head_name(j, kv, h, what), shape,
                                           in > 0 && !diagonal ? map.weight_dtype : DType::F32);
        out.insert(out.end(), part.begin(), part.end());
      }
      return out;
    };
    if (diagonal) {
      L.k_scale = gather('k', "scale", 0);
      L.k_offset = gather('k', "offset", 0);
      L.v_scale = gather('v', "scale", 0);
      L.v_offset = gather('v', "offset", 0);
    } else {
      L.k_weight = gather('k', "weight", L.k_in());
      L.k_bias = gather('k', "bias", 0);
      L.v_weight = gather('v', "weight", L.v_in());
      L.v_bias = gather('v', "bias", 0);
    }
    (void)kvr;
  }
  if (!boundary.is_array()) {
    fail("{}: __metadata__ 'boundary' is a JSON {}, expected a list", file.string(),
         boundary.type_name());
  }
  for (size_t i = 0; i < boundary.size(); ++i) {
    const nlohmann::json& b = boundary[i];
    const std::string what = fmt::format("{}: __metadata__ 'boundary[{}]'", file.string(), i);
    BoundaryMap bm;
    bm.r = boundary_field(b, "r", what);
    bm.sender_hidden = boundary_field(b, "sender_hidden", what);
    if (bm.r < 1 || bm.r > gr.n_layers || bm.sender_hidden < 0 || bm.sender_hidden > gs.n_layers) {
      fail("{}: boundary r={} from sender hidden {} is out of range", file.string(), bm.r,
           bm.sender_hidden);
    }
    bm.weight =
        read_f32(*st, fmt::format("boundary.r{}.weight", bm.r), {gr.hidden_size, gs.hidden_size});
    bm.bias = read_f32(*st, fmt::format("boundary.r{}.bias", bm.r), {gr.hidden_size});
    map.boundaries.push_back(std::move(bm));
  }
  return map;
}

void check_route(const MapData& map, const std::filesystem::path& dir, const Model& sender,
                 const Model& receiver) {
  const std::filesystem::path file = dir / kMapFile;
  check_side("sender", map.sender, sender, file);
  check_side("receiver", map.receiver, receiver, file);
}

void add_to_map_index(const std::filesystem::path& dir, const std::string& name) {
  nlohmann::json index = read_index(dir);
  const std::filesystem::path p = dir / name;
  index["files"][name] = {{"sha256", sha256_file(p)}, {"bytes", std::filesystem::file_size(p)}};
  write_file_atomically(dir / kIndexFile, index.dump(2) + "\n");
}

void add_to_map_dir(const std::filesystem::path& dir, const std::string& name,
                    const std::function<void(const std::filesystem::path&)>& write) {
  nlohmann::json index = read_index(dir);
  AtomicDir out(dir);
  write(out / name);
  const std::filesystem::path p = out / name;
  index["files"][name] = {{"sha256", sha256_file(p)}, {"bytes", std::filesystem::file_size(p)}};
  write_file_atomically(out / kIndexFile, index.dump(2) + "\n");
  // The map and everything else are carried over as they are (hard links where possible).
  out.commit([](const std::string& n) {
    return !(n.size() > 4 && n.compare(n.size() - 4, 4, ".tmp") == 0);
  });
}

bool map_index_lists(const std::filesystem::path& dir, const std::string& name) {
  try {
    return read_index(dir)["files"].contains(name);
  } catch (const Error&) {
    return false;
  }
}

std::string verify_map_index_entry(const std::filesystem::path& dir, const std::string& name) {
  return verify_entry(dir, read_index(dir), name);
}

MapSummary summarize_map_dir(const std::filesystem::path& dir) {
  MapSummary m;
  const std::filesystem::path file = dir / "map.safetensors";
  std::error_code ec;
  const auto n = std::filesystem::file_size(file, ec);
  if (ec) return m;
  m.present = true;
  m.file_bytes = static_cast<double>(n);
  return m;
}

}  // namespace molt
