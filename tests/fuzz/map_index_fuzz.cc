// Fuzzes a map folder's index.json (src/transfer/map_file.cc, read_map_dir) beside the tiny
// ridge map of map_fixture.h; its SHA-256 is
// that of the map written there, so seeds with the right checksum reach the map itself.
#include "map_fixture.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static const std::filesystem::path dir = molt::fuzz::write_ridge_map().parent_path();
  molt::fuzz::write_file(dir / "index.json", molt::fuzz::as_text(data, size));
  return molt::fuzz::guarded([&] { (void)molt::read_map_dir(dir); });
}
