// A ladder: rungs of one family sharing a tokenizer, ordered by footprint (largest first),
// and the routes between them (DESIGN.md §2, §5).
#pragma once

#include <filesystem>
#include <memory>
#include <string>
#include <vector>

#include "molt/ladder/footprint.h"
#include "molt/ladder/manifest.h"
#include "molt/ladder/rung.h"
#include "molt/tokenizer/tokenizer.h"

namespace molt {

class Ladder {
 public:
  // Reads the manifest and every rung's config and safetensors headers, and checks that the
  // rungs share one tokenizer: rungs with tokenizer files must have equal fingerprints; when
  // no rung has tokenizer files, their config vocab_size must agree (tokenizer_note() says
  // which check was made). Loads no weights.
  static std::unique_ptr<Ladder> open(const std::filesystem::path& manifest,
                                      const FootprintShape& shape = {});
  // One model directory as a one-rung ladder (no routes), loaded with `load` (e.g. quantised
  // at load; the footprint is still the stored checkpoint's). Its tokenizer, when the
  // directory has one, is the ladder's.
  static std::unique_ptr<Ladder> single(const std::filesystem::path& dir,
                                        const LoadOptions& load = {},
                                        const FootprintShape& shape = {});

  const std::string& name() const { return manifest_.name; }
  const LadderManifest& manifest() const { return manifest_; }
  // Largest footprint first; index 0 is the top rung.
  int size() const { return static_cast<int>(rungs_.size()); }
  Rung& rung(int i) { return *rungs_.at(static_cast<size_t>(i)); }
  const Rung& rung(int i) const { return *rungs_.at(static_cast<size_t>(i)); }
  // Index of the rung called `name`; throws naming the manifest when absent.
  int index(const std::string& name) const;
  // The manifest's route between two rungs, or nullptr.
  const ManifestRoute* route(int from, int to) const;

  // The shared tokenizer (loaded from the first rung that has tokenizer files), or nullptr.
  const Tokenizer* tokenizer() const { return tokenizer_.get(); }
  const std::string& tokenizer_note() const { return tokenizer_note_; }
  // Ids every rung can embed and the tokenizer can decode.
  int64_t vocab_size() const { return vocab_size_; }

  // Recomputes every rung's footprint for a session shape (order stays).
  void reshape(const FootprintShape& shape);

  // Reference counts, so that generations share one mapping of a rung's weights. A generation
  // holds a rung while its KV cache belongs to that rung, and uses it while it decodes there
  // (a parked generation holds without using). Counting changes no residency: load, park and
  // release are decided by the caller (a migration, a park, the ladder's owner).
  void hold(int r);
  void drop(int r);
  void use(int r);
  void unuse(int r);
  int holders(int r) const { return counts_.at(static_cast<size_t>(r)).holders; }
  int users(int r) const { return counts_.at(static_cast<size_t>(r)).users; }
  // The owner's clean-up: releases every rung that no generation holds. Returns how many.
  int release_unused();

  // Sum of every rung's resident bytes by the accounting.
  size_t resident_bytes() const;

 private:
  Ladder() = default;
  static std::unique_ptr<Ladder> from_manifest(LadderManifest manifest, const FootprintShape& shape,
                                               const LoadOptions& load);
  LadderManifest manifest_;
  std::vector<std::unique_ptr<Rung>> rungs_;
  struct Counts {
    int holders = 0, users = 0;
  };
  std::vector<Counts> counts_;
  std::unique_ptr<Tokenizer> tokenizer_;
  std::string tokenizer_note_;
  int64_t vocab_size_ = 0;
};

// True when `dir` holds files Tokenizer::load reads (tokenizer.json, vocab.json + merges.txt,
// merges.txt or a *.tiktoken).
bool has_tokenizer_files(const std::filesystem::path& dir);

}  // namespace molt
