#include <openssl/evp.h>

#include <algorithm>
#include <memory>

#include "molt/common/error.h"
#include "tokenizer/tokenizer_impl.h"

namespace molt {
namespace {

class Sha256 {
 public:
  Sha256() : ctx_(EVP_MD_CTX_new(), &EVP_MD_CTX_free) {
    if (!ctx_ || EVP_DigestInit_ex(ctx_.get(), EVP_sha256(), nullptr) != 1)
      fail("SHA-256 unavailable");
  }
  void add(std::string_view s) { EVP_DigestUpdate(ctx_.get(), s.data(), s.size()); }
  // Length-prefixed, so that concatenations cannot collide.
  void add_field(std::string_view s) {
    add_u32(static_cast<uint32_t>(s.size()));
    add(s);
  }
  void add_u32(uint32_t v) {
    const unsigned char b[4] = {static_cast<unsigned char>(v), static_cast<unsigned char>(v >> 8),
                                static_cast<unsigned char>(v >> 16),
                                static_cast<unsigned char>(v >> 24)};
    EVP_DigestUpdate(ctx_.get(), b, 4);
  }
  std::string hex() {
    unsigned char md[EVP_MAX_MD_SIZE];
    unsigned int n = 0;
    EVP_DigestFinal_ex(ctx_.get(), md, &n);
    static const char* digits = "0123456789abcdef";
    std::string out;
    for (unsigned i = 0; i < n; ++i) {
      out += digits[md[i] >> 4];
      out += digits[md[i] & 15];
    }
    return out;
  }

 private:
  std::unique_ptr<EVP_MD_CTX, decltype(&EVP_MD_CTX_free)> ctx_;
};

}  // namespace

std::string tokenizer_fingerprint(const tok::TokenizerSpec& spec) {
  // The file format, the source path and the special flags are left out: they do not change
  // which ids a text gets when special tokens are parsed.
  Sha256 h;
  h.add_field("molt-tokenizer-fingerprint-v1");
  h.add_field(spec.nfc ? "normalizer:NFC" : "normalizer:none");
  h.add_u32(static_cast<uint32_t>(spec.splits.size()));
  for (const tok::SplitSpec& s : spec.splits) {
    h.add_field(s.literal ? "split:string" : "split:regex");
    h.add_field(s.pattern);
  }
  h.add_u32(spec.add_prefix_space ? 1 : 0);
  h.add_u32(spec.ignore_merges ? 1 : 0);
  h.add_u32(static_cast<uint32_t>(spec.vocab.size()));
  for (const std::string& t : spec.vocab) h.add_field(t);
  h.add_u32(static_cast<uint32_t>(spec.merges.size()));
  for (const auto& [l, r] : spec.merges) {
    h.add_u32(static_cast<uint32_t>(l));
    h.add_u32(static_cast<uint32_t>(r));
  }
  std::vector<const AddedToken*> added;
  for (const AddedToken& a : spec.added) added.push_back(&a);
  std::sort(added.begin(), added.end(), [](auto* a, auto* b) { return a->id < b->id; });
  h.add_u32(static_cast<uint32_t>(added.size()));
  for (const AddedToken* a : added) {
    h.add_u32(static_cast<uint32_t>(a->id));
    h.add_field(a->content);
    h.add_u32((a->lstrip ? 1u : 0u) | (a->rstrip ? 2u : 0u));
  }
  return h.hex();
}

}  // namespace molt
