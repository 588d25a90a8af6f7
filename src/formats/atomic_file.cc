// Checked writes to a temporary and a rename: a reader sees the old file or the new one, never
// a prefix of it.
#include "molt/formats/atomic_file.h"

#include <cerrno>
#include <cstring>
#include <memory>
#include <vector>

#include "molt/common/error.h"

namespace molt {

AtomicFile::AtomicFile(std::filesystem::path path)
    : path_(std::move(path)), tmp_(path_.string() + ".tmp") {
  f_ = std::fopen(tmp_.c_str(), "wb");
  if (f_ == nullptr) fail("{}: cannot create: {}", tmp_.string(), std::strerror(errno));
}

AtomicFile::~AtomicFile() {
  if (f_ != nullptr) std::fclose(f_);
  if (!committed_) {
    std::error_code ec;
    std::filesystem::remove(tmp_, ec);
  }
}

void AtomicFile::write(const void* data, size_t n) {
  if (f_ == nullptr) fail("{}: write after close", tmp_.string());
  // fwrite sets errno on a short write (ENOSPC, EFBIG under a file-size limit, EIO).
  errno = 0;
  if (n != 0 && std::fwrite(data, 1, n, f_) != n) {
    fail("{}: write failed: {}", tmp_.string(), std::strerror(errno != 0 ? errno : EIO));
  }
}

void AtomicFile::commit() {
  if (f_ == nullptr) fail("{}: committed twice", tmp_.string());
  // The buffered tail is where a full disk usually shows: flush and close are both checked.
  errno = 0;
  if (std::fflush(f_) != 0) {
    fail("{}: write failed: {}", tmp_.string(), std::strerror(errno != 0 ? errno : EIO));
  }
  std::FILE* f = f_;
  f_ = nullptr;
  if (std::fclose(f) != 0) fail("{}: close failed: {}", tmp_.string(), std::strerror(errno));
  std::error_code ec;
  std::filesystem::rename(tmp_, path_, ec);
  if (ec) fail("{}: cannot rename from {}: {}", path_.string(), tmp_.string(), ec.message());
  committed_ = true;
}

void write_file_atomically(const std::filesystem::path& path, std::string_view text) {
  AtomicFile f(path);
  f.write(text);
  f.commit();
}

void copy_file_atomically(const std::filesystem::path& from, const std::filesystem::path& to) {
  std::unique_ptr<std::FILE, int (*)(std::FILE*)> in(std::fopen(from.c_str(), "rb"), std::fclose);
  if (!in) fail("{}: cannot open to copy: {}", from.string(), std::strerror(errno));
  AtomicFile out(to);
  std::vector<char> buf(size_t{1} << 20);
  for (;;) {
    const size_t n = std::fread(buf.data(), 1, buf.size(), in.get());
    out.write(buf.data(), n);
    if (n < buf.size()) break;
  }
  if (std::ferror(in.get())) fail("{}: read failed while copying", from.string());
  out.commit();
}

}  // namespace molt
