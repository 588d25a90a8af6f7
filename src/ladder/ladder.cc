// Opening a ladder: manifest, rungs ordered by footprint, the one-tokenizer rule.
#include "molt/ladder/ladder.h"

#include <algorithm>

#include "molt/common/error.h"

namespace molt {
namespace {

namespace fs = std::filesystem;

}  // namespace

bool has_tokenizer_files(const fs::path& dir) {
  std::error_code ec;
  auto file = [&](const char* n) { return fs::is_regular_file(dir / n, ec); };
  if (file("tokenizer.json") || file("merges.txt")) return true;
  for (const auto& e : fs::directory_iterator(dir, ec)) {
    if (e.path().extension() == ".tiktoken") return true;
  }
  return false;
}

std::unique_ptr<Ladder> Ladder::open(const fs::path& manifest, const FootprintShape& shape) {
  return from_manifest(LadderManifest::load(manifest), shape, {});
}

std::unique_ptr<Ladder> Ladder::single(const fs::path& dir, const LoadOptions& load,
                                       const FootprintShape& shape) {
  if (!fs::is_directory(dir)) fail("{}: not a checkpoint directory", dir.string());
  LadderManifest m;
  m.file = dir / "config.json";
  m.name = fs::absolute(dir).lexically_normal().filename().string();
  if (m.name.empty()) m.name = "model";
  m.rungs.push_back({m.name, dir, precision_name(load.precision)});
  return from_manifest(std::move(m), shape, load);
}

std::unique_ptr<Ladder> Ladder::from_manifest(LadderManifest manifest, const FootprintShape& shape,
                                              const LoadOptions& load) {
  std::unique_ptr<Ladder> l(new Ladder());
  l->manifest_ = std::move(manifest);
  const std::string src = l->manifest_.file.string();
  for (const ManifestRung& r : l->manifest_.rungs) {
    l->rungs_.push_back(std::make_unique<Rung>(r, shape, load));
  }
  // Largest first: by weights, then by KV per token (stable, so ties keep manifest order).
  std::stable_sort(l->rungs_.begin(), l->rungs_.end(), [](const auto& a, const auto& b) {
    const Footprint &fa = a->footprint(), &fb = b->footprint();
    if (fa.weight_bytes != fb.weight_bytes) return fa.weight_bytes > fb.weight_bytes;
    return fa.kv_bytes_per_token > fb.kv_bytes_per_token;
  });

  l->counts_.resize(l->rungs_.size());
  // One tokenizer for the whole ladder.
  std::vector<const Rung*> with, without;
  for (const auto& r : l->rungs_)
    (has_tokenizer_files(r->path()) ? with : without).push_back(r.get());
  const Rung* first = nullptr;
  for (const Rung* r : with) {
    auto tok = Tokenizer::load(r->path());
    if (!l->tokenizer_) {
      l->tokenizer_ = std::move(tok);
      first = r;
      continue;
    }
    if (tok->fingerprint() != l->tokenizer_->fingerprint()) {
      fail(
          "{}: rung '{}' ({}) has a different tokenizer from rung '{}' ({}): fingerprints {} "
          "and {}; the rungs of a ladder must share one tokenizer",
          src, r->name(), r->path().string(), first->name(), first->path().string(),
          tok->fingerprint().substr(0, 12), l->tokenizer_->fingerprint().substr(0, 12));
    }
  }
  int64_t min_vocab = l->rungs_[0]->config().vocab_size;
  for (const auto& r : l->rungs_) min_vocab = std::min(min_vocab, r->config().vocab_size);
  if (l->tokenizer_) {
    l->tokenizer_note_ =
        fmt::format("tokenizer {} shared by {} rung(s) (fingerprint {})", l->tokenizer_->format(),
                    with.size(), l->tokenizer_->fingerprint().substr(0, 12));
    if (!without.empty()) {
      l->tokenizer_note_ += fmt::format("; rung '{}' has no tokenizer files", without[0]->name());
    }
    l->vocab_size_ = std::min(min_vocab, l->tokenizer_->vocab_size());
  } else {
    for (const auto& r : l->rungs_) {
      if (r->config().vocab_size != l->rungs_[0]->config().vocab_size) {
        fail(
            "{}: no rung has tokenizer files and rung '{}' has vocab_size {} but rung '{}' has "
            "{}; the rungs of a ladder must share one tokenizer",
            src, r->name(), r->config().vocab_size, l->rungs_[0]->name(),
            l->rungs_[0]->config().vocab_size);
      }
    }
    l->tokenizer_note_ = fmt::format(
        "no tokenizer files in any rung: compared config vocab_size only ({})", min_vocab);
    l->vocab_size_ = min_vocab;
  }
  // A rung without tokenizer files must at least embed the tokenizer's ids.
  for (const Rung* r : without) {
    if (l->tokenizer_ && r->config().vocab_size < l->tokenizer_->vocab_size()) {
      fail(
          "{}: rung '{}' has no tokenizer files and its vocab_size {} is smaller than the "
          "ladder tokenizer's {}",
          src, r->name(), r->config().vocab_size, l->tokenizer_->vocab_size());
    }
  }
  return l;
}

int Ladder::index(const std::string& name) const {
  for (int i = 0; i < size(); ++i) {
    if (rungs_[static_cast<size_t>(i)]->name() == name) return i;
  }
  fail("{}: no rung named '{}'", manifest_.file.string(), name);
}

const ManifestRoute* Ladder::route(int from, int to) const {
  return manifest_.route(rung(from).name(), rung(to).name());
}

void Ladder::reshape(const FootprintShape& shape) {
  for (auto& r : rungs_) r->reshape(shape);
}

void Ladder::hold(int r) {
  ++counts_.at(static_cast<size_t>(r)).holders;
}

void Ladder::drop(int r) {
  Counts& c = counts_.at(static_cast<size_t>(r));
  if (c.holders <= c.users || c.holders == 0)
    fail("ladder {}: rung '{}' dropped more often than held", name(), rung(r).name());
  --c.holders;
}

void Ladder::use(int r) {
  Counts& c = counts_.at(static_cast<size_t>(r));
  if (c.users >= c.holders)
    fail("ladder {}: rung '{}' used without being held", name(), rung(r).name());
  ++c.users;
}

void Ladder::unuse(int r) {
  Counts& c = counts_.at(static_cast<size_t>(r));
  if (c.users == 0)
    fail("ladder {}: rung '{}' unused more often than used", name(), rung(r).name());
  --c.users;
}

int Ladder::release_unused() {
  int n = 0;
  for (int r = 0; r < size(); ++r) {
    if (holders(r) == 0 && rung(r).state() != RungState::kReleased) {
      rung(r).release();
      ++n;
    }
  }
  return n;
}

size_t Ladder::resident_bytes() const {
  size_t n = 0;
  for (const auto& r : rungs_) n += r->resident_bytes();
  return n;
}

}  // namespace molt
