#include "molt/transfer/token_floor.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <numeric>

#include "molt/common/dtype.h"
#include "molt/common/error.h"
#include "molt/formats/hf_config.h"
#include "molt/formats/safetensors.h"
#include "molt/transfer/corpus.h"
#include "molt/transfer/rope_sandwich.h"
#include "molt/transfer/stats.h"

namespace molt {
namespace {

constexpr const char* kFormat = "molt-token-floor";
constexpr float kF16Max = 65504.0f;

std::string layer_name(int64_t l, char kv) {
  return fmt::format("layers.{}.{}", l, kv);
}

// Metadata value → JSON: objects, arrays and numbers are parsed, the rest stay strings.
nlohmann::json meta_value(const std::string& s) {
  if (!s.empty() && (s[0] == '{' || s[0] == '[' || s[0] == '-' || (s[0] >= '0' && s[0] <= '9'))) {
    auto j = nlohmann::json::parse(s, nullptr, /*allow_exceptions=*/false);
    if (!j.is_discarded()) return j;
  }
  return s;
}

int64_t calibration_field(const nlohmann::json& c, const char* key, int64_t fallback) {
  if (!c.is_object() || !c.contains(key) || !c[key].is_number_integer()) return fallback;
  const int64_t v = c[key].get<int64_t>();
  return v > 0 ? v : fallback;
}

// Where a floor's errors point: its file, or the corpus it was fitted on in memory.
std::string floor_name(const TokenFloor& f) {
  if (!f.file.empty()) return f.file;
  return fmt::format("the token-identity floor fitted on {}",
                     f.info.contains("corpus") ? f.info["corpus"].dump() : "calibration text");
}

// floor.safetensors at `file` (write_safetensors writes beside it and renames).
void write_floor_file(const std::filesystem::path& file, const TokenFloor& floor) {
  const CacheGeometry& g = floor.receiver.geometry;
  const int64_t kv = g.kv_dim(), R = static_cast<int64_t>(floor.ids.size());
  if (static_cast<int64_t>(floor.k.size()) != g.n_layers ||
      static_cast<int64_t>(floor.v.size()) != g.n_layers) {
    fail("token-identity floor: {} / {} layers for a receiver of {}", floor.k.size(),
         floor.v.size(), g.n_layers);
  }
  std::vector<std::vector<uint16_t>> halves;
  std::vector<TensorToWrite> tensors;
  tensors.push_back(
      {"token_ids",
       DType::I32,
       {R},
       {reinterpret_cast<const std::byte*>(floor.ids.data()), floor.ids.size() * sizeof(int32_t)}});
  halves.reserve(2 * static_cast<size_t>(g.n_layers));
  for (int64_t l = 0; l < g.n_layers; ++l) {
    for (char what : {'k', 'v'}) {
      const std::vector<float>& src = what == 'k' ? floor.k[l] : floor.v[l];
      if (static_cast<int64_t>(src.size()) != (R + 1) * kv) {
        fail("token-identity floor: layer {} {} holds {} values, expected {}", l, what, src.size(),
             (R + 1) * kv);
      }
      std::vector<uint16_t>& h = halves.emplace_back(src.size());
      for (size_t i = 0; i < src.size(); ++i) h[i] = f32_to_f16(src[i]);
      tensors.push_back({layer_name(l, what),
                         DType::F16,
                         {R + 1, kv},
                         {reinterpret_cast<const std::byte*>(h.data()), h.size() * 2}});
    }
  }
  std::map<std::string, std::string> meta;
  for (const auto& [key, value] : floor.info.items()) {
    meta[key] = value.is_string() ? value.get<std::string>() : value.dump();
  }
  meta["format"] = kFormat;
  meta["format_version"] = std::to_string(kTokenFloorFormatVersion);
  meta["receiver"] = floor.receiver.to_json().dump();
  write_safetensors(file, tensors, meta);
}

}  // namespace

nlohmann::json TokenFloor::provenance() const {
  nlohmann::json j = {
      {"means",
       "the receiver's mean K/V per token id over calibration text, never over the evaluation "
       "windows"},
      {"file", file.empty() ? nlohmann::json() : nlohmann::json(file)},
      {"sha256", sha256.empty() ? nlohmann::json() : nlohmann::json(sha256)}};
  for (const char* key : {"corpus", "corpus_sha256", "calibration", "created_by"}) {
    if (info.contains(key)) j[key] = info[key];
  }
  return j;
}

FloorWindows FloorWindows::of_map(const MapData& map) {
  FloorWindows w;
  const nlohmann::json c = map.info.value("calibration", nlohmann::json::object());
  w.sequences = calibration_field(c, "sequences", w.sequences);
  w.seq_len = calibration_field(c, "seq_len", w.seq_len);
  w.stride = calibration_field(c, "stride", w.stride);
  return w;
}

TokenFloorSums::TokenFloorSums(const CacheGeometry& g, int64_t vocab) : g_(g) {
  if (vocab < 1) fail("token-identity floor: vocabulary of {} ids", vocab);
  slot_.assign(static_cast<size_t>(vocab), -1);
}

void TokenFloorSums::add(int32_t t, double n, const double* k, const double* v) {
  if (t < 0 || t >= static_cast<int32_t>(slot_.size())) {
    fail("token-identity floor: token id {} is outside the vocabulary ({} ids)", t, slot_.size());
  }
  const size_t M = static_cast<size_t>(g_.n_layers * g_.kv_dim());
  if (slot_[t] < 0) {
    slot_[t] = static_cast<int32_t>(ids_.size());
    ids_.push_back(t);
    count_.push_back(0);
    k_.resize(k_.size() + M, 0.0);
    v_.resize(v_.size() + M, 0.0);
  }
  const size_t row = static_cast<size_t>(slot_[t]);
  count_[row] += n;
  for (size_t c = 0; c < M; ++c) {
    k_[row * M + c] += k[c];
    v_[row * M + c] += v[c];
  }
  rows_ += n;
}

void TokenFloorSums::add_window(const Model& receiver, std::span<const int32_t> ids,
                                int64_t stride) {
  const CacheGeometry g = receiver.cache_geometry();
  if (g.n_layers != g_.n_layers || g.kv_dim() != g_.kv_dim()) {
    fail("token-identity floor: sums for {} layers × {} KV channels, receiver has {} × {}",
         g_.n_layers, g_.kv_dim(), g.n_layers, g.kv_dim());
  }
  if (stride < 1) fail("--stride {} must be ≥ 1", stride);
  const int64_t T = static_cast<int64_t>(ids.size()), kv = g.kv_dim(), M = g.n_layers * kv;
  if (T == 0) return;
  KVCache c = receiver.new_cache(T);
  receiver.forward(ids, c, {});
  // Rows as `molt fit` takes them (fit.cc layer_rows): keys un-rotated through one table.
  const RopeTable table(receiver.rope(), 0, T);
  std::vector<float> keys;
  std::vector<double> rk, rv;
  std::vector<int64_t> pos;
  for (int64_t p = 0; p < T; p += stride) pos.push_back(p);
  rk.resize(pos.size() * static_cast<size_t>(M));
  rv.resize(rk.size());
  for (int64_t l = 0; l < g.n_layers; ++l) {
    keys.assign(c.k(l).begin(), c.k(l).begin() + T * kv);
    table.rotate(keys.data(), 0, T, g.n_kv_heads, /*inverse=*/true);
    const float* v = c.v(l).data();
    for (size_t i = 0; i < pos.size(); ++i) {
      for (int64_t e = 0; e < kv; ++e) {
        rk[i * M + l * kv + e] = keys[pos[i] * kv + e];
        rv[i * M + l * kv + e] = v[pos[i] * kv + e];
      }
    }
  }
  for (size_t i = 0; i < pos.size(); ++i) add(ids[pos[i]], 1, &rk[i * M], &rv[i * M]);
}

TokenFloor TokenFloorSums::finish(const RungSpec& receiver, nlohmann::json info) const {
  if (ids_.empty()) fail("token-identity floor: no calibration rows");
  const int64_t kv = g_.kv_dim(), M = g_.n_layers * kv, R = static_cast<int64_t>(ids_.size());
  std::vector<size_t> order(ids_.size());
  std::iota(order.begin(), order.end(), size_t{0});
  std::sort(order.begin(), order.end(), [&](size_t a, size_t b) { return ids_[a] < ids_[b]; });
  TokenFloor f;
  f.receiver = receiver;
  for (size_t i : order) f.ids.push_back(ids_[i]);
  f.k.assign(static_cast<size_t>(g_.n_layers),
             std::vector<float>(static_cast<size_t>((R + 1) * kv)));
  f.v = f.k;
  // Means in double, then rounded to F16: the in-memory floor is the stored one.
  auto put = [&](std::vector<float>& dst, int64_t row, int64_t l, int64_t e, double mean,
                 char what) {
    const float x = static_cast<float>(mean);
    if (!(std::fabs(x) <= kF16Max)) {
      fail("token-identity floor: mean {} {} of layer {} (channel {}) is outside F16's range",
           what == 'k' ? "key" : "value", x, l, e);
    }
    dst[static_cast<size_t>(row * kv + e)] = f16_to_f32(f32_to_f16(x));
  };
  std::vector<double> all_k(static_cast<size_t>(M), 0.0), all_v(static_cast<size_t>(M), 0.0);
  double all_n = 0;
  for (int64_t r = 0; r < R; ++r) {
    const size_t src = order[static_cast<size_t>(r)];
    const double n = std::max(count_[src], 1.0);
    all_n += count_[src];
    for (int64_t l = 0; l < g_.n_layers; ++l) {
      for (int64_t e = 0; e < kv; ++e) {
        const size_t c = src * static_cast<size_t>(M) + static_cast<size_t>(l * kv + e);
        put(f.k[l], r, l, e, k_[c] / n, 'k');
        put(f.v[l], r, l, e, v_[c] / n, 'v');
        all_k[l * kv + e] += k_[c];
        all_v[l * kv + e] += v_[c];
      }
    }
  }
  for (int64_t l = 0; l < g_.n_layers; ++l) {
    for (int64_t e = 0; e < kv; ++e) {
      put(f.k[l], R, l, e, all_k[l * kv + e] / all_n, 'k');
      put(f.v[l], R, l, e, all_v[l * kv + e] / all_n, 'v');
    }
  }
  if (!info.is_object()) info = nlohmann::json::object();
  nlohmann::json& cal = info["calibration"];
  if (!cal.is_object()) cal = nlohmann::json::object();
  cal["rows"] = static_cast<int64_t>(std::llround(rows_));
  cal["distinct_tokens"] = R;
  cal["positions"] =
      "0, stride, 2·stride, ... of each calibration window (training and held-out alike)";
  info["keys"] = "un-rotated at the receiver's RoPE angles; rotated to each position on fill";
  info["dtype"] = "F16";
  f.info = std::move(info);
  return f;
}

TokenFloor token_floor_from_stats(const RouteStats& st, const RungSpec& receiver,
                                  nlohmann::json info) {
  const StatsLayout& lay = st.layout;
  if (lay.token_vocab <= 0) {
    fail("the fit's statistics hold no per-token sums (the vocabulary is too large for them)");
  }
  const int64_t M = lay.receiver.n_layers * lay.receiver.kv_dim();
  TokenFloorSums sums(lay.receiver, lay.token_vocab);
  for (const SplitStats* s : {&st.train, &st.heldout}) {
    for (int64_t t = 0; t < lay.token_vocab; ++t) {
      const double n = s->tok_count[static_cast<size_t>(t)];
      if (n > 0) sums.add(static_cast<int32_t>(t), n, &s->tok_k[t * M], &s->tok_v[t * M]);
    }
  }
  nlohmann::json& cal = info["calibration"];
  if (!cal.is_object()) cal = nlohmann::json::object();
  cal["windows"] = st.train.sequences + st.heldout.sequences;
  if (st.settings.is_object()) {
    cal["seq_len"] = st.settings.value("seq_len", int64_t{0});
    cal["stride"] = st.settings.value("stride", int64_t{0});
  }
  return sums.finish(receiver, std::move(info));
}

TokenFloor fit_token_floor(const Model& receiver, const RungSpec& spec, TokenStream& corpus,
                           const FloorWindows& w, nlohmann::json info,
                           const std::function<void(int64_t, int64_t)>& progress) {
  if (w.sequences < 1) fail("--sequences {} must be ≥ 1", w.sequences);
  if (w.seq_len < 1) fail("--seq-len {} must be ≥ 1", w.seq_len);
  const int64_t vocab = receiver.config().vocab_size;
  TokenFloorSums sums(receiver.cache_geometry(), vocab);
  std::vector<int32_t> ids;
  int64_t windows = 0;
  while (windows < w.sequences && corpus.next_window(w.seq_len, ids)) {
    for (int32_t t : ids) {
      if (t < 0 || t >= vocab) {
        fail("{}: token id {} is outside the receiver's vocabulary ({} ids)",
             corpus.path().string(), t, vocab);
      }
    }
    sums.add_window(receiver, ids, w.stride);
    ++windows;
    if (progress) progress(windows, w.sequences);
  }
  if (windows == 0) {
    fail("{}: fewer than {} tokens, not one calibration window", corpus.path().string(), w.seq_len);
  }
  if (!info.is_object()) info = nlohmann::json::object();
  info["calibration"] = {{"windows", windows}, {"seq_len", w.seq_len}, {"stride", w.stride}};
  return sums.finish(spec, std::move(info));
}

void write_token_floor(const std::filesystem::path& dir, const TokenFloor& floor) {
  write_floor_file(dir / kTokenFloorFile, floor);
  add_to_map_index(dir, kTokenFloorFile);
}

void add_token_floor(const std::filesystem::path& dir, const TokenFloor& floor) {
  add_to_map_dir(dir, kTokenFloorFile,
                 [&](const std::filesystem::path& file) { write_floor_file(file, floor); });
}

bool has_token_floor(const std::filesystem::path& dir) {
  return map_index_lists(dir, kTokenFloorFile);
}

TokenFloor read_token_floor(const std::filesystem::path& dir) {
  TokenFloor f;
  const std::filesystem::path file = dir / kTokenFloorFile;
  f.sha256 = verify_map_index_entry(dir, kTokenFloorFile);
  f.file = file.string();
  auto st = SafetensorsFile::open(file);
  const auto& meta = st->metadata();
  auto get = [&](const char* key) -> const std::string& {
    auto it = meta.find(key);
    if (it == meta.end()) fail("{}: __metadata__ lacks '{}'", f.file, key);
    return it->second;
  };
  if (get("format") != kFormat) fail("{}: format '{}' is not {}", f.file, get("format"), kFormat);
  if (get("format_version") != std::to_string(kTokenFloorFormatVersion)) {
    fail("{}: format_version {} is not supported (this molt reads {})", f.file,
         get("format_version"), kTokenFloorFormatVersion);
  }
  try {
    f.receiver = RungSpec::from_json(parse_json_text(get("receiver"), "'receiver'"), "receiver");
  } catch (const nlohmann::json::exception& e) {
    fail("{}: __metadata__: {}", f.file, e.what());
  } catch (const Error& e) {
    fail("{}: __metadata__: {}", f.file, e.what());
  }
  for (const auto& [key, value] : meta) {
    if (key != "format" && key != "format_version" && key != "receiver")
      f.info[key] = meta_value(value);
  }
  const TensorView* ids = st->find("token_ids");
  if (ids == nullptr) fail("{}: tensor 'token_ids' is missing", f.file);
  if (ids->dtype != DType::I32 || ids->shape.size() != 1 || ids->shape[0] < 1) {
    fail("{}: tensor 'token_ids' is {} {}, expected I32 [R] with R ≥ 1", f.file,
         dtype_name(ids->dtype), ids->shape_str());
  }
  const int64_t R = ids->shape[0], kv = f.receiver.geometry.kv_dim();
  f.ids.resize(static_cast<size_t>(R));
  std::memcpy(f.ids.data(), ids->data, ids->nbytes);
  for (int64_t i = 0; i < R; ++i) {
    if (f.ids[i] < 0 || (i > 0 && f.ids[i] <= f.ids[i - 1])) {
      fail("{}: tensor 'token_ids' is not ascending non-negative ids (entry {} is {})", f.file, i,
           f.ids[i]);
    }
  }
  for (int64_t l = 0; l < f.receiver.geometry.n_layers; ++l) {
    for (char what : {'k', 'v'}) {
      const std::string name = layer_name(l, what);
      const TensorView* t = st->find(name);
      if (t == nullptr) fail("{}: tensor '{}' is missing", f.file, name);
      if (t->dtype != DType::F16 || t->shape != std::vector<int64_t>{R + 1, kv}) {
        fail("{}: tensor '{}' is {} {}, expected F16 [{}, {}]", f.file, name, dtype_name(t->dtype),
             t->shape_str(), R + 1, kv);
      }
      std::vector<float> out(static_cast<size_t>(t->numel()));
      const auto* h = reinterpret_cast<const uint16_t*>(t->data);
      for (size_t i = 0; i < out.size(); ++i) {
        uint16_t x;
        std::memcpy(&x, h + i, 2);
        out[i] = f16_to_f32(x);
      }
      (what == 'k' ? f.k : f.v).push_back(std::move(out));
    }
  }
  return f;
}

TokenIdentityCache::TokenIdentityCache(const Model& receiver, const TokenFloor& floor)
    : g_(receiver.cache_geometry()), rope_(receiver.rope()) {
  const CacheGeometry& fg = floor.receiver.geometry;
  if (fg.n_layers != g_.n_layers || fg.n_kv_heads != g_.n_kv_heads || fg.head_dim != g_.head_dim ||
      fg.hidden_size != g_.hidden_size || floor.receiver.rope.head_dim != rope_.head_dim ||
      floor.receiver.rope.theta != rope_.theta) {
    fail(
        "{}: fitted for {} ({} layers, {} KV heads × {}, RoPE θ {}) but the receiver {} has {} "
        "layers, {} KV heads × {}, RoPE θ {}: this floor belongs to another receiver",
        floor_name(floor), floor.receiver.name, fg.n_layers, fg.n_kv_heads, fg.head_dim,
        floor.receiver.rope.theta, receiver.store().dir().string(), g_.n_layers, g_.n_kv_heads,
        g_.head_dim, rope_.theta);
  }
  const int64_t kv = g_.kv_dim(), R = static_cast<int64_t>(floor.ids.size());
  slot_.assign(static_cast<size_t>(receiver.config().vocab_size), -1);
  for (int64_t i = 0; i < R; ++i) {
    const int32_t t = floor.ids[i];
    if (t < 0 || t >= static_cast<int32_t>(slot_.size())) {
      fail("{}: token id {} is outside the receiver's vocabulary ({} ids)", floor_name(floor), t,
           slot_.size());
    }
    slot_[t] = static_cast<int32_t>(i);
  }
  for (const auto* tables : {&floor.k, &floor.v}) {
    if (static_cast<int64_t>(tables->size()) != g_.n_layers) {
      fail("{}: {} layers of means for {} receiver layers", floor_name(floor), tables->size(),
           g_.n_layers);
    }
    for (const std::vector<float>& t : *tables) {
      if (static_cast<int64_t>(t.size()) != (R + 1) * kv) {
        fail("{}: a layer's means hold {} values, expected {}", floor_name(floor), t.size(),
             (R + 1) * kv);
      }
    }
  }
  k_ = floor.k;
  v_ = floor.v;
}

void TokenIdentityCache::fill(std::span<const int32_t> tokens, KVCache& dst) const {
  const int64_t n = static_cast<int64_t>(tokens.size()), kv = g_.kv_dim();
  const int64_t all = static_cast<int64_t>(k_.empty() ? 0 : k_[0].size() / kv) - 1;
  dst.set_size(n);
  const RopeTable rope(rope_, 0, n);
  std::vector<float> k(static_cast<size_t>(n * kv)), v(k.size());
  for (int64_t l = 0; l < g_.n_layers; ++l) {
    for (int64_t p = 0; p < n; ++p) {
      const int32_t t = tokens[p];
      const int64_t row =
          t >= 0 && t < static_cast<int32_t>(slot_.size()) && slot_[t] >= 0 ? slot_[t] : all;
      std::copy_n(&k_[l][row * kv], kv, k.data() + p * kv);
      std::copy_n(&v_[l][row * kv], kv, v.data() + p * kv);
    }
    rope.rotate(k.data(), 0, n, g_.n_kv_heads, /*inverse=*/false);
    dst.write_k(l, 0, n, k.data());  // rounded to dst's type
    dst.write_v(l, 0, n, v.data());
  }
}

}  // namespace molt
