// Shared by `molt fit`, `molt transfer eval` and `molt bench transfer`.
#pragma once

#include <chrono>
#include <cstdint>
#include <filesystem>
#include <memory>
#include <string>
#include <vector>

#include "molt/tokenizer/tokenizer.h"
#include "molt/transfer/corpus.h"
#include "molt/transfer/eval.h"
#include "molt/transfer/transfer.h"

namespace molt::cli {

// A corpus as token windows: text tokenized with the sender's tokenizer (the receiver's must
// have the same fingerprint when it has one), or a file of ids.
struct Corpus {
  std::unique_ptr<Tokenizer> tokenizer;
  std::unique_ptr<TokenStream> stream;
};
Corpus open_corpus(const std::filesystem::path& file, bool ids, const std::filesystem::path& sender,
                   const std::filesystem::path& receiver);

// The folder name of a checkpoint ("l" for models/tiny-ladder/l).
std::string rung_name(const std::filesystem::path& dir);

// The conditions every transfer figure is shown with: the map (alone, + recompute r, +
// anchors a, for each value given) and, with floors, a zero cache and a token-identity cache
// whose means come from the receiver's native caches of `windows`.
struct ConditionSet {
  std::vector<Condition> conditions;
  std::unique_ptr<TokenIdentityCache> token_identity;
};
ConditionSet transfer_conditions(const CacheMap& map, const Model& sender, const Model& receiver,
                                 const std::vector<int>& recompute, const std::vector<int>& anchors,
                                 bool floors, const std::vector<std::vector<int32_t>>& windows);

// "[fit] 12/500 ████░░░░ 3.1 s each, 25 min left" on stderr when it is a terminal.
class ProgressBar {
 public:
  ProgressBar(std::string label, int64_t total);
  void update(int64_t done);
  void finish();

 private:
  std::string label_;
  int64_t total_;
  bool enabled_;
  std::chrono::steady_clock::time_point start_;
};

}  // namespace molt::cli
