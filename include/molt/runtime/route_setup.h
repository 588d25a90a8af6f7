// Setting routes up, shared by the CLI's fit, transfer, eval and demo commands: a fitting
// corpus read with the one tokenizer of both rungs, and maps fitted for a synthetic ladder.
#pragma once

#include <cstdio>
#include <filesystem>
#include <memory>

#include "molt/ladder/ladder.h"
#include "molt/tokenizer/tokenizer.h"
#include "molt/transfer/corpus.h"

namespace molt {

// A corpus as token windows: text tokenized with the sender's tokenizer (the receiver's must
// have the same fingerprint when it has one), or a file of ids.
struct Corpus {
  std::unique_ptr<Tokenizer> tokenizer;
  std::unique_ptr<TokenStream> stream;
};
Corpus open_corpus(const std::filesystem::path& file, bool ids, const std::filesystem::path& sender,
                   const std::filesystem::path& receiver);

// Fits every "maps" route whose folder is absent on random token ids: for synthetic ladders,
// so molt runs its real map files and code path (the maps' quality means nothing there).
// One line per fitted route goes to `log` when it is not null.
void fit_missing_maps(const Ladder& ladder, std::FILE* log);

}  // namespace molt
