// Fuzzes pressure traces (src/pressure/trace.cc) through PressureTrace::load, then looks the
// budget up at and between every point.
#include <cmath>

#include "fuzz_util.h"
#include "molt/pressure/trace.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static const std::filesystem::path file = molt::fuzz::scratch_dir() / "trace.json";
  molt::fuzz::write_file(file, molt::fuzz::as_text(data, size));
  return molt::fuzz::guarded([&] {
    const molt::PressureTrace t = molt::PressureTrace::load(file);
    MOLT_FUZZ_CHECK(!t.points.empty() && t.points.front().at == 0, "bad first point");
    for (const molt::TracePoint& p : t.points) {
      const double b = t.budget_mib(p.at, 100.0);
      MOLT_FUZZ_CHECK(std::isfinite(p.value) && b >= 0, "budget %g at %g", b, p.at);
      (void)t.budget_mib(p.at + 0.5, 100.0);
    }
    (void)t.budget_mib(-1, 100.0);
  });
}
