// Tokenizer::load: decides the format of a path and where the added tokens come from.
#include <algorithm>
#include <cstdint>
#include <nlohmann/json.hpp>
#include <system_error>

#include "molt/common/error.h"
#include "tokenizer/pretokenizer.h"
#include "tokenizer/tokenizer_impl.h"

namespace molt {
namespace {

namespace fs = std::filesystem;

bool is_file(const fs::path& p) {
  std::error_code ec;
  return fs::is_regular_file(p, ec);
}

// Files in `dir` whose names satisfy `keep`, sorted.
template <typename Pred>
std::vector<fs::path> files_where(const fs::path& dir, Pred keep) {
  std::vector<fs::path> out;
  std::error_code ec;
  for (const auto& e : fs::directory_iterator(dir, ec)) {
    if (e.is_regular_file(ec) && keep(e.path().filename().string())) out.push_back(e.path());
  }
  std::sort(out.begin(), out.end());
  return out;
}

// Added tokens next to a vocabulary that does not carry them: tokenizer_config.json, then
// added_tokens.json, then one *specials.json.
std::vector<AddedToken> sibling_added_tokens(const fs::path& dir) {
  const fs::path config = dir / "tokenizer_config.json";
  if (is_file(config)) {
    const nlohmann::json j = tok::parse_json_file(config);
    if (j.is_object() && j.contains("added_tokens_decoder")) {
      return tok::parse_added_tokens(j, config.string());
    }
  }
  if (is_file(dir / "added_tokens.json")) return tok::load_added_tokens(dir / "added_tokens.json");
  const auto specials =
      files_where(dir, [](const std::string& n) { return n.ends_with("specials.json"); });
  if (specials.size() > 1) {
    fail("{}: several *specials.json files ({}, {}); name one with --specials", dir.string(),
         specials[0].filename().string(), specials[1].filename().string());
  }
  if (specials.size() == 1) return tok::load_added_tokens(specials[0]);
  return {};
}

// The slow-tokenizer files store no pre-tokenizer; tokenizer_config.json names the class.
void apply_tokenizer_class(const fs::path& dir, tok::TokenizerSpec& spec) {
  const fs::path config = dir / "tokenizer_config.json";
  if (!is_file(config)) return;
  const nlohmann::json j = tok::parse_json_file(config);
  if (!j.is_object() || !j.contains("tokenizer_class") || !j["tokenizer_class"].is_string()) return;
  const std::string cls = j["tokenizer_class"].get<std::string>();
  if (cls.starts_with("GPT2Tokenizer")) {
    spec.nfc = false;
    spec.splits = {{std::string(tok::kGpt2Pattern), false}};
  }
}

tok::TokenizerSpec load_spec(const fs::path& path, bool& needs_siblings) {
  std::error_code ec;
  if (fs::is_directory(path, ec)) {
    if (is_file(path / "tokenizer.json")) return tok::load_tokenizer_json(path / "tokenizer.json");
    needs_siblings = true;
    if (is_file(path / "vocab.json") && is_file(path / "merges.txt")) {
      tok::TokenizerSpec spec = tok::load_vocab_merges(path / "vocab.json", path / "merges.txt");
      apply_tokenizer_class(path, spec);
      return spec;
    }
    const auto ranks =
        files_where(path, [](const std::string& n) { return n.ends_with(".tiktoken"); });
    if (ranks.size() > 1) {
      fail("{}: several .tiktoken files ({}, {}); name one", path.string(),
           ranks[0].filename().string(), ranks[1].filename().string());
    }
    if (ranks.size() == 1) return tok::load_tiktoken(ranks[0]);
    if (is_file(path / "merges.txt")) return tok::load_vocab_merges({}, path / "merges.txt");
    fail("{}: no tokenizer.json, vocab.json + merges.txt, *.tiktoken or merges.txt in this folder",
         path.string());
  }
  if (!fs::exists(path, ec)) fail("{}: no such file or directory", path.string());
  const fs::path dir = path.parent_path().empty() ? fs::path(".") : path.parent_path();
  const std::string name = path.filename().string();
  const std::string ext = path.extension().string();
  if (ext == ".tiktoken") {
    needs_siblings = true;
    return tok::load_tiktoken(path);
  }
  if (ext == ".txt") {  // merges.txt, with vocab.json beside it when there is one
    needs_siblings = true;
    const fs::path vocab = dir / "vocab.json";
    tok::TokenizerSpec spec = tok::load_vocab_merges(is_file(vocab) ? vocab : fs::path(), path);
    apply_tokenizer_class(dir, spec);
    return spec;
  }
  if (name == "vocab.json") {
    needs_siblings = true;
    if (!is_file(dir / "merges.txt")) fail("{}: no merges.txt beside it", path.string());
    tok::TokenizerSpec spec = tok::load_vocab_merges(path, dir / "merges.txt");
    apply_tokenizer_class(dir, spec);
    return spec;
  }
  if (ext == ".json") return tok::load_tokenizer_json(path);
  fail(
      "{}: cannot tell the tokenizer format (expected a folder, tokenizer.json, vocab.json, "
      "merges.txt or *.tiktoken)",
      path.string());
}

}  // namespace

std::unique_ptr<Tokenizer> Tokenizer::load(const fs::path& path, const fs::path& specials) {
  bool needs_siblings = false;
  tok::TokenizerSpec spec = load_spec(path, needs_siblings);
  std::error_code ec;
  const fs::path dir = fs::is_directory(path, ec) ? path : path.parent_path();
  std::vector<AddedToken> extra;
  if (!specials.empty()) {
    extra = tok::load_added_tokens(specials);
  } else if (needs_siblings) {
    extra = sibling_added_tokens(dir.empty() ? fs::path(".") : dir);
  }
  for (AddedToken& a : extra) {  // replace a same-content token, else add
    auto same = std::find_if(spec.added.begin(), spec.added.end(),
                             [&](const AddedToken& b) { return b.content == a.content; });
    if (same != spec.added.end()) {
      *same = std::move(a);
    } else {
      spec.added.push_back(std::move(a));
    }
  }
  // Rank files and bare merges have no room for added tokens between the vocabulary and them;
  // a gap means the file was cut short or the specials belong to another vocabulary.
  if (spec.format == "tiktoken" || spec.format == "merges.txt") {
    int64_t lowest = INT64_MAX;
    for (const AddedToken& a : spec.added) lowest = std::min<int64_t>(lowest, a.id);
    if (!spec.added.empty() && lowest > static_cast<int64_t>(spec.vocab.size())) {
      fail(
          "{}: the vocabulary ends at id {} but the added tokens start at {}: the file looks "
          "truncated, or the specials belong to another vocabulary",
          spec.source.string(), spec.vocab.size() - 1, lowest);
    }
  }
  return std::make_unique<Tokenizer>(std::make_unique<Impl>(std::move(spec)));
}

}  // namespace molt
