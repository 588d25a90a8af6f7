// What a smaller KV cache costs in quality, on the bundled tiny ladder (trained, so attention
// over the cache matters): every position's NLL on held-out text with the cache in f16 stays
// within 0.2% of f32, and the needles answered at ~700 and ~2,000 tokens are the same ones.
// int8 is measured and printed beside them (and bounded loosely: it is a reported option).
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <filesystem>
#include <string>
#include <vector>

#include "molt/bench/answer.h"
#include "molt/bench/needles.h"
#include "molt/kernels/threads.h"
#include "molt/ladder/ladder.h"
#include "molt/model/model.h"
#include "molt/tokenizer/tokenizer.h"
#include "molt/transfer/eval.h"
#include "test_util.h"

namespace molt {
namespace {

const std::filesystem::path kLadder = std::filesystem::path(MOLT_SOURCE_DIR) / "models/tiny-ladder";
constexpr KvDType kTypes[] = {KvDType::kF32, KvDType::kF16, KvDType::kInt8};

class KvDTypeQuality : public ::testing::TestWithParam<std::string> {};

TEST_P(KvDTypeQuality, NllOfEveryPositionStaysWithinTwoTenthsOfAPercent) {
  set_num_threads(1);  // deterministic, and no spinning beside other tests
  const std::string rung = GetParam();
  auto ladder = Ladder::single(kLadder / rung);
  const Tokenizer& tok = *ladder->tokenizer();
  const std::vector<int32_t> ids = tok.encode(test::read_file(kLadder / "data/test.txt"));
  // Under qemu every float operation is emulated (a GEMM runs ~200x slower than natively): one
  // window there.
  const int64_t context = 512, windows = test::under_emulation() ? 1 : 12;
  ASSERT_GE(static_cast<int64_t>(ids.size()), windows * context);
  Rung& r = ladder->rung(0);
  r.load();
  const Model& m = r.model();
  std::vector<float> logits;
  double nll[3] = {};
  for (int t = 0; t < 3; ++t) {
    for (int64_t w = 0; w < windows; ++w) {
      const std::span<const int32_t> window(ids.data() + w * context, static_cast<size_t>(context));
      nll[t] += window_nll(m, window, kTypes[t], logits) / static_cast<double>(windows);
    }
  }
  std::printf("    %s: NLL %.5f (f32 cache), %.5f (f16, %+.4f%%), %.5f (int8, %+.4f%%)\n",
              rung.c_str(), nll[0], nll[1], 100 * (nll[1] / nll[0] - 1), nll[2],
              100 * (nll[2] / nll[0] - 1));
  EXPECT_LE(std::fabs(nll[1] / nll[0] - 1), 0.002);
  EXPECT_LE(std::fabs(nll[2] / nll[0] - 1), 0.02);
}

INSTANTIATE_TEST_SUITE_P(TinyLadder, KvDTypeQuality, ::testing::Values("l", "m", "s"));

// The needles of the committed set on the top rung, answered greedily through the one
// generation loop with each cache type.
TEST(KvDTypeNeedles, SameNeedlesAnsweredAtEachContext) {
  set_num_threads(1);  // deterministic, and no spinning beside other tests
  auto ladder = Ladder::single(kLadder / "l");
  const Tokenizer& tok = *ladder->tokenizer();
  // Under qemu (emulated floats, ~200x slower GEMMs) three needles at ~700 tokens only.
  const bool emulated = test::under_emulation();
  for (const int64_t context : {700, 2048}) {
    if (emulated && context > 1000) break;
    const std::vector<NeedleItem> items = read_needles(kLadder / "data/needles.jsonl", context,
                                                       emulated ? 3 : (context < 1000 ? 20 : 10));
    std::vector<bool> right[3];
    int correct[3] = {};
    for (const NeedleItem& n : items) {
      const std::vector<int32_t> prompt = tok.encode(n.prompt);
      const auto answer_tokens = static_cast<int64_t>(tok.encode(n.answer).size());
      for (int t = 0; t < 3; ++t) {
        const bool ok = needle_answer_matches(
            tok.decode(greedy_answer(*ladder, 0, prompt, answer_tokens, kTypes[t])), n.answer);
        right[t].push_back(ok);
        correct[t] += ok;
      }
    }
    std::printf("    needles at %lld: f32 %d/%zu, f16 %d/%zu, int8 %d/%zu\n",
                static_cast<long long>(context), correct[0], items.size(), correct[1], items.size(),
                correct[2], items.size());
    EXPECT_GE(correct[0], static_cast<int>(items.size()) / 3) << "the needles must be answerable";
    EXPECT_EQ(right[1], right[0]) << "f16 answered other needles at " << context;
    EXPECT_GE(correct[2], correct[0] - 1) << "int8 at " << context;
  }
}

}  // namespace
}  // namespace molt
