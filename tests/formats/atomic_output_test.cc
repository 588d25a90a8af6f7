// AtomicFile and AtomicDir: an output appears whole or not at all, a failed write names the file
// and the reason, and what was there before stays as it was.
#include <gtest/gtest.h>

#include <algorithm>

#include "molt/common/error.h"
#include "molt/formats/atomic_dir.h"
#include "molt/formats/atomic_file.h"
#include "test_util.h"

namespace molt {
namespace {

namespace fs = std::filesystem;

std::vector<std::string> entries(const fs::path& dir) {
  std::vector<std::string> names;
  for (const auto& e : fs::directory_iterator(dir)) names.push_back(e.path().filename().string());
  std::sort(names.begin(), names.end());
  return names;
}

TEST(AtomicFile, ReplacesOnlyOnCommit) {
  test::TempDir dir;
  test::write_file(dir / "f", "old");
  {
    AtomicFile f(dir / "f");
    f.write("new");
    EXPECT_EQ(test::read_file(dir / "f"), "old");  // not before commit
  }
  EXPECT_EQ(test::read_file(dir / "f"), "old");  // dropped: the temporary went with it
  EXPECT_EQ(entries(dir.path()), std::vector<std::string>{"f"});
  write_file_atomically(dir / "f", "new");
  EXPECT_EQ(test::read_file(dir / "f"), "new");
  EXPECT_EQ(entries(dir.path()), std::vector<std::string>{"f"});
}

// A full disk, for real: the temporary is /dev/full, where every flushed write fails ENOSPC.
TEST(AtomicFile, AFullDiskIsNamedAndTheOldFileStays) {
  if (!fs::exists("/dev/full")) GTEST_SKIP() << "no /dev/full";
  test::TempDir dir;
  test::write_file(dir / "index.json", "old");
  fs::create_symlink("/dev/full", dir / "index.json.tmp");
  try {
    write_file_atomically(dir / "index.json", "{\"files\": {}}\n");
    FAIL() << "a write to /dev/full succeeded";
  } catch (const Error& e) {
    EXPECT_EQ(std::string(e.what()),
              (dir / "index.json.tmp").string() + ": write failed: No space left on device");
  }
  EXPECT_EQ(test::read_file(dir / "index.json"), "old");
  EXPECT_EQ(entries(dir.path()), std::vector<std::string>{"index.json"});
}

TEST(AtomicDir, AppearsOnlyOnCommit) {
  test::TempDir parent;
  const fs::path out = parent / "out";
  {
    AtomicDir d(out);
    EXPECT_EQ(d.staging().parent_path(), parent.path());
    write_file_atomically(d / "a", "1");
    EXPECT_FALSE(fs::exists(out));
  }
  EXPECT_EQ(entries(parent.path()), std::vector<std::string>{});  // dropped: nothing left
  {
    AtomicDir d(out.string() + "/");  // "out/" names the folder, not a file inside it
    EXPECT_EQ(d.staging().parent_path(), parent.path());
    write_file_atomically(d / "a", "1");
    d.commit();
  }
  EXPECT_EQ(entries(parent.path()), std::vector<std::string>{"out"});
  EXPECT_EQ(test::read_file(out / "a"), "1");
}

TEST(AtomicDir, ReplacesTheOldFolderAndKeepsWhatItIsToldTo) {
  test::TempDir parent;
  const fs::path out = parent / "out";
  fs::create_directories(out / "sub");
  test::write_file(out / "a", "old a");
  test::write_file(out / "b", "old b");
  test::write_file(out / "sub" / "c", "old c");
  {
    AtomicDir d(out);
    write_file_atomically(d / "a", "new a");
    EXPECT_EQ(test::read_file(out / "a"), "old a");  // the old folder is whole until commit
  }
  EXPECT_EQ(entries(out), (std::vector<std::string>{"a", "b", "sub"}));
  EXPECT_EQ(test::read_file(out / "a"), "old a");
  {
    AtomicDir d(out);
    write_file_atomically(d / "a", "new a");
    d.commit([](const std::string& name) { return name != "b"; });
  }
  EXPECT_EQ(entries(parent.path()), std::vector<std::string>{"out"});
  EXPECT_EQ(entries(out), (std::vector<std::string>{"a", "sub"}));
  EXPECT_EQ(test::read_file(out / "a"), "new a");
  EXPECT_EQ(test::read_file(out / "sub" / "c"), "old c");
  {
    AtomicDir d(out);
    write_file_atomically(d / "z", "z");
    d.commit();  // no keep: the new folder is only what this run wrote
  }
  EXPECT_EQ(entries(out), std::vector<std::string>{"z"});
  EXPECT_EQ(entries(parent.path()), std::vector<std::string>{"out"});
}

TEST(AtomicDir, RefusesAFileInThePlaceOfTheFolder) {
  test::TempDir parent;
  test::write_file(parent / "out", "a file");
  try {
    AtomicDir d(parent / "out");
    FAIL() << "a file was taken for a folder";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("exists and is not a folder"), std::string::npos)
        << e.what();
  }
  EXPECT_EQ(test::read_file(parent / "out"), "a file");
}

}  // namespace
}  // namespace molt
