#include "molt/transfer/corpus.h"

#include <algorithm>
#include <charconv>

#include "molt/common/error.h"
#include "molt/tokenizer/tokenizer.h"

namespace molt {
namespace {

bool is_space(char c) {
  return c == ' ' || c == '\n' || c == '\t' || c == '\r' || c == ',';
}

}  // namespace

std::unique_ptr<TokenStream> TokenStream::text(const std::filesystem::path& path,
                                               const Tokenizer& tokenizer, size_t block_bytes) {
  std::unique_ptr<TokenStream> s(new TokenStream());
  s->block_ = std::max<size_t>(block_bytes, 16);
  s->path_ = path;
  s->tokenizer_ = &tokenizer;
  s->file_.open(path, std::ios::binary);
  if (!s->file_) fail("{}: cannot open corpus", path.string());
  return s;
}

std::unique_ptr<TokenStream> TokenStream::ids(const std::filesystem::path& path,
                                              size_t block_bytes) {
  std::unique_ptr<TokenStream> s(new TokenStream());
  s->block_ = std::max<size_t>(block_bytes, 16);
  s->path_ = path;
  s->file_.open(path, std::ios::binary);
  if (!s->file_) fail("{}: cannot open token id file", path.string());
  return s;
}

bool TokenStream::fill(size_t want) {
  while (buf_.size() - pos_ < want) {
    if (pos_ > 0) {
      buf_.erase(buf_.begin(), buf_.begin() + static_cast<std::ptrdiff_t>(pos_));
      pos_ = 0;
    }
    std::string block(block_, '\0');
    file_.read(block.data(), static_cast<std::streamsize>(block.size()));
    block.resize(static_cast<size_t>(file_.gcount()));
    const bool eof = block.empty();
    std::string text = carry_ + block;
    carry_.clear();
    if (text.empty()) return false;
    size_t cut = text.size();
    if (!eof) {
      if (tokenizer_ != nullptr) {
        // Cut after the last newline followed by a non-space character.
        cut = std::string::npos;
        for (size_t i = text.size() - 1; i > 0; --i) {
          if (text[i - 1] == '\n' && !is_space(text[i])) {
            cut = i;
            break;
          }
        }
        if (cut == std::string::npos && text.size() > 8 * block_) {
          // No line break for megabytes: cut before a space that starts a word instead.
          for (size_t i = text.size() - 1; i > 0; --i) {
            if (text[i] == ' ' && !is_space(text[i - 1]) && i + 1 < text.size() &&
                !is_space(text[i + 1])) {
              cut = i;
              break;
            }
          }
        }
        if (cut == std::string::npos) {  // one long line: wait for more text
          carry_ = std::move(text);
          continue;
        }
      } else {
        cut = text.size();
        while (cut > 0 && !is_space(text[cut - 1])) --cut;  // keep a partial number
      }
    }
    carry_ = text.substr(cut);
    text.resize(cut);
    if (tokenizer_ != nullptr) {
      std::vector<int32_t> ids =
          tokenizer_->encode(text, /*parse_special=*/true, InvalidUtf8::kByteFallback);
      buf_.insert(buf_.end(), ids.begin(), ids.end());
    } else {
      size_t i = 0;
      while (i < text.size()) {
        if (is_space(text[i])) {
          ++i;
          continue;
        }
        size_t j = i;
        while (j < text.size() && !is_space(text[j])) ++j;
        int32_t v = 0;
        auto [end, ec] = std::from_chars(text.data() + i, text.data() + j, v);
        if (ec != std::errc() || end != text.data() + j || v < 0) {
          fail("{}: '{}' at byte {} is not a token id (non-negative integer)", path_.string(),
               text.substr(i, std::min<size_t>(j - i, 40)), offset_ + static_cast<int64_t>(i));
        }
        buf_.push_back(v);
        i = j;
      }
    }
    offset_ += static_cast<int64_t>(cut);
    if (eof) {
      carry_.clear();
      if (buf_.size() - pos_ < want) return false;
    }
  }
  return true;
}

bool TokenStream::next_window(int64_t len, std::vector<int32_t>& out) {
  if (len <= 0) fail("window length {} must be positive", len);
  if (!fill(static_cast<size_t>(len))) return false;
  out.assign(buf_.begin() + static_cast<std::ptrdiff_t>(pos_),
             buf_.begin() + static_cast<std::ptrdiff_t>(pos_ + static_cast<size_t>(len)));
  pos_ += static_cast<size_t>(len);
  return true;
}

bool TokenStream::skip_window(int64_t len) {
  if (!fill(static_cast<size_t>(len))) return false;
  pos_ += static_cast<size_t>(len);
  return true;
}

}  // namespace molt
