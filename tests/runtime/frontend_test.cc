// What every front end shares (src/runtime/): prompt encoding with the chat template and its
// stop id, the JSON-line sink, and a condition's summary.
#include <gtest/gtest.h>

#include <cstdio>
#include <nlohmann/json.hpp>
#include <sstream>

#include "molt/common/error.h"
#include "molt/ladder/ladder.h"
#include "molt/ladder/synthetic.h"
#include "molt/runtime/metrics.h"
#include "molt/runtime/prompt.h"
#include "test_util.h"

namespace molt {
namespace {

const std::filesystem::path kTiny =
    std::filesystem::path(MOLT_SOURCE_DIR) / "models/tiny-ladder/ladder.json";

template <typename F>
std::string error_of(F f) {
  try {
    f();
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

TEST(Prompt, TextChatAndIds) {
  auto ladder = Ladder::open(kTiny);
  const Tokenizer& tok = *ladder->tokenizer();
  const Prompt text = encode_text(*ladder, "the quick brown fox");
  EXPECT_EQ(text.ids, tok.encode("the quick brown fox"));
  EXPECT_TRUE(text.stop_ids.empty());

  const Prompt chat = encode_chat(*ladder, {{"system", "Be brief."}, {"user", "Hi"}});
  EXPECT_EQ(chat.ids, tok.encode("<|im_start|>system\nBe brief.<|im_end|>\n<|im_start|>user\nHi"
                                 "<|im_end|>\n<|im_start|>assistant\n"));
  EXPECT_EQ(chat.stop_ids, std::vector<int32_t>{tok.token_id("<|im_end|>")});

  EXPECT_EQ(prompt_from_ids(*ladder, {1, 2, 3}).ids, (std::vector<int32_t>{1, 2, 3}));
}

TEST(Prompt, ErrorsSayWhatIsMissing) {
  auto ladder = Ladder::open(kTiny);
  EXPECT_NE(
      error_of([&] { encode_text(*ladder, "", "--prompt"); }).find("--prompt: the prompt is empty"),
      std::string::npos);
  EXPECT_NE(error_of([&] { encode_chat(*ladder, {}); }).find("chat: no messages"),
            std::string::npos);
  EXPECT_NE(error_of([&] {
              encode_chat(*ladder, {{"robot", "x"}});
            }).find("chat: "),
            std::string::npos);
  EXPECT_NE(error_of([&] { prompt_from_ids(*ladder, {}); }).find("ids: no token ids"),
            std::string::npos);
  EXPECT_NE(error_of([&] {
              prompt_from_ids(*ladder, {1, 1 << 30});
            }).find("id 1073741824 at position 1 is outside the ladder's vocabulary"),
            std::string::npos);

  test::TempDir dir;
  SyntheticLadderOptions o;
  o.vocab = 300;
  auto plain = Ladder::open(write_synthetic_ladder(dir / "bpe", o));  // no ChatML tokens
  EXPECT_NE(error_of([&] {
              encode_chat(*plain, {{"user", "hi"}}, "--chat");
            }).find("--chat: the ladder's tokenizer has no <|im_start|> / <|im_end|> tokens"),
            std::string::npos);
  o.tokenizer = false;
  auto bare = Ladder::open(write_synthetic_ladder(dir / "bare", o));
  EXPECT_NE(error_of([&] { encode_text(*bare, "hi"); }).find("has no tokenizer files"),
            std::string::npos);
}

TEST(JsonLineSink, OneObjectPerLine) {
  std::FILE* f = std::tmpfile();
  ASSERT_NE(f, nullptr);
  {
    JsonLineSink sink(f);
    sink.on_budget({64});
    sink.on_token({0, "a\xff", 7, "l"});  // invalid UTF-8 is replaced, not thrown
    MigrationEvent m;
    m.from = "l";
    m.to = "m";
    m.policy = "molt";
    sink.on_migration(m);
    DoneEvent d;
    d.tokens = 1;
    sink.on_done(d);
  }
  std::rewind(f);
  std::string text;
  char buf[4096];
  for (size_t n; (n = std::fread(buf, 1, sizeof buf, f)) > 0;) text.append(buf, n);
  std::fclose(f);
  std::istringstream in(text);
  std::vector<nlohmann::json> lines;
  for (std::string line; std::getline(in, line);) lines.push_back(nlohmann::json::parse(line));
  ASSERT_EQ(lines.size(), 4u);
  EXPECT_EQ(lines[0]["event"], "budget");
  EXPECT_EQ(lines[1]["event"], "token");
  EXPECT_EQ(lines[1]["token_id"], 7);
  EXPECT_EQ(lines[2]["to"], "m");
  EXPECT_EQ(lines[3]["tokens"], 1);
}

TEST(ConditionSummary, StallKlOvershootAndFallbacks) {
  std::vector<MigrationEvent> ms(3);
  ms[0].from = "l", ms[0].to = "m", ms[0].ms = 4, ms[0].policy = "molt", ms[0].seam_kl = 0.2;
  ms[0].peak_mib = 90, ms[0].budget_mib = 100;
  ms[1].from = "m", ms[1].to = "s", ms[1].ms = 9, ms[1].policy = "reprefill";
  ms[1].peak_mib = 60, ms[1].budget_mib = 50;
  ms[2].from = "s", ms[2].to = "l", ms[2].ms = 2, ms[2].policy = "reprefill", ms[2].seam_kl = 0.4;
  DoneEvent d;
  d.tokens = 48;
  d.rungs_used = {"l", "m", "s"};
  const ConditionSummary c = summarize_condition(ms, d, "molt");
  EXPECT_EQ(c.tokens, 48);
  ASSERT_EQ(c.seams.size(), 3u);
  EXPECT_EQ(c.seams[1].from, "m");
  EXPECT_EQ(c.max_stall_ms, 9);
  EXPECT_EQ(c.seam_kl, (std::vector<double>{0.2, 0.4}));
  EXPECT_NEAR(c.mean_seam_kl, 0.3, 1e-12);
  EXPECT_EQ(c.worst_overshoot_mib, 10);
  EXPECT_EQ(c.fallbacks, std::vector<std::string>{"reprefill"});

  const ConditionSummary none = summarize_condition({}, d, "hold");
  EXPECT_TRUE(std::isnan(none.max_stall_ms));
  EXPECT_TRUE(std::isnan(none.mean_seam_kl));
  EXPECT_TRUE(std::isnan(none.worst_overshoot_mib));
}

}  // namespace
}  // namespace molt
