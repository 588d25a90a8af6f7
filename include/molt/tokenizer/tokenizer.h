// Byte-level BPE tokenizer that matches Hugging Face's Qwen2 / Qwen2.5 tokenizer id for id.
//
// Pipeline of encode(): added tokens (<|im_start|>, ...) are split out of the raw text first,
// leftmost and longest match first; each stretch of text between them is NFC-normalised, cut
// into pieces by the pre-tokenizer regex (PCRE2, Unicode semantics) and each piece is encoded by
// byte-level BPE (lowest merge rank first). decode() concatenates the tokens' bytes.
//
// Typical use (e.g. `molt generate --prompt ... --chat`):
//
//   auto tok = molt::Tokenizer::load(model_dir);             // tokenizer.json, vocab+merges, ...
//   std::string prompt = molt::apply_chat_template({{"user", text}},
//   /*add_generation_prompt=*/true); std::vector<int32_t> ids = tok->encode(prompt);          //
//   <|im_start|> etc. become one id const int32_t im_end = tok->token_id("<|im_end|>");      //
//   stop token of chat models molt::StreamDecoder out(*tok); for (int32_t id : generated)
//   std::fputs(out.push(id).c_str(), stdout); std::fputs(out.flush().c_str(), stdout);
//
// All const methods are safe to call from several threads at once.
#pragma once

#include <cstdint>
#include <filesystem>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace molt {

// A token matched in raw text before BPE (tokenizer.json "added_tokens").
struct AddedToken {
  std::string content;
  int32_t id = -1;
  bool special = true;  // special tokens can be excluded from matching and from decode output
  bool lstrip = false;  // the match also swallows whitespace on its left
  bool rstrip = false;  // ... and on its right
};

// What encode() does with bytes that are not well-formed UTF-8.
enum class InvalidUtf8 {
  kError,         // throw molt::Error naming the byte offset (the default)
  kByteFallback,  // encode each offending byte as its single-byte token (decode_bytes round-trips)
};

class Tokenizer {
 public:
  // Loads from a model directory, a tokenizer.json, a vocab.json or merges.txt, or a .tiktoken
  // rank file. A directory is searched in this order: tokenizer.json; vocab.json + merges.txt;
  // a single *.tiktoken; merges.txt alone (byte tokens get ids 0..255 in byte-level alphabet
  // order and merge i makes token 256 + i).
  // Added tokens come from tokenizer.json itself, otherwise from the sibling
  // tokenizer_config.json ("added_tokens_decoder"), added_tokens.json or a single
  // *specials.json. `specials` names such a file explicitly ({"<|im_end|>": 151645, ...}, a
  // tokenizer_config.json, or a list of {"id", "content", "special"}); its tokens are added to
  // (or replace same-content tokens of) whatever the main files define.
  // Throws molt::Error naming the file for missing, corrupt, truncated or unsupported files.
  static std::unique_ptr<Tokenizer> load(const std::filesystem::path& path,
                                         const std::filesystem::path& specials = {});
  ~Tokenizer();
  Tokenizer(const Tokenizer&) = delete;
  Tokenizer& operator=(const Tokenizer&) = delete;

  // Ids of `text` (Hugging Face `encode(text, add_special_tokens=False)`; no BOS/EOS is added).
  // parse_special = false leaves special added tokens as plain text (user input that must not
  // inject control tokens); non-special added tokens such as <tool_call> are still matched.
  std::vector<int32_t> encode(std::string_view text, bool parse_special = true,
                              InvalidUtf8 invalid = InvalidUtf8::kError) const;

  // Text of `ids`: the tokens' bytes joined, ill-formed UTF-8 replaced by U+FFFD (as Hugging
  // Face's ByteLevel decoder does). skip_special drops special added tokens. Ids outside the
  // vocabulary throw molt::Error; model vocab rows past vocab_size() (Qwen pads the embedding
  // to 151936) are not tokens, so samplers should mask them.
  std::string decode(std::span<const int32_t> ids, bool skip_special = false) const;
  // The raw bytes, without U+FFFD replacement.
  std::string decode_bytes(std::span<const int32_t> ids, bool skip_special = false) const;
  // Bytes of one token (throws for unknown ids).
  std::string_view token_bytes(int32_t id) const;

  // Id of an added token's content ("<|im_end|>") or of a vocabulary token given as raw bytes
  // (" hello", not the byte-level spelling "Ġhello"); -1 when absent.
  int32_t token_id(std::string_view token) const;
  bool is_special(int32_t id) const;
  const std::vector<AddedToken>& added_tokens() const;

  // One past the largest id (151665 for Qwen2.5: 151643 BPE tokens + 22 added tokens).
  int64_t vocab_size() const;
  // SHA-256 (hex) over what decides the ids: vocabulary bytes, merges in rank order, added tokens
  // (content and id), normaliser and pre-tokenizer patterns. The same tokenizer loaded from
  // tokenizer.json, vocab.json + merges.txt or qwen.tiktoken gives the same fingerprint. The
  // ladder refuses rungs whose fingerprints differ.
  const std::string& fingerprint() const;
  // The file the vocabulary came from, and its format ("tokenizer.json", "vocab.json+merges.txt",
  // "merges.txt", "tiktoken").
  const std::filesystem::path& source() const;
  const std::string& format() const;

  // Forgets cached BPE results (for benchmarks that measure a cold cache).
  void clear_cache() const;

  // Internal: load() builds the state from the parsed files (tests build variants directly).
  struct Impl;
  explicit Tokenizer(std::unique_ptr<Impl> impl);

 private:
  std::unique_ptr<Impl> impl_;
};

// Incremental decoding for streaming: push() returns only whole UTF-8 characters and holds back
// the first bytes of a character that a later token completes; flush() returns what is left
// (U+FFFD for a character that never completed). The concatenation of all push() results and
// flush() equals tokenizer.decode(all ids).
class StreamDecoder {
 public:
  explicit StreamDecoder(const Tokenizer& tokenizer, bool skip_special = false)
      : tokenizer_(&tokenizer), skip_special_(skip_special) {}
  std::string push(int32_t id);
  std::string flush();
  size_t pending_bytes() const { return pending_.size(); }

 private:
  const Tokenizer* tokenizer_;
  bool skip_special_;
  std::string pending_;
};

}  // namespace molt
