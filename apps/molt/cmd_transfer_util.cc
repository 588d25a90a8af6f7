#include "cmd_transfer_util.h"

#include <fmt/core.h>

#include <cstdio>

#include "command.h"
#include "molt/common/error.h"

namespace molt::cli {

namespace {
bool has_tokenizer(const std::filesystem::path& dir) {
  for (const char* f : {"tokenizer.json", "vocab.json", "merges.txt"}) {
    if (std::filesystem::exists(dir / f)) return true;
  }
  return false;
}
}  // namespace

Corpus open_corpus(const std::filesystem::path& file, bool ids, const std::filesystem::path& sender,
                   const std::filesystem::path& receiver) {
  Corpus c;
  if (ids) {
    c.stream = TokenStream::ids(file);
    return c;
  }
  if (!has_tokenizer(sender)) {
    fail("{}: no tokenizer to read the text corpus {}; give token ids with --corpus-ids instead",
         sender.string(), file.string());
  }
  c.tokenizer = Tokenizer::load(sender);
  if (has_tokenizer(receiver)) {
    auto other = Tokenizer::load(receiver);
    if (other->fingerprint() != c.tokenizer->fingerprint()) {
      fail("{} and {} have different tokenizers: a map between them would pair unrelated tokens",
           sender.string(), receiver.string());
    }
  }
  c.stream = TokenStream::text(file, *c.tokenizer);
  return c;
}

std::string rung_name(const std::filesystem::path& dir) {
  std::filesystem::path p = std::filesystem::absolute(dir).lexically_normal();
  if (p.filename().empty()) p = p.parent_path();
  return p.filename().string();
}

ConditionSet transfer_conditions(const CacheMap& map, const Model& sender, const Model& receiver,
                                 const std::vector<int>& recompute, const std::vector<int>& anchors,
                                 bool floors, const std::vector<std::vector<int32_t>>& windows) {
  ConditionSet set;
  auto with = [&](std::string name, TransferOptions o) {
    const CacheMap* m = &map;
    const Model *s = &sender, *r = &receiver;
    set.conditions.push_back(
        {std::move(name), [m, s, r, o](const KVCache& src, std::span<const int32_t> t, KVCache& d) {
           m->apply(*s, src, *r, t, o, d);
         }});
  };
  with(fmt::format("map ({})", map.method()), {});
  for (int r : recompute) {
    TransferOptions o;
    o.recompute_layers = r;
    with(fmt::format("map + recompute r={}", r), o);
  }
  for (int a : anchors) {
    TransferOptions o;
    o.anchors = a;
    with(fmt::format("map + anchors a={}", a), o);
  }
  if (floors) {
    set.conditions.push_back({"zero cache", [](const KVCache& src, std::span<const int32_t>,
                                               KVCache& d) { fill_zero_cache(src.size(), d); }});
    set.token_identity = std::make_unique<TokenIdentityCache>(receiver, windows);
    const TokenIdentityCache* t = set.token_identity.get();
    set.conditions.push_back(
        {"token-identity cache",
         [t](const KVCache&, std::span<const int32_t> ids, KVCache& d) { t->fill(ids, d); }});
  }
  return set;
}

ProgressBar::ProgressBar(std::string label, int64_t total)
    : label_(std::move(label)),
      total_(total),
      enabled_(stderr_is_tty()),
      start_(std::chrono::steady_clock::now()) {}

void ProgressBar::update(int64_t done) {
  if (!enabled_ || total_ <= 0) return;
  const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - start_).count();
  const int width = 30, filled = static_cast<int>(width * done / total_);
  std::string bar;
  for (int i = 0; i < width; ++i) bar += i < filled ? "█" : "░";
  const double each = done > 0 ? s / static_cast<double>(done) : 0;
  const double left = each * static_cast<double>(total_ - done);
  fmt::print(stderr, "\r[{}] {}/{} {} {:.2f} s each, {:.0f} s left   ", label_, done, total_, bar,
             each, left);
  std::fflush(stderr);
}

void ProgressBar::finish() {
  if (enabled_ && total_ > 0) fmt::print(stderr, "\n");
}

}  // namespace molt::cli
