#include "molt/kernels/bandwidth.h"

#include <gtest/gtest.h>

#include <string>

#include "molt/common/error.h"

namespace molt {
namespace {

TEST(Bandwidth, MeasuresSomethingPositive) {
  // Small arrays keep the test fast; the figure itself is not asserted (no wall-clock tests).
  EXPECT_GT(measure_triad_bandwidth_gbs(4, 2), 0.0);
  EXPECT_GT(measure_read_bandwidth_gbs(4, 2), 0.0);
}

TEST(Bandwidth, TriadProbeTimesOnePassOfItsArrays) {
  TriadProbe probe(2);
  EXPECT_EQ(probe.bytes_per_pass(), 3.0 * 4.0 * (2 << 20) / 4.0);
  for (int i = 0; i < 3; ++i) EXPECT_GT(probe.pass(), 0.0);  // also checks a = b + 3c each time
  EXPECT_THROW(TriadProbe(0), Error);
}

TEST(Bandwidth, RejectsBadArguments) {
  try {
    measure_triad_bandwidth_gbs(0, 1);
    FAIL() << "no error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("at least 1 MiB"), std::string::npos) << e.what();
  }
  EXPECT_THROW(measure_read_bandwidth_gbs(1, 0), Error);
}

}  // namespace
}  // namespace molt
