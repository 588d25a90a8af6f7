// tiktoken rank files (qwen.tiktoken): one "base64(token bytes) rank" per line.
#include <algorithm>
#include <array>
#include <charconv>
#include <climits>
#include <string_view>

#include "molt/common/error.h"
#include "tokenizer/bytes_index.h"
#include "tokenizer/pretokenizer.h"
#include "tokenizer/spec.h"

namespace molt::tok {
namespace {

bool base64_decode(std::string_view in, std::string& out) {
  static const std::array<int8_t, 256> table = [] {
    std::array<int8_t, 256> t{};
    t.fill(-1);
    const char* alphabet = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    for (int i = 0; i < 64; ++i) t[static_cast<uint8_t>(alphabet[i])] = static_cast<int8_t>(i);
    return t;
  }();
  out.clear();
  if (in.empty() || in.size() % 4 != 0) return false;
  size_t pad = 0;
  if (in.back() == '=') ++pad;
  if (in.size() >= 2 && in[in.size() - 2] == '=') ++pad;
  for (size_t i = 0; i < in.size(); i += 4) {
    uint32_t v = 0;
    for (size_t k = 0; k < 4; ++k) {
      const char c = in[i + k];
      const bool padding = c == '=' && i + 4 == in.size() && k >= 4 - pad;
      const int8_t d = padding ? 0 : table[static_cast<uint8_t>(c)];
      if (d < 0) return false;
      v = (v << 6) | static_cast<uint32_t>(d);
    }
    out.push_back(static_cast<char>(v >> 16));
    if (i + 4 < in.size() || pad < 2) out.push_back(static_cast<char>((v >> 8) & 0xFF));
    if (i + 4 < in.size() || pad < 1) out.push_back(static_cast<char>(v & 0xFF));
  }
  return true;
}

}  // namespace

TokenizerSpec load_tiktoken(const std::filesystem::path& path) {
  const std::string where = path.string();
  const std::string text = read_file_bytes(path);
  TokenizerSpec spec;
  spec.source = path;
  spec.format = "tiktoken";
  spec.nfc = true;  // Qwen's HF tokenizer normalises; the rank file itself says nothing
  spec.splits.push_back({std::string(kQwen2Pattern), false});
  // One token per line at most: bounds the ranks before the table is sized from them.
  const size_t lines = static_cast<size_t>(std::count(text.begin(), text.end(), '\n')) + 1;
  std::vector<size_t> line_of;  // rank -> line, to report duplicates
  std::string bytes;
  size_t pos = 0, line_no = 0;
  while (pos < text.size()) {
    size_t end = text.find('\n', pos);
    if (end == std::string::npos) end = text.size();
    std::string_view line(text.data() + pos, end - pos);
    pos = end + 1;
    ++line_no;
    if (!line.empty() && line.back() == '\r') line.remove_suffix(1);
    if (line.empty()) continue;
    const size_t sp = line.find(' ');
    if (sp == std::string_view::npos || line.find(' ', sp + 1) != std::string_view::npos) {
      fail("{}: line {}: expected 'base64 rank' (truncated or corrupt?)", where, line_no);
    }
    const std::string_view b64 = line.substr(0, sp), num = line.substr(sp + 1);
    int64_t rank = -1;
    const auto [p, ec] = std::from_chars(num.data(), num.data() + num.size(), rank);
    if (ec != std::errc() || p != num.data() + num.size() || rank < 0 || rank >= (1 << 24)) {
      fail("{}: line {}: rank '{}' is not a valid number", where, line_no, num);
    }
    if (!base64_decode(b64, bytes) || bytes.empty()) {
      fail("{}: line {}: '{}' is not valid base64", where, line_no, b64);
    }
    if (static_cast<size_t>(rank) >= spec.vocab.size()) {
      check_id_space(fmt::format("{}: line {}", where, line_no), rank, lines);
      spec.vocab.resize(rank + 1);
      line_of.resize(rank + 1, 0);
    }
    if (!spec.vocab[rank].empty()) {
      fail("{}: line {}: rank {} already given on line {}", where, line_no, rank, line_of[rank]);
    }
    spec.vocab[rank] = bytes;
    line_of[rank] = line_no;
  }
  if (spec.vocab.empty()) fail("{}: no tokens (empty file?)", where);
  spec.merges = merges_from_ranks(spec.vocab);
  return spec;
}

std::vector<std::pair<int32_t, int32_t>> merges_from_ranks(const std::vector<std::string>& vocab) {
  BytesIndex rank_of;
  rank_of.reserve(vocab.size());
  for (size_t r = 0; r < vocab.size(); ++r) {
    if (!vocab[r].empty()) rank_of.insert(vocab[r], static_cast<int32_t>(r));
  }
  std::vector<std::pair<int32_t, int32_t>> merges;
  merges.reserve(vocab.size());
  std::vector<size_t> starts;  // part k is token[starts[k], starts[k + 1])
  std::vector<int32_t> pair_rank;
  for (size_t r = 0; r < vocab.size(); ++r) {
    const std::string_view token = vocab[r];
    if (token.size() < 2) continue;
    starts.resize(token.size() + 1);
    for (size_t i = 0; i <= token.size(); ++i) starts[i] = i;
    // Rank of joining parts k and k + 1, if that token exists with a rank below r.
    auto join_rank = [&](size_t k) {
      const int32_t rank = rank_of.find(token.substr(starts[k], starts[k + 2] - starts[k]));
      return rank >= 0 && static_cast<size_t>(rank) < r ? rank : INT32_MAX;
    };
    size_t parts = token.size();
    pair_rank.resize(parts);
    for (size_t k = 0; k + 1 < parts; ++k) pair_rank[k] = join_rank(k);
    while (parts > 2) {
      size_t best = 0;
      for (size_t k = 1; k + 1 < parts; ++k) {
        if (pair_rank[k] < pair_rank[best]) best = k;
      }
      if (pair_rank[best] == INT32_MAX) break;
      starts.erase(starts.begin() + static_cast<std::ptrdiff_t>(best) + 1);
      pair_rank.erase(pair_rank.begin() + static_cast<std::ptrdiff_t>(best) + 1);
      --parts;
      if (best > 0) pair_rank[best - 1] = join_rank(best - 1);
      if (best + 1 < parts) pair_rank[best] = join_rank(best);
    }
    if (parts != 2) continue;  // no merge makes this token; BPE can never produce it
    const int32_t left = rank_of.find(token.substr(0, starts[1]));
    const int32_t right = rank_of.find(token.substr(starts[1]));
    if (left < 0 || right < 0) continue;  // a part is bytes without a token
    merges.emplace_back(left, right);
  }
  return merges;
}

}  // namespace molt::tok
