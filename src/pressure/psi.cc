// Pressure stall information: /proc/pressure/memory averages and poll() triggers
// (Documentation/accounting/psi.rst).
#include <fcntl.h>
#include <linux/magic.h>
#include <poll.h>
#include <sys/vfs.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <fstream>
#include <sstream>

#include "molt/common/error.h"
#include "molt/pressure/live.h"

namespace molt {

PsiMemory parse_psi(const std::string& text, const std::string& source) {
  PsiMemory m;
  bool some = false;
  std::istringstream in(text);
  std::string line;
  while (std::getline(in, line)) {
    std::istringstream ls(line);
    std::string kind;
    ls >> kind;
    if (kind != "some" && kind != "full") continue;
    PsiLine p;
    std::string item;
    int seen = 0;
    while (ls >> item) {
      const size_t eq = item.find('=');
      if (eq == std::string::npos) fail("{}: '{}' is not key=value", source, item);
      const std::string key = item.substr(0, eq), value = item.substr(eq + 1);
      try {
        if (key == "avg10") p.avg10 = std::stod(value), ++seen;
        if (key == "avg60") p.avg60 = std::stod(value), ++seen;
        if (key == "avg300") p.avg300 = std::stod(value), ++seen;
        if (key == "total") p.total_us = std::stoull(value), ++seen;
      } catch (const std::exception&) {
        fail("{}: {} line: '{}' is not a number", source, kind, item);
      }
    }
    if (seen != 4) fail("{}: {} line lacks avg10/avg60/avg300/total", source, kind);
    (kind == "some" ? m.some : m.full) = p;
    some = some || kind == "some";
  }
  if (!some) fail("{}: no 'some' line", source);
  return m;
}

std::optional<PsiMemory> read_psi_memory(std::string* why_not, const std::filesystem::path& root) {
  const std::filesystem::path path = root / "proc/pressure/memory";
  std::ifstream f(path);
  if (!f) {
    if (why_not) {
      *why_not = fmt::format("{} is absent (kernel without CONFIG_PSI, or psi=0)", path.string());
    }
    return std::nullopt;
  }
  std::stringstream ss;
  ss << f.rdbuf();
  return parse_psi(ss.str(), path.string());
}

std::unique_ptr<PsiTrigger> PsiTrigger::open(uint64_t stall_us, uint64_t window_us,
                                             std::string* why_not,
                                             const std::filesystem::path& root) {
  const std::filesystem::path path = root / "proc/pressure/memory";
  const auto say = [&](std::string why) {
    if (why_not) *why_not = std::move(why);
    return nullptr;
  };
  // Writing the trigger spec into a plain file (a fake tree) would overwrite its content, and
  // poll() on it never reports POLLPRI: only procfs carries triggers.
  struct statfs sfs {};
  if (::statfs(path.c_str(), &sfs) != 0)
    return say(fmt::format("cannot statfs {}: {}", path.string(), std::strerror(errno)));
  if (sfs.f_type != PROC_SUPER_MAGIC)
    return say(fmt::format("{} is not on procfs, so it cannot carry a trigger", path.string()));
  const int fd = ::open(path.c_str(), O_RDWR | O_NONBLOCK | O_CLOEXEC);
  if (fd < 0)
    return say(
        fmt::format("cannot open {} for a trigger: {}", path.string(), std::strerror(errno)));
  const std::string spec = fmt::format("some {} {}", stall_us, window_us);
  if (::write(fd, spec.c_str(), spec.size() + 1) < 0) {
    const int err = errno;
    ::close(fd);
    return say(fmt::format("the kernel refused PSI trigger '{}': {}", spec, std::strerror(err)));
  }
  return std::unique_ptr<PsiTrigger>(new PsiTrigger(fd));
}

PsiTrigger::~PsiTrigger() {
  if (fd_ >= 0) ::close(fd_);
}

bool PsiTrigger::fired(int timeout_ms) {
  pollfd p{fd_, POLLPRI, 0};
  const int n = ::poll(&p, 1, timeout_ms);
  return n > 0 && (p.revents & POLLPRI) != 0;
}

}  // namespace molt
