#include "molt/bench/generated_block.h"

#include <algorithm>
#include <vector>

#include "molt/common/error.h"

namespace molt {
namespace {

constexpr std::string_view kOpen = "<!-- generated: ", kClose = "<!-- end generated: ";

struct Block {
  std::string name;
  size_t body_begin, body_end;  // byte offsets of the body in the text
};

// The name after `prefix` on a marker line: up to the first blank or "-->".
std::string marker_name(std::string_view line, std::string_view prefix) {
  std::string_view name = line.substr(prefix.size());
  name = name.substr(0, std::min(name.find_first_of(" \t\r\n"), name.find("-->")));
  return std::string(name);
}

std::vector<Block> scan(std::string_view text, const std::string& source) {
  std::vector<Block> out;
  std::string open;  // the block being read, if any
  size_t body_begin = 0;
  int line_no = 0, open_line = 0;
  for (size_t at = 0; at < text.size();) {
    const size_t nl = text.find('\n', at);
    const size_t next = nl == std::string_view::npos ? text.size() : nl + 1;
    const std::string_view line = text.substr(at, next - at);
    ++line_no;
    if (line.starts_with(kOpen)) {
      if (!open.empty()) {
        fail("{}:{}: generated block '{}' opens inside block '{}' (line {})", source, line_no,
             marker_name(line, kOpen), open, open_line);
      }
      open = marker_name(line, kOpen);
      if (open.empty()) fail("{}:{}: generated block without a name", source, line_no);
      for (const Block& b : out) {
        if (b.name == open)
          fail("{}:{}: generated block '{}' appears twice", source, line_no, open);
      }
      open_line = line_no;
      body_begin = next;
    } else if (line.starts_with(kClose)) {
      const std::string name = marker_name(line, kClose);
      if (name != open) {
        fail("{}:{}: end of generated block '{}' where '{}' is open", source, line_no, name,
             open.empty() ? "none" : open);
      }
      out.push_back({open, body_begin, at});
      open.clear();
    }
    at = next;
  }
  if (!open.empty()) fail("{}:{}: generated block '{}' is never closed", source, open_line, open);
  return out;
}

}  // namespace

std::map<std::string, std::string> generated_blocks(std::string_view text,
                                                    const std::string& source) {
  std::map<std::string, std::string> out;
  for (const Block& b : scan(text, source)) {
    out[b.name] = std::string(text.substr(b.body_begin, b.body_end - b.body_begin));
  }
  return out;
}

std::string fill_generated_blocks(std::string_view text,
                                  const std::map<std::string, std::string>& bodies,
                                  const std::string& source) {
  const std::vector<Block> blocks = scan(text, source);
  if (blocks.empty()) fail("{}: no generated blocks (<!-- generated: NAME ... -->)", source);
  std::string out;
  size_t at = 0;
  for (const Block& b : blocks) {
    const auto body = bodies.find(b.name);
    if (body == bodies.end()) {
      std::string known;
      for (const auto& [name, _] : bodies) known += (known.empty() ? "" : ", ") + name;
      fail("{}: no generator for block '{}' (known: {})", source, b.name, known);
    }
    out.append(text.substr(at, b.body_begin - at));
    out += body->second;
    at = b.body_end;
  }
  out.append(text.substr(at));
  return out;
}

}  // namespace molt
