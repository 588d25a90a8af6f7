// Fuzzes ladder.json (src/ladder/manifest.cc) through LadderManifest::load, in a folder that
// holds the tiny ladder's rung folders (empty) and one map folder with an index.json.
#include "fuzz_util.h"
#include "molt/ladder/manifest.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static const std::filesystem::path file = [] {
    const std::filesystem::path d = molt::fuzz::scratch_subdir("ladder");
    for (const char* rung : {"l", "l-int8", "m", "s", "maps/l-s", "maps/m-s"}) {
      std::filesystem::create_directories(d / rung);
    }
    molt::fuzz::write_file(d / "maps/l-s/index.json", "{}");
    return d / "ladder.json";
  }();
  molt::fuzz::write_file(file, molt::fuzz::as_text(data, size));
  return molt::fuzz::guarded([&] {
    const molt::LadderManifest m = molt::LadderManifest::load(file);
    MOLT_FUZZ_CHECK(!m.rungs.empty(), "a manifest without rungs loaded");
    for (const molt::ManifestRoute& r : m.routes) {
      MOLT_FUZZ_CHECK(m.route(r.from, r.to) == &r, "route %s -> %s not found", r.from.c_str(),
                      r.to.c_str());
      (void)r.maps_present();
    }
  });
}
