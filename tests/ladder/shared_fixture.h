// Test fixtures built once per build of a test binary and shared by its test processes.
#pragma once

#include <fcntl.h>
#include <sys/file.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <functional>
#include <string>

namespace molt::test {

// ctest runs every test in its own process: the ladder and its maps are built once per build of
// the test binary, under <build>/test-fixtures/, and reused (built in a scratch folder and
// renamed into place, so concurrent test processes never see half of it). One process builds
// it while the others wait on a lock: under qemu a build takes minutes of emulated floats, and
// ctest -j starts a binary's first tests together.
inline std::filesystem::path shared_fixture(
    const std::string& name, const std::function<void(const std::filesystem::path&)>& build) {
  namespace fs = std::filesystem;
  const fs::path root = fs::path(MOLT_BINARY).parent_path() / "test-fixtures";
  const auto stamp = fs::last_write_time("/proc/self/exe").time_since_epoch().count();
  // Named by the binary too: two test binaries (runtime, scheduler) share a fixture name, and
  // each would take the other's folder, built at another stamp, for an older build's and
  // remove it while the other's tests were loading from it.
  const std::string prefix =
      name + "-" + fs::read_symlink("/proc/self/exe").filename().string() + "-";
  const fs::path dir = root / (prefix + std::to_string(stamp));
  if (fs::exists(dir / "ready")) return dir;
  fs::create_directories(root);
  struct Lock {
    int fd;
    explicit Lock(const fs::path& p) : fd(::open(p.c_str(), O_CREAT | O_RDWR | O_CLOEXEC, 0644)) {
      if (fd >= 0) ::flock(fd, LOCK_EX);  // without a lock file, concurrent builds stay safe
    }
    ~Lock() {
      if (fd >= 0) ::close(fd);
    }
    Lock(const Lock&) = delete;
    Lock& operator=(const Lock&) = delete;
  } lock(root / (prefix + "lock"));
  if (fs::exists(dir / "ready")) return dir;  // built while this process waited
  std::error_code ec;
  for (const auto& e : fs::directory_iterator(root, ec)) {  // this binary's older builds
    const std::string n = e.path().filename().string();
    if (n.rfind(prefix, 0) == 0 && e.path() != dir && n.find(".tmp") == std::string::npos &&
        n != prefix + "lock")
      fs::remove_all(e.path(), ec);
  }
  const fs::path tmp =
      root / (prefix + std::to_string(stamp) + ".tmp" + std::to_string(::getpid()));
  fs::remove_all(tmp, ec);
  fs::create_directories(tmp);
  build(tmp);
  std::ofstream(tmp / "ready") << "ok\n";
  fs::rename(tmp, dir, ec);
  if (ec) fs::remove_all(tmp, ec);  // another process got there first
  return dir;
}

}  // namespace molt::test
