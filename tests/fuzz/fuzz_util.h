// Shared helpers of the libFuzzer harnesses (tests/fuzz/*_fuzz.cc).
//
// Each harness feeds one input to one parser and lets nothing but molt::Error pass quietly:
// any other exception (a nlohmann::json exception, std::filesystem_error, std::bad_alloc ...)
// escapes LLVMFuzzerTestOneInput, and libFuzzer reports it as a crash. So do ASan / UBSan
// findings, leaks, allocations over -malloc_limit_mb and inputs slower than -timeout.
#pragma once

#include <stdlib.h>
#include <unistd.h>

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>
#include <string_view>

#include "molt/common/error.h"

namespace molt::fuzz {

// A folder of this process's own (under /dev/shm when there is one, so inputs written as files
// cost no disk I/O), removed at exit.
inline const std::filesystem::path& scratch_dir() {
  // Never destroyed: the atexit handler below runs after static destructors would have.
  static const std::filesystem::path* dir = [] {
    std::string tmpl = std::filesystem::is_directory("/dev/shm") ? "/dev/shm/molt-fuzz-XXXXXX"
                                                                 : "/tmp/molt-fuzz-XXXXXX";
    if (::mkdtemp(tmpl.data()) == nullptr) {
      std::perror("mkdtemp");
      std::abort();
    }
    auto* p = new std::filesystem::path(tmpl);
    std::atexit([] {
      std::error_code ec;
      std::filesystem::remove_all(scratch_dir(), ec);
    });
    return p;
  }();
  return *dir;
}

// A sub-folder of scratch_dir(), created.
inline std::filesystem::path scratch_subdir(const std::string& name) {
  const std::filesystem::path p = scratch_dir() / name;
  std::filesystem::create_directories(p);
  return p;
}

inline void write_file(const std::filesystem::path& path, std::string_view bytes) {
  std::ofstream f(path, std::ios::binary | std::ios::trunc);
  f.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
  if (!f) {
    std::fprintf(stderr, "cannot write %s\n", path.c_str());
    std::abort();
  }
}

inline std::string_view as_text(const uint8_t* data, size_t size) {
  return {reinterpret_cast<const char*>(data), size};
}

// The input split at the first `separator` (dict entries name it); `second` is empty and
// `found` false when the separator is absent.
struct Split {
  std::string_view first, second;
  bool found = false;
};
inline Split split_at(std::string_view text, std::string_view separator) {
  const size_t at = text.find(separator);
  if (at == std::string_view::npos) return {text, {}, false};
  return {text.substr(0, at), text.substr(at + separator.size()), true};
}

// Runs `f`; molt::Error is the documented way to refuse an input, everything else escapes.
template <typename F>
int guarded(F&& f) {
  try {
    f();
  } catch (const molt::Error& e) {
    if (std::getenv("MOLT_FUZZ_VERBOSE") != nullptr) std::fprintf(stderr, "Error: %s\n", e.what());
  }
  return 0;
}

// A property the parser promises was broken: report and crash so libFuzzer keeps the input.
#define MOLT_FUZZ_CHECK(cond, ...)                          \
  do {                                                      \
    if (!(cond)) {                                          \
      std::fprintf(stderr, "property failed: %s: ", #cond); \
      std::fprintf(stderr, __VA_ARGS__);                    \
      std::fprintf(stderr, "\n");                           \
      std::abort();                                         \
    }                                                       \
  } while (0)

}  // namespace molt::fuzz
