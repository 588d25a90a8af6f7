// Fuzzes a token-identity floor file's __metadata__ and id table (src/transfer/token_floor.cc,
// read_token_floor). The input is one JSON object: its "token_ids" member, when it is an array,
// becomes the I32 tensor of that name (the file keeps the template's otherwise); every other
// member is stored as metadata (strings as they are, other values as their JSON text). The
// K/V tables come from a tiny floor written by write_token_floor, so a "receiver" whose geometry
// disagrees with them reaches the shape checks. The file is listed in index.json with its
// SHA-256, as a fitted floor is.
#include <nlohmann/json.hpp>

#include "map_fixture.h"
#include "molt/transfer/token_floor.h"

namespace {

// A floor for the fixture's receiver (2 layers, 1 KV head of 2): ids 3 and 7 plus the mean row.
std::filesystem::path write_floor_template() {
  const std::filesystem::path dir = molt::fuzz::write_ridge_map().parent_path();
  molt::TokenFloor f;
  f.receiver = {"b", {2, 1, 2, 4}, {2, 10000.0}};
  f.ids = {3, 7};
  for (int l = 0; l < 2; ++l) {
    f.k.push_back({0.5f, -1.0f, 2.0f, 0.25f, 1.25f, -0.5f});
    f.v.push_back({1.0f, 0.0f, -2.0f, 3.0f, 0.5f, 1.5f});
  }
  f.info["corpus"] = "fuzz";
  molt::write_token_floor(dir, f);
  return dir / molt::kTokenFloorFile;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static const molt::fuzz::MapTemplate floor = molt::fuzz::load_template(write_floor_template());
  static const std::filesystem::path dir = molt::fuzz::scratch_subdir("floor");

  const nlohmann::json j = nlohmann::json::parse(data, data + size, nullptr, false);
  if (!j.is_object()) return 0;  // the file format itself is safetensors_fuzz's job
  std::map<std::string, std::string> meta;
  std::vector<int32_t> ids;
  bool own_ids = false;
  for (const auto& [key, value] : j.items()) {
    if (key == "token_ids" && value.is_array()) {
      own_ids = true;
      for (const auto& x : value) ids.push_back(x.is_number_integer() ? x.get<int32_t>() : -1);
      continue;
    }
    meta[key] = value.is_string() ? value.get<std::string>() : value.dump();
  }
  std::vector<molt::TensorToWrite> tensors = floor.tensors;
  if (own_ids) {
    for (auto& t : tensors) {
      if (t.name != "token_ids") continue;
      t.shape = {static_cast<int64_t>(ids.size())};
      t.bytes = std::as_bytes(std::span<const int32_t>(ids));
    }
  }
  molt::write_safetensors(dir / molt::kTokenFloorFile, tensors, meta);
  const nlohmann::json index = {
      {"format", "molt-map-index"},
      {"format_version", molt::kMapFormatVersion},
      {"files",
       {{molt::kTokenFloorFile, {{"sha256", molt::sha256_file(dir / molt::kTokenFloorFile)}}}}}};
  molt::fuzz::write_file(dir / "index.json", index.dump());
  return molt::fuzz::guarded([&] {
    const molt::TokenFloor f = molt::read_token_floor(dir);
    const int64_t rows = static_cast<int64_t>(f.ids.size()) + 1;
    MOLT_FUZZ_CHECK(static_cast<int64_t>(f.k.size()) == f.receiver.geometry.n_layers &&
                        f.v.size() == f.k.size(),
                    "%zu K tables for %lld layers", f.k.size(),
                    static_cast<long long>(f.receiver.geometry.n_layers));
    for (size_t l = 0; l < f.k.size(); ++l) {
      MOLT_FUZZ_CHECK(static_cast<int64_t>(f.k[l].size()) == rows * f.receiver.geometry.kv_dim(),
                      "layer %zu K table has %zu values", l, f.k[l].size());
    }
  });
}
