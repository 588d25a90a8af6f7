// README.md's `make demo` transcript is what `molt demo` prints now (issue 24). The test runs
// what scripts/demo.sh runs, from the repository root, and compares line by line; only wall-clock
// figures are masked, on both sides: a number right before " ms", and the numbers of the
// conditions' "stall ms max ..." column together with the padding after it. Everything else
// (tokens, rungs, budgets, KL, MiB, FLOPs saved, pressure) must match exactly.
// MOLT_TRACE_ROOT stands in for the source tree (a broken copy, to see this fail).
#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <regex>
#include <sstream>
#include <vector>

#include "test_util.h"

namespace molt {
namespace {

namespace fs = std::filesystem;

fs::path root() {
  const char* r = std::getenv("MOLT_TRACE_ROOT");
  return r != nullptr && *r != 0 ? fs::path(r) : fs::path(MOLT_SOURCE_DIR);
}

std::vector<std::string> lines_of(const std::string& text) {
  std::vector<std::string> out;
  std::istringstream in(text);
  for (std::string line; std::getline(in, line);) out.push_back(line);
  return out;
}

// The line with wall-clock figures replaced by "#".
std::string mask(const std::string& line) {
  static const std::regex ms(R"(\b\d+(\.\d+)? ms\b)");
  static const std::regex stall(R"(stall ms max( [^)]*\)) +seam KL)");
  static const std::regex number(R"( \d+(\.\d+)?)");
  std::string out = std::regex_replace(line, ms, "# ms");
  std::smatch m;
  if (std::regex_search(out, m, stall)) {
    const std::string figures = std::regex_replace(m[1].str(), number, " #");
    out = m.prefix().str() + "stall ms max" + figures + "  seam KL" + m.suffix().str();
  }
  return out;
}

// The first ```text block after the "What `make demo` shows" heading.
std::vector<std::string> readme_transcript(const std::string& readme) {
  const std::vector<std::string> lines = lines_of(readme);
  auto at = std::find(lines.begin(), lines.end(), "## What `make demo` shows");
  if (at == lines.end()) return {};
  at = std::find(at, lines.end(), "```text");
  if (at == lines.end()) return {};
  const auto end = std::find(at + 1, lines.end(), "```");
  return {at + 1, end};
}

TEST(ReadmeDemo, MaskIsOnlyTheWallClock) {
  EXPECT_EQ(mask("⇆ l → m  (molt, 43 ms, 78% FLOPs saved, pressure 0.25)"),
            "⇆ l → m  (molt, # ms, 78% FLOPs saved, pressure 0.25)");
  EXPECT_EQ(mask("done: 56 tokens · rungs l, m, s · 3 migrations (214 ms) · peak 13.0 MiB"),
            "done: 56 tokens · rungs l, m, s · 3 migrations (# ms) · peak 13.0 MiB");
  const std::string narrow =
      "D molt        killed=false  tokens  56  stall ms max 9.2 (l→m 6.7, m→s 3.4, s→l 9.2)     "
      "         seam KL mean 0.593 (0.438, 0.955, 0.387)  seam peak within budget";
  const std::string wide =
      "D molt        killed=false  tokens  56  stall ms max 137.2 (l→m 39.7, m→s 28.0, s→l "
      "137.2)       seam KL mean 0.593 (0.438, 0.955, 0.387)  seam peak within budget";
  EXPECT_EQ(mask(narrow), mask(wide));
  EXPECT_EQ(mask(wide),
            "D molt        killed=false  tokens  56  stall ms max # (l→m #, m→s #, s→l #)  seam KL "
            "mean 0.593 (0.438, 0.955, 0.387)  seam peak within budget");
  // Not wall clock: a divergence, a token count, a peak.
  EXPECT_NE(mask("seam KL mean 0.593"), mask("seam KL mean 0.594"));
  EXPECT_NE(mask("tokens  56  stall ms —"), mask("tokens  55  stall ms —"));
  EXPECT_NE(mask("peak 13.0 MiB"), mask("peak 13.1 MiB"));
}

TEST(ReadmeDemo, TranscriptIsWhatMoltDemoPrints) {
  // What `make demo` runs: scripts/demo.sh ends in `build/molt demo`, from the repository root.
  std::string last;
  for (const std::string& line : lines_of(test::read_file(root() / "scripts" / "demo.sh"))) {
    if (!line.empty() && line[0] != '#') last = line;
  }
  ASSERT_EQ(last, "build/molt demo") << "scripts/demo.sh changed: run what it runs here";

  const std::vector<std::string> readme = readme_transcript(test::read_file(root() / "README.md"));
  ASSERT_FALSE(readme.empty()) << "README.md has no ```text block under \"What `make demo` shows\"";
  const std::string cmd = "cd '" + root().string() + "' && " + MOLT_BINARY + " demo 2>&1";
  FILE* p = popen(cmd.c_str(), "r");
  ASSERT_NE(p, nullptr);
  std::string output;
  char buf[4096];
  for (size_t n; (n = fread(buf, 1, sizeof buf, p)) > 0;) output.append(buf, n);
  ASSERT_EQ(pclose(p), 0) << output;

  const std::vector<std::string> now = lines_of(output);
  for (size_t i = 0; i < std::max(now.size(), readme.size()); ++i) {
    const std::string have = i < readme.size() ? mask(readme[i]) : "(the transcript ends)";
    const std::string want = i < now.size() ? mask(now[i]) : "(the output ends)";
    ASSERT_EQ(have, want) << "README.md's demo transcript, line " << i + 1
                          << " of the block, is not what `molt demo` prints now (milliseconds "
                             "masked as #): paste a fresh `make demo` run into README.md";
  }
}

}  // namespace
}  // namespace molt
