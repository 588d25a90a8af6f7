// Small parsing helpers shared by the subcommands.
#include <charconv>
#include <string>

#include "command.h"
#include "molt/common/error.h"

namespace molt::cli {

std::vector<int32_t> parse_ids(const std::string& text, const std::string& flag) {
  std::vector<int32_t> ids;
  size_t i = 0;
  while (i < text.size()) {
    if (text[i] == ' ' || text[i] == ',' || text[i] == '\n' || text[i] == '\t') {
      ++i;
      continue;
    }
    size_t j = i;
    while (j < text.size() && text[j] != ' ' && text[j] != ',' && text[j] != '\n' &&
           text[j] != '\t') {
      ++j;
    }
    int32_t v = 0;
    auto [end, ec] = std::from_chars(text.data() + i, text.data() + j, v);
    if (ec != std::errc() || end != text.data() + j || v < 0) {
      fail("{}: '{}' is not a token id (non-negative integer)", flag, text.substr(i, j - i));
    }
    ids.push_back(v);
    i = j;
  }
  return ids;
}

CLI::Option* add_layout_option(CLI::App* s, std::string& layout) {
  return s
      ->add_option("--layout", layout,
                   "MLX weights: auto (4-bit rows interleaved by 8 where this CPU decodes faster "
                   "so: a copy made once beside the checkpoint, mapped), stored (as the file has "
                   "them) or memory (interleaved into a heap copy at load)")
      ->check(CLI::IsMember({"auto", "stored", "memory"}))
      ->capture_default_str();
}

}  // namespace molt::cli
