// Pre-tokenizer: cuts normalised text into pieces that BPE encodes independently. Mirrors
// Hugging Face's Split(pattern, behavior = "Isolated") steps, run with PCRE2 (UTF + UCP + JIT).
#pragma once

#include <memory>
#include <string>
#include <string_view>
#include <vector>

namespace molt::tok {

// Qwen2's pattern (tokenizer.json of every Qwen2 / Qwen2.5 release).
inline constexpr std::string_view kQwen2Pattern =
    R"((?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)";
// GPT-2's pattern, used by a ByteLevel pre-tokenizer with use_regex = true.
inline constexpr std::string_view kGpt2Pattern =
    R"('s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+)";

// Hugging Face's regex engine (Oniguruma) reads \s as Unicode White_Space; PCRE2's UCP \s also
// accepts U+180E. Both agree that U+001C..U+001F are not spaces. This spells \s out as the
// White_Space set (and \S, outside classes, as its complement) so PCRE2 matches Oniguruma.
std::string rewrite_whitespace_escapes(std::string_view pattern);

// One Split step: regex matches and the gaps between them both become pieces, in order.
class RegexSplit {
 public:
  // `literal` is a tokenizer.json {"String": ...} pattern, matched as plain text.
  RegexSplit(std::string_view pattern, bool literal);
  ~RegexSplit();
  RegexSplit(RegexSplit&&) noexcept;
  RegexSplit& operator=(RegexSplit&&) noexcept;

  // Appends the pieces of `text` (well-formed UTF-8) to `out` as views into `text`.
  void split(std::string_view text, std::vector<std::string_view>& out) const;
  const std::string& pattern() const { return pattern_; }
  bool literal() const { return literal_; }

 private:
  struct Code;
  std::unique_ptr<Code> code_;
  std::string pattern_;
  bool literal_ = false;
};

// A sequence of Split steps, each refining the pieces of the previous one.
class PreTokenizer {
 public:
  void add(std::string_view pattern, bool literal) { steps_.emplace_back(pattern, literal); }
  // Replaces `pieces` with the pieces of `text`.
  void split(std::string_view text, std::vector<std::string_view>& pieces) const;
  const std::vector<RegexSplit>& steps() const { return steps_; }

 private:
  std::vector<RegexSplit> steps_;
};

}  // namespace molt::tok
