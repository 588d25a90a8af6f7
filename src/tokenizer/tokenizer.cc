#include "molt/tokenizer/tokenizer.h"

#include <algorithm>

#include "molt/common/error.h"
#include "tokenizer/nfc.h"
#include "tokenizer/tokenizer_impl.h"
#include "tokenizer/utf8.h"

namespace molt {

Tokenizer::Impl::Impl(tok::TokenizerSpec spec)
    : fingerprint(tokenizer_fingerprint(spec)),
      source(spec.source),
      format(spec.format),
      nfc(spec.nfc),
      add_prefix_space(spec.add_prefix_space),
      bpe(spec.vocab, spec.merges, spec.ignore_merges, spec.source.string()),
      added(spec.added),
      matcher(spec.added) {
  const std::string where = spec.source.string();
  for (const tok::SplitSpec& s : spec.splits) {
    try {
      pretokenizer.add(s.pattern, s.literal);
    } catch (const Error& e) {
      fail("{}: {}", where, e.what());
    }
  }
  id_to_bytes = std::move(spec.vocab);
  int64_t largest = -1;
  for (const AddedToken& a : added) largest = std::max<int64_t>(largest, a.id);
  tok::check_id_space(where + ": added tokens", largest, id_to_bytes.size() + added.size());
  for (const AddedToken& a : added) {
    if (a.content.empty()) fail("{}: added token {} has empty content", where, a.id);
    if (a.id < 0) fail("{}: added token '{}' has a negative id", where, a.content);
    if (!added_by_content.emplace(a.content, a.id).second) {
      fail("{}: added token '{}' is listed twice", where, a.content);
    }
    if (static_cast<size_t>(a.id) >= id_to_bytes.size()) id_to_bytes.resize(a.id + 1);
    std::string& slot = id_to_bytes[a.id];
    if (!slot.empty() && slot != a.content) {
      fail("{}: added token '{}' has id {}, which already belongs to token '{}'", where, a.content,
           a.id, slot);
    }
    slot = a.content;
  }
  special.assign(id_to_bytes.size(), 0);
  for (const AddedToken& a : added) special[a.id] = a.special ? 1 : 0;
}

void Tokenizer::Impl::encode_plain(std::string_view text, std::vector<int32_t>& out) const {
  if (text.empty()) return;
  std::string storage;
  if (nfc) {
    bool changed = false;
    storage = tok::nfc(text, changed);
    if (changed) text = storage;
  }
  if (add_prefix_space && text[0] != ' ') {
    storage = " " + std::string(text);
    text = storage;
  }
  std::vector<std::string_view> pieces;
  pieces.reserve(text.size() / 4 + 1);
  pretokenizer.split(text, pieces);
  for (std::string_view p : pieces) bpe.encode(p, out);
}

void Tokenizer::Impl::encode_valid(std::string_view text, bool parse_special,
                                   std::vector<int32_t>& out) const {
  size_t pos = 0;
  while (auto m = matcher.find(text, pos, parse_special)) {
    encode_plain(text.substr(pos, m->begin - pos), out);
    out.push_back(m->id);
    pos = m->end;
  }
  encode_plain(text.substr(pos), out);
}

Tokenizer::Tokenizer(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
Tokenizer::~Tokenizer() = default;

std::vector<int32_t> Tokenizer::encode(std::string_view text, bool parse_special,
                                       InvalidUtf8 invalid) const {
  std::vector<int32_t> out;
  out.reserve(text.size() / 3 + 1);
  size_t bad = tok::find_invalid_utf8(text);
  if (bad == std::string_view::npos) {
    impl_->encode_valid(text, parse_special, out);
    return out;
  }
  if (invalid == InvalidUtf8::kError) {
    fail("input is not valid UTF-8: byte 0x{:02X} at offset {} (byte fallback encodes raw bytes)",
         static_cast<uint8_t>(text[bad]), bad);
  }
  // Byte fallback: well-formed runs are encoded as usual, each ill-formed byte as its own token.
  size_t pos = 0;
  while (pos < text.size()) {
    const size_t rel = tok::find_invalid_utf8(text.substr(pos));
    bad = rel == std::string_view::npos ? text.size() : pos + rel;
    impl_->encode_valid(text.substr(pos, bad - pos), parse_special, out);
    if (bad == text.size()) break;
    const tok::Utf8Step st = tok::utf8_step(text, bad);
    for (size_t k = 0; k < st.length; ++k) {
      const int32_t id = impl_->bpe.token_id(text.substr(bad + k, 1));
      if (id < 0)
        fail("the vocabulary has no token for byte 0x{:02X}", static_cast<uint8_t>(text[bad + k]));
      out.push_back(id);
    }
    pos = bad + st.length;
  }
  return out;
}

std::string_view Tokenizer::token_bytes(int32_t id) const {
  if (id < 0 || static_cast<size_t>(id) >= impl_->id_to_bytes.size() ||
      impl_->id_to_bytes[id].empty()) {
    fail("token id {} is not in the vocabulary (vocab size {})", id, vocab_size());
  }
  return impl_->id_to_bytes[id];
}

std::string Tokenizer::decode_bytes(std::span<const int32_t> ids, bool skip_special) const {
  std::string out;
  out.reserve(ids.size() * 4);
  for (int32_t id : ids) {
    std::string_view b = token_bytes(id);
    if (skip_special && impl_->special[id]) continue;
    out.append(b);
  }
  return out;
}

std::string Tokenizer::decode(std::span<const int32_t> ids, bool skip_special) const {
  return tok::utf8_lossy(decode_bytes(ids, skip_special));
}

int32_t Tokenizer::token_id(std::string_view token) const {
  auto it = impl_->added_by_content.find(token);
  if (it != impl_->added_by_content.end()) return it->second;
  return impl_->bpe.token_id(token);
}

bool Tokenizer::is_special(int32_t id) const {
  return id >= 0 && static_cast<size_t>(id) < impl_->special.size() && impl_->special[id] != 0;
}

const std::vector<AddedToken>& Tokenizer::added_tokens() const {
  return impl_->added;
}
int64_t Tokenizer::vocab_size() const {
  return static_cast<int64_t>(impl_->id_to_bytes.size());
}
const std::string& Tokenizer::fingerprint() const {
  return impl_->fingerprint;
}
const std::filesystem::path& Tokenizer::source() const {
  return impl_->source;
}
const std::string& Tokenizer::format() const {
  return impl_->format;
}
void Tokenizer::clear_cache() const {
  impl_->bpe.clear_cache();
}

std::string StreamDecoder::push(int32_t id) {
  std::string_view b = tokenizer_->token_bytes(id);
  if (!(skip_special_ && tokenizer_->is_special(id))) pending_.append(b);
  const size_t keep = tok::incomplete_utf8_tail(pending_);
  std::string out = tok::utf8_lossy(std::string_view(pending_).substr(0, pending_.size() - keep));
  pending_.erase(0, pending_.size() - keep);
  return out;
}

std::string StreamDecoder::flush() {
  std::string out = tok::utf8_lossy(pending_);
  pending_.clear();
  return out;
}

}  // namespace molt
