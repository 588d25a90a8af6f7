// Fuzzes a map file's __metadata__ (src/transfer/map_file.cc, read_map_dir and
// summarize_map_dir). The input is the metadata as one JSON object: string values are stored as
// they are, other values as their JSON text (as write_map_dir stores structured values). The
// tensors come from a real map: the tiny ladder's diagonal map when "method" is "diagonal",
// else a tiny ridge map with a boundary map.
#include <nlohmann/json.hpp>

#include "map_fixture.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static const molt::fuzz::MapTemplate diagonal = molt::fuzz::load_template(
      MOLT_SOURCE_DIR "/models/tiny-ladder/maps/l-l-int8/map.safetensors");
  static const molt::fuzz::MapTemplate ridge =
      molt::fuzz::load_template(molt::fuzz::write_ridge_map());
  static const std::filesystem::path dir = molt::fuzz::scratch_subdir("map");

  const nlohmann::json j = nlohmann::json::parse(data, data + size, nullptr, false);
  if (!j.is_object()) return 0;  // the file format itself is safetensors_fuzz's job
  std::map<std::string, std::string> meta;
  for (const auto& [key, value] : j.items()) {
    meta[key] = value.is_string() ? value.get<std::string>() : value.dump();
  }
  const bool is_diagonal = meta.count("method") && meta["method"] == "diagonal";
  const auto& t = is_diagonal ? diagonal : ridge;
  molt::write_safetensors(dir / "map.safetensors", t.tensors, meta);
  const nlohmann::json index = {
      {"format", "molt-map-index"},
      {"format_version", molt::kMapFormatVersion},
      {"files", {{"map.safetensors", {{"sha256", molt::sha256_file(dir / "map.safetensors")}}}}}};
  molt::fuzz::write_file(dir / "index.json", index.dump());
  (void)molt::summarize_map_dir(dir);  // never throws: an unreadable header means "unknown"
  return molt::fuzz::guarded([&] {
    const molt::MapData m = molt::read_map_dir(dir);
    MOLT_FUZZ_CHECK(static_cast<int64_t>(m.layers.size()) == m.receiver.geometry.n_layers,
                    "%zu layer maps for %lld layers", m.layers.size(),
                    static_cast<long long>(m.receiver.geometry.n_layers));
  });
}
