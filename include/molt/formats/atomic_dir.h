// An output folder that appears whole or not at all. A command writes every file into
// staging() — a sibling "<dir>.tmp-<pid>" — and commit() puts it in place of `dir` in one
// rename: a reader sees the old folder or the new one, never a mix, and a failure on the way
// (a full disk, a file-size limit) leaves the old folder as it was. Dropped without commit(),
// the staging folder is removed.
#pragma once

#include <filesystem>
#include <functional>
#include <string>

namespace molt {

class AtomicDir {
 public:
  // Creates the staging folder (and dir's parent folders). Refuses a `dir` that exists and is
  // not a folder.
  explicit AtomicDir(const std::filesystem::path& dir);
  ~AtomicDir();
  AtomicDir(const AtomicDir&) = delete;
  AtomicDir& operator=(const AtomicDir&) = delete;

  const std::filesystem::path& staging() const { return staging_; }
  std::filesystem::path operator/(const std::string& name) const { return staging_ / name; }

  // Entries of the folder being replaced that `keep` accepts (by file name) and that this run
  // did not write are carried into the new folder (hard links, or copies where the file
  // system has none). Then the new folder takes dir's place: swapped atomically where the file
  // system can (renameat2 RENAME_EXCHANGE), else the old one is moved aside first and moved
  // back should the second rename fail. The old folder is removed last.
  using Keep = std::function<bool(const std::string& name)>;
  void commit(const Keep& keep = {});

 private:
  std::filesystem::path dir_, staging_;
  bool committed_ = false;
};

}  // namespace molt
