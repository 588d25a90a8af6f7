// README.md's `make demo` transcript is what `molt demo` prints now (issue 24). The test runs
// what scripts/demo.sh runs, from the repository root, and compares line by line; only wall-clock
// figures are masked, on both sides: a number right before " ms", and the numbers of the
// conditions' "stall ms max ..." column together with the padding after it. Everything else
// (tokens, rungs, budgets, KL, MiB, FLOPs saved, pressure) must match, a decimal figure to one
// unit in its last printed digit: the transcript comes from an x86 machine, and another
// architecture's kernels round differently (arm64 under qemu printed a seam KL of 0.495 for the
// transcript's 0.494).
// MOLT_TRACE_ROOT stands in for the source tree (a broken copy, to see this fail).
#include <algorithm>
#include <cctype>
#include <cstdio>
#include <cstdlib>
#include <sstream>
#include <string>
#include <vector>

#include "test_util.h"

namespace molt {
namespace {

namespace fs = std::filesystem;

fs::path root() {
  return test::trace_root();
}

std::vector<std::string> lines_of(const std::string& text) {
  std::vector<std::string> out;
  std::istringstream in(text);
  for (std::string line; std::getline(in, line);) out.push_back(line);
  return out;
}

bool is_digit(char c) {
  return c >= '0' && c <= '9';
}
bool is_word(char c) {
  return is_digit(c) || std::isalpha(static_cast<unsigned char>(c)) || c == '_';
}

// The end of the number (digits, optionally "." and digits) starting at i, or i if none.
size_t number_end(const std::string& s, size_t i) {
  size_t j = i;
  while (j < s.size() && is_digit(s[j])) ++j;
  if (j == i) return i;
  if (j + 1 < s.size() && s[j] == '.' && is_digit(s[j + 1])) {
    ++j;
    while (j < s.size() && is_digit(s[j])) ++j;
  }
  return j;
}

// Every number for which `masked(end)` holds becomes "#"; a number starts after a non-word
// character (or with the line). Hand-written rather than std::regex: GCC 12's <regex> trips
// -Wmaybe-uninitialized under the sanitizer presets.
template <class Masked>
std::string mask_numbers(const std::string& s, Masked masked) {
  std::string out;
  for (size_t i = 0; i < s.size();) {
    const size_t end = (i == 0 || !is_word(s[i - 1])) ? number_end(s, i) : i;
    if (end > i && masked(end)) {
      out += '#';
    } else {
      out.append(s, i, std::max(end, i + 1) - i);
    }
    i = std::max(end, i + 1);
  }
  return out;
}

// The line with wall-clock figures replaced by "#": every number followed by " ms", and every
// figure of the stall column ("stall ms max 12.2 (l→m 5.4, …)"), whose padding varies with
// their width.
std::string mask(const std::string& line) {
  std::string out = mask_numbers(line, [&](size_t end) {
    return line.compare(end, 3, " ms") == 0 && (end + 3 == line.size() || !is_word(line[end + 3]));
  });
  const std::string head = "stall ms max";
  const size_t at = out.find(head);
  if (at == std::string::npos) return out;
  const size_t from = at + head.size(), close = out.find(')', from);
  if (from >= out.size() || out[from] != ' ' || close == std::string::npos) return out;
  size_t kl = close + 1;
  while (kl < out.size() && out[kl] == ' ') ++kl;
  if (kl == close + 1 || out.compare(kl, 7, "seam KL") != 0) return out;
  const std::string column = out.substr(from, close + 1 - from);
  const std::string figures = mask_numbers(column, [](size_t) { return true; });
  return out.substr(0, from) + figures + "  " + out.substr(kl);
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

// Whether two masked lines are the same text with the same figures, a decimal figure (one with
// a point) allowed one unit of difference in its last digit when both print as many decimals.
bool same_up_to_last_digit(const std::string& a, const std::string& b) {
  size_t i = 0, j = 0;
  while (i < a.size() && j < b.size()) {
    const size_t ea = (i == 0 || !is_word(a[i - 1])) ? number_end(a, i) : i;
    const size_t eb = (j == 0 || !is_word(b[j - 1])) ? number_end(b, j) : j;
    if ((ea > i) != (eb > j)) return false;
    if (ea == i) {
      if (a[i++] != b[j++]) return false;
      continue;
    }
    const std::string x = a.substr(i, ea - i), y = b.substr(j, eb - j);
    i = ea;
    j = eb;
    if (x == y) continue;
    const size_t px = x.find('.'), py = y.find('.');
    if (px == std::string::npos || py == std::string::npos || x.size() - px != y.size() - py)
      return false;
    const auto units = [](std::string v) {  // the figure in units of its last digit
      v.erase(v.find('.'), 1);
      return std::stoll(v);
    };
    if (std::llabs(units(x) - units(y)) > 1) return false;
  }
  return i == a.size() && j == b.size();
}

TEST(ReadmeDemo, FiguresMayDifferInTheLastDigitOnly) {
  const std::string kl = "seam KL mean 0.329 (0.476, 0.016, 0.494)  seam peak within budget";
  EXPECT_TRUE(same_up_to_last_digit(kl, kl));
  EXPECT_TRUE(same_up_to_last_digit(kl,
                                    "seam KL mean 0.329 (0.476, 0.016, 0.495)  seam peak "
                                    "within budget"));
  EXPECT_TRUE(same_up_to_last_digit("peak 13.0 MiB", "peak 12.9 MiB"));
  EXPECT_FALSE(same_up_to_last_digit(kl,
                                     "seam KL mean 0.329 (0.476, 0.016, 0.496)  seam peak "
                                     "within budget"));
  EXPECT_FALSE(same_up_to_last_digit("tokens  56", "tokens  55"));  // counts stay exact
  EXPECT_FALSE(same_up_to_last_digit("peak 13.0 MiB", "peak 13.01 MiB"));
  EXPECT_FALSE(same_up_to_last_digit("peak 13.0 MiB", "peak 13.0 GiB"));
  EXPECT_FALSE(same_up_to_last_digit("peak 13.0 MiB", "peak 13.0 MiB at"));
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
  // The transcript comes from a two-core machine (the demo runs on all cores): each rung's
  // scratch line holds per-thread buffers, so the test runs at two threads whatever this
  // machine has (or OMP_NUM_THREADS=1 under emulation).
  const std::string cmd =
      "cd '" + root().string() + "' && OMP_NUM_THREADS=2 " + MOLT_BINARY + " demo 2>&1";
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
    if (same_up_to_last_digit(have, want)) continue;
    ASSERT_EQ(have, want) << "README.md's demo transcript, line " << i + 1
                          << " of the block, is not what `molt demo` prints now (milliseconds "
                             "masked as #): paste a fresh `make demo` run into README.md";
  }
}

}  // namespace
}  // namespace molt
