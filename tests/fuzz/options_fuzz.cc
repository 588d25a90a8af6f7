// Fuzzes SessionOptions JSON (src/runtime/options.cc, options_from_json): what it accepts must
// validate and survive to_json and reading back unchanged.
#include <nlohmann/json.hpp>

#include "fuzz_util.h"
#include "molt/runtime/options.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  // The JSON text itself is parsed by the front end (CLI file, request body, C API string).
  const nlohmann::json j = nlohmann::json::parse(data, data + size, nullptr, false);
  if (j.is_discarded()) return 0;
  return molt::fuzz::guarded([&] {
    const molt::SessionOptions o = molt::options_from_json(j, {}, "options.json");
    o.validate();
    const nlohmann::json out = molt::to_json(o);
    molt::SessionOptions again;
    try {
      again = molt::options_from_json(out, {}, "round trip");
    } catch (const molt::Error& e) {
      MOLT_FUZZ_CHECK(false, "accepted options do not read back: %s", e.what());
    }
    MOLT_FUZZ_CHECK(molt::to_json(again) == out, "round trip changed %s", out.dump().c_str());
  });
}
