// vocab.json + merges.txt (the "slow" Hugging Face files), or merges.txt alone.
#include <algorithm>
#include <nlohmann/json.hpp>

#include "molt/common/error.h"
#include "tokenizer/byte_level.h"
#include "tokenizer/bytes_index.h"
#include "tokenizer/pretokenizer.h"
#include "tokenizer/spec.h"

namespace molt::tok {
namespace {

struct MergeLine {
  std::string left, right;  // byte-level spelling
  size_t line;
};

// Hugging Face's reader: strip each line, skip blank lines and a first "#version" line, and
// require exactly two tokens per line (a cut-off last line has one).
std::vector<MergeLine> read_merges_txt(const std::filesystem::path& path) {
  const std::string text = read_file_bytes(path);
  std::vector<MergeLine> out;
  out.reserve(text.size() / 10);
  size_t pos = 0, line_no = 0;
  while (pos < text.size()) {
    size_t end = text.find('\n', pos);
    if (end == std::string::npos) end = text.size();
    std::string_view line(text.data() + pos, end - pos);
    pos = end + 1;
    ++line_no;
    auto space = [](char c) {
      return c == ' ' || c == '\t' || c == '\r' || c == '\v' || c == '\f';
    };
    while (!line.empty() && space(line.front())) line.remove_prefix(1);
    while (!line.empty() && space(line.back())) line.remove_suffix(1);
    if (line.empty() || (line_no == 1 && line.starts_with("#version"))) continue;
    const size_t sp = line.find(' ');
    if (sp == std::string_view::npos || line.find(' ', sp + 1) != std::string_view::npos) {
      fail(
          "{}: line {}: expected two tokens separated by a space, got '{}' (truncated or corrupt?)",
          path.string(), line_no, line);
    }
    out.push_back({std::string(line.substr(0, sp)), std::string(line.substr(sp + 1)), line_no});
  }
  return out;
}

std::string decode_token(const std::string& name, const std::filesystem::path& path, size_t line) {
  std::optional<std::string> bytes = byte_level_decode(name);
  if (!bytes || bytes->empty()) {
    fail("{}: line {}: token '{}' is not in the byte-level alphabet", path.string(), line, name);
  }
  return std::move(*bytes);
}

}  // namespace

TokenizerSpec load_vocab_merges(const std::filesystem::path& vocab_path,
                                const std::filesystem::path& merges_path) {
  TokenizerSpec spec;
  const std::vector<MergeLine> lines = read_merges_txt(merges_path);
  // The slow Qwen2Tokenizer hard-codes NFC and the Qwen2 pattern; these files store neither.
  spec.nfc = true;
  spec.splits.push_back({std::string(kQwen2Pattern), false});
  // Views into spec.vocab: it is sized once, before any view is taken, and never reallocated.
  BytesIndex by_bytes;

  if (!vocab_path.empty()) {
    const std::string where = vocab_path.string();
    spec.source = vocab_path;
    spec.format = "vocab.json+merges.txt";
    const nlohmann::json j = parse_json_file(vocab_path);
    if (!j.is_object()) fail("{}: expected a JSON object of token -> id", where);
    std::vector<std::pair<int32_t, std::string>> entries;
    entries.reserve(j.size());
    int32_t max_id = -1;
    for (const auto& [name, v] : j.items()) {
      if (!v.is_number_integer() || v.get<int64_t>() < 0 || v.get<int64_t>() >= (1 << 24)) {
        fail("{}: token '{}' has no valid id", where, name);
      }
      std::optional<std::string> bytes = byte_level_decode(name);
      if (!bytes || bytes->empty())
        fail("{}: token '{}' is not in the byte-level alphabet", where, name);
      entries.emplace_back(static_cast<int32_t>(v.get<int64_t>()), std::move(*bytes));
      max_id = std::max(max_id, entries.back().first);
    }
    check_id_space(where, max_id, entries.size());
    spec.vocab.resize(static_cast<size_t>(max_id) + 1);
    for (auto& [id, bytes] : entries) {
      if (!spec.vocab[id].empty()) fail("{}: id {} is used twice", where, id);
      spec.vocab[id] = std::move(bytes);
    }
    by_bytes.reserve(spec.vocab.size());
    for (size_t id = 0; id < spec.vocab.size(); ++id) {
      if (!spec.vocab[id].empty()) by_bytes.insert(spec.vocab[id], static_cast<int32_t>(id));
    }
    spec.merges.reserve(lines.size());
    for (const MergeLine& m : lines) {
      int32_t ids[2];
      for (int k = 0; k < 2; ++k) {
        const std::string& name = k == 0 ? m.left : m.right;
        ids[k] = by_bytes.find(decode_token(name, merges_path, m.line));
        if (ids[k] < 0) {
          fail("{}: line {}: token '{}' is not in {}", merges_path.string(), m.line, name, where);
        }
      }
      spec.merges.emplace_back(ids[0], ids[1]);
    }
    return spec;
  }

  // No vocab.json: the 256 byte tokens take ids 0..255 in alphabet order and merge i makes
  // token 256 + i (how qwen.tiktoken and Qwen's vocab.json number them).
  spec.source = merges_path;
  spec.format = "merges.txt";
  spec.vocab.reserve(256 + lines.size());
  by_bytes.reserve(256 + lines.size());
  for (uint8_t b : byte_alphabet_order()) {
    spec.vocab.emplace_back(1, static_cast<char>(b));
    by_bytes.insert(spec.vocab.back(), static_cast<int32_t>(spec.vocab.size() - 1));
  }
  for (const MergeLine& m : lines) {
    int32_t ids[2];
    std::string joined;
    for (int k = 0; k < 2; ++k) {
      const std::string& name = k == 0 ? m.left : m.right;
      const std::string bytes = decode_token(name, merges_path, m.line);
      ids[k] = by_bytes.find(bytes);
      if (ids[k] < 0) {
        fail("{}: line {}: token '{}' is not made by an earlier merge", merges_path.string(),
             m.line, name);
      }
      joined += bytes;
    }
    const auto id = static_cast<int32_t>(spec.vocab.size());
    spec.vocab.push_back(std::move(joined));  // within the reserved capacity: views stay valid
    if (by_bytes.insert(spec.vocab.back(), id) >= 0) {
      fail("{}: line {}: makes token '{}' a second time; ids are ambiguous without vocab.json",
           merges_path.string(), m.line, byte_level_encode(spec.vocab.back()));
    }
    spec.merges.emplace_back(ids[0], ids[1]);
  }
  return spec;
}

}  // namespace molt::tok
