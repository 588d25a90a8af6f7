// A staging folder beside the output and one rename: commands that write several files (a
// checkpoint, a map and its index) never leave a folder that looks complete and is not.
#include "molt/formats/atomic_dir.h"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>

#include "molt/common/error.h"

namespace molt {
namespace fs = std::filesystem;

namespace {

// Hard links cost no bytes and no time; a copy is the fallback where links are refused.
void carry(const fs::path& from, const fs::path& to) {
  std::error_code ec;
  fs::copy(from, to,
           fs::copy_options::recursive | fs::copy_options::copy_symlinks |
               fs::copy_options::create_hard_links,
           ec);
  if (!ec) return;
  fs::remove_all(to, ec);
  fs::copy(from, to, fs::copy_options::recursive | fs::copy_options::copy_symlinks, ec);
  if (ec) fail("{}: cannot carry it into {}: {}", from.string(), to.string(), ec.message());
}

}  // namespace

AtomicDir::AtomicDir(const fs::path& dir) {
  // Absolute and without a trailing "/" or "/.": the staging folder must be a sibling, not a
  // child. A link to a folder: the folder it names is replaced, the link stays.
  dir_ = fs::absolute(dir).lexically_normal();
  if (!dir_.has_filename()) dir_ = dir_.parent_path();
  std::error_code ec;
  if (fs::is_symlink(dir_, ec)) dir_ = fs::weakly_canonical(dir_);
  if (fs::exists(dir_, ec) && !fs::is_directory(dir_, ec)) {
    fail("{}: exists and is not a folder", dir_.string());
  }
  fs::create_directories(dir_.parent_path(), ec);
  if (ec) fail("{}: cannot create: {}", dir_.parent_path().string(), ec.message());
  staging_ = dir_.parent_path() / (dir_.filename().string() + ".tmp-" + std::to_string(getpid()));
  fs::remove_all(staging_, ec);  // left by an earlier process that had this id and was killed
  if (!fs::create_directory(staging_, ec) || ec) {
    fail("{}: cannot create: {}", staging_.string(), ec ? ec.message() : "it exists");
  }
}

AtomicDir::~AtomicDir() {
  if (committed_) return;
  std::error_code ec;
  fs::remove_all(staging_, ec);
}

void AtomicDir::commit(const Keep& keep) {
  if (committed_) fail("{}: committed twice", dir_.string());
  std::error_code ec;
  if (!fs::exists(dir_, ec)) {
    fs::rename(staging_, dir_, ec);
    if (ec) fail("{}: cannot rename from {}: {}", dir_.string(), staging_.string(), ec.message());
    committed_ = true;
    return;
  }
  if (!fs::is_directory(dir_, ec)) fail("{}: exists and is not a folder", dir_.string());
  if (keep) {
    for (const auto& e : fs::directory_iterator(dir_)) {
      const std::string name = e.path().filename().string();
      if (!keep(name) || fs::exists(fs::symlink_status(staging_ / name))) continue;
      carry(e.path(), staging_ / name);
    }
  }
  // One step: after it the staging path holds the old folder.
  if (::renameat2(AT_FDCWD, staging_.c_str(), AT_FDCWD, dir_.c_str(), RENAME_EXCHANGE) == 0) {
    committed_ = true;
    fs::remove_all(staging_, ec);
    return;
  }
  if (errno != EINVAL && errno != ENOSYS && errno != EOPNOTSUPP) {
    fail("{}: cannot swap in {}: {}", dir_.string(), staging_.string(), std::strerror(errno));
  }
  // No exchange on this file system: the old folder steps aside, and comes back on failure.
  const fs::path old =
      dir_.parent_path() / (dir_.filename().string() + ".old-" + std::to_string(getpid()));
  fs::remove_all(old, ec);
  fs::rename(dir_, old, ec);
  if (ec) fail("{}: cannot move it aside to {}: {}", dir_.string(), old.string(), ec.message());
  fs::rename(staging_, dir_, ec);
  if (ec) {
    std::error_code back;
    fs::rename(old, dir_, back);
    fail("{}: cannot rename from {}: {}", dir_.string(), staging_.string(), ec.message());
  }
  committed_ = true;
  fs::remove_all(old, ec);
}

}  // namespace molt
