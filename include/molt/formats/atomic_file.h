// A file that appears whole or not at all: its bytes go to a sibling "<path>.tmp", every write is
// checked (a full disk or a file-size limit fails naming the file and the reason), and commit()
// renames the temporary over `path`. Dropped without commit(), the temporary is removed.
#pragma once

#include <cstdio>
#include <filesystem>
#include <string_view>

namespace molt {

class AtomicFile {
 public:
  explicit AtomicFile(std::filesystem::path path);  // creates "<path>.tmp"
  ~AtomicFile();
  AtomicFile(const AtomicFile&) = delete;
  AtomicFile& operator=(const AtomicFile&) = delete;

  void write(const void* data, size_t n);
  void write(std::string_view text) { write(text.data(), text.size()); }
  // Flushes and closes (both checked), then renames the temporary to `path`.
  void commit();

  const std::filesystem::path& path() const { return path_; }
  const std::filesystem::path& temp_path() const { return tmp_; }

 private:
  std::filesystem::path path_, tmp_;
  std::FILE* f_ = nullptr;
  bool committed_ = false;
};

// `text` as the whole content of `path`, through an AtomicFile.
void write_file_atomically(const std::filesystem::path& path, std::string_view text);
// A copy of `from` as `to`, through an AtomicFile (std::filesystem::copy_file reports a write
// past a size limit as an I/O error; this names the reason).
void copy_file_atomically(const std::filesystem::path& from, const std::filesystem::path& to);

}  // namespace molt
