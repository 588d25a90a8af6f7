// molt bench bandwidth: the memory-bandwidth bound printed beside decode speed.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include "test_util.h"

namespace molt {
namespace {

TEST(CliBenchBandwidth, JsonHasTriadAndRead) {
  // Small arrays keep it fast; the figures are not asserted beyond being measured.
  auto r = test::run_molt("bench bandwidth --mib 4 --repeats 1 --threads 1 --json");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  const auto j = nlohmann::json::parse(r.output);
  EXPECT_GT(j.at("triad_gb_s").get<double>(), 0.0);
  EXPECT_GT(j.at("read_gb_s").get<double>(), 0.0);
  EXPECT_EQ(j.at("threads").get<int>(), 1);
  EXPECT_EQ(j.at("mib_per_array").get<int>(), 4);
}

TEST(CliBenchBandwidth, RejectsZeroSize) {
  auto r = test::run_molt("bench bandwidth --mib 0");
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_NE(r.output.find("bench bandwidth: --mib must be at least 1"), std::string::npos)
      << r.output;
}

}  // namespace
}  // namespace molt
