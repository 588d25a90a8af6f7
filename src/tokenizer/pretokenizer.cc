#define PCRE2_CODE_UNIT_WIDTH 8
#include "tokenizer/pretokenizer.h"

#include <pcre2.h>

#include "molt/common/error.h"

namespace molt::tok {
namespace {

constexpr std::string_view kWhiteSpaceItems =
    R"(\t\n\x{0B}\f\r\x{20}\x{85}\x{A0}\x{1680}\x{2000}-\x{200A}\x{2028}\x{2029}\x{202F}\x{205F}\x{3000})";

std::string pcre2_message(int code) {
  PCRE2_UCHAR buf[256];
  pcre2_get_error_message(code, buf, sizeof buf);
  return reinterpret_cast<const char*>(buf);
}

}  // namespace

std::string rewrite_whitespace_escapes(std::string_view p) {
  std::string out;
  out.reserve(p.size() + 256);
  bool in_class = false;
  for (size_t i = 0; i < p.size(); ++i) {
    const char c = p[i];
    if (c == '\\' && i + 1 < p.size()) {
      const char e = p[++i];
      if (e == 's') {
        out += in_class ? std::string(kWhiteSpaceItems) : "[" + std::string(kWhiteSpaceItems) + "]";
      } else if (e == 'S' && !in_class) {
        out += "[^" + std::string(kWhiteSpaceItems) + "]";
      } else {
        // \S inside a class keeps PCRE2's meaning: no pattern we load uses it, and a negated set
        // cannot be spelled inside a class.
        out += c;
        out += e;
      }
      continue;
    }
    if (!in_class && c == '[') {
      in_class = true;
      out += c;
      // A ']' right after '[' or '[^' is a literal member, not the end of the class.
      if (i + 1 < p.size() && p[i + 1] == '^') out += p[++i];
      if (i + 1 < p.size() && p[i + 1] == ']') out += p[++i];
      continue;
    }
    if (in_class && c == '[' && i + 1 < p.size() && p[i + 1] == ':') {
      const size_t end = p.find(":]", i + 2);  // POSIX class such as [:alpha:]
      if (end != std::string_view::npos) {
        out.append(p.substr(i, end + 2 - i));
        i = end + 1;
        continue;
      }
    }
    if (in_class && c == ']') in_class = false;
    out += c;
  }
  return out;
}

struct RegexSplit::Code {
  pcre2_code* code = nullptr;
  bool jit = false;
  ~Code() { pcre2_code_free(code); }
};

RegexSplit::RegexSplit(std::string_view pattern, bool literal)
    : code_(std::make_unique<Code>()), pattern_(pattern), literal_(literal) {
  const std::string source = literal ? std::string(pattern) : rewrite_whitespace_escapes(pattern);
  const uint32_t options = literal ? PCRE2_UTF | PCRE2_LITERAL : PCRE2_UTF | PCRE2_UCP;
  int err = 0;
  PCRE2_SIZE offset = 0;
  code_->code = pcre2_compile(reinterpret_cast<PCRE2_SPTR>(source.data()), source.size(), options,
                              &err, &offset, nullptr);
  if (code_->code == nullptr) {
    fail("pre-tokenizer pattern '{}': {} at offset {}", pattern, pcre2_message(err), offset);
  }
  code_->jit = pcre2_jit_compile(code_->code, PCRE2_JIT_COMPLETE) == 0;
}

RegexSplit::~RegexSplit() = default;
RegexSplit::RegexSplit(RegexSplit&&) noexcept = default;
RegexSplit& RegexSplit::operator=(RegexSplit&&) noexcept = default;

void RegexSplit::split(std::string_view text, std::vector<std::string_view>& out) const {
  std::unique_ptr<pcre2_match_data, decltype(&pcre2_match_data_free)> md(
      pcre2_match_data_create(1, nullptr), &pcre2_match_data_free);
  const auto* subject = reinterpret_cast<PCRE2_SPTR>(text.data());
  size_t pos = 0;    // start of the next gap
  size_t start = 0;  // where the next search begins
  while (start < text.size()) {
    const int rc =
        code_->jit ? pcre2_jit_match(code_->code, subject, text.size(), start, 0, md.get(), nullptr)
                   : pcre2_match(code_->code, subject, text.size(), start, PCRE2_NO_UTF_CHECK,
                                 md.get(), nullptr);
    if (rc == PCRE2_ERROR_NOMATCH) break;
    if (rc < 0) fail("pre-tokenizer pattern '{}': {}", pattern_, pcre2_message(rc));
    const PCRE2_SIZE* ov = pcre2_get_ovector_pointer(md.get());
    const size_t b = ov[0], e = ov[1];
    if (e == b) {  // empty matches make no piece; step over one character
      start = b + 1;
      while (start < text.size() && (static_cast<uint8_t>(text[start]) & 0xC0) == 0x80) ++start;
      continue;
    }
    if (b > pos) out.push_back(text.substr(pos, b - pos));
    out.push_back(text.substr(b, e - b));
    pos = start = e;
  }
  if (pos < text.size()) out.push_back(text.substr(pos));
}

void PreTokenizer::split(std::string_view text, std::vector<std::string_view>& pieces) const {
  pieces.clear();
  if (text.empty()) return;
  if (steps_.empty()) {
    pieces.push_back(text);
    return;
  }
  steps_[0].split(text, pieces);
  std::vector<std::string_view> next;
  for (size_t s = 1; s < steps_.size(); ++s) {
    next.clear();
    for (std::string_view p : pieces) steps_[s].split(p, next);
    pieces.swap(next);
  }
}

}  // namespace molt::tok
