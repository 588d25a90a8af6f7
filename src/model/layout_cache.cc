#include "molt/model/layout_cache.h"

#include <sys/stat.h>
#include <unistd.h>

#include <chrono>
#include <cstdint>
#include <cstdlib>
#include <exception>
#include <nlohmann/json.hpp>

#include "molt/common/error.h"
#include "molt/formats/atomic_file.h"
#include "molt/formats/hf_config.h"
#include "molt/formats/safetensors.h"
#include "molt/model/quantize.h"

namespace molt {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;

// Bumped whenever the rows8 files molt writes change, so older copies are made again.
constexpr int kLayoutVersion = 1;
constexpr const char* kStamp = "molt-source.json";

bool is_weight_file(const std::string& name) {
  return name == "config.json" || name == "model.safetensors.index.json" ||
         (name.size() > 12 && name.ends_with(".safetensors"));
}

// What the copy was made from: each config and weight file's size, times and inode.
json source_stamp(const fs::path& checkpoint) {
  json files = json::object();
  for (const auto& e : fs::directory_iterator(checkpoint)) {
    const std::string name = e.path().filename().string();
    struct stat st {};
    if (!is_weight_file(name) || ::stat(e.path().c_str(), &st) != 0 || !S_ISREG(st.st_mode)) {
      continue;
    }
    // ctime and the inode too: a file rewritten with its mtime set back (cp -p, rsync -t) still
    // changes them, so a same-size replacement is never read through an old copy.
    auto ns = [](const timespec& t) {
      return static_cast<int64_t>(t.tv_sec) * 1000000000 + static_cast<int64_t>(t.tv_nsec);
    };
    files[name] = {{"bytes", static_cast<int64_t>(st.st_size)},
                   {"mtime_ns", ns(st.st_mtim)},
                   {"ctime_ns", ns(st.st_ctim)},
                   {"inode", static_cast<uint64_t>(st.st_ino)}};
  }
  return {{"layout", "rows8"},
          {"version", kLayoutVersion},
          {"source", fs::absolute(checkpoint).lexically_normal().string()},
          {"files", files}};
}

// Whether `cache` holds a complete copy made from the files `want` describes: the stamp (written
// last) matches and the copy's safetensors open (a truncated file fails its header check).
bool current(const fs::path& cache, const json& want) {
  std::error_code ec;
  if (!fs::is_regular_file(cache / kStamp, ec)) return false;
  try {
    const json have = read_json_file(cache / kStamp);
    if (have.value("version", 0) != want["version"] ||
        have.value("files", json()) != want["files"]) {
      return false;
    }
    const ModelConfig c = load_model_config(cache);
    if (!c.quantization || c.quantization->layout != "rows8") return false;
    (void)WeightStore::open_dir(cache);
    return true;
  } catch (const std::exception&) {
    return false;
  }
}

// Makes the copy at `cache`; on failure returns false with the reason.
bool make_copy(const fs::path& checkpoint, const fs::path& cache, const json& stamp,
               std::string& why) {
  try {
    QuantizeOptions o;
    o.interleave = true;
    quantize_checkpoint(checkpoint, cache, o);
    write_file_atomically(cache / kStamp, stamp.dump(2) + "\n");
    return true;
  } catch (const std::exception& e) {
    why = e.what();
    return false;
  }
}

// FNV-1a: a stable name for a path (std::hash may differ between builds).
uint64_t fnv1a(const std::string& s) {
  uint64_t h = 14695981039346656037ull;
  for (const char ch : s) {
    h ^= static_cast<unsigned char>(ch);
    h *= 1099511628211ull;
  }
  return h;
}

}  // namespace

fs::path user_layout_cache_dir(const fs::path& checkpoint) {
  fs::path root;
  if (const char* d = std::getenv("MOLT_CACHE_DIR"); d != nullptr && *d != '\0') {
    root = d;
  } else if (const char* x = std::getenv("XDG_CACHE_HOME"); x != nullptr && *x != '\0') {
    root = fs::path(x) / "molt";
  } else if (const char* h = std::getenv("HOME"); h != nullptr && *h != '\0') {
    root = fs::path(h) / ".cache" / "molt";
  } else {
    return {};
  }
  std::error_code ec;
  fs::path canon = fs::weakly_canonical(fs::absolute(checkpoint), ec);
  if (ec) canon = fs::absolute(checkpoint);
  return root / "rows8" / fmt::format("{:016x}", fnv1a(canon.string()));
}

LayoutCacheResult rows8_layout_cache(const fs::path& checkpoint) {
  using clock = std::chrono::steady_clock;
  json stamp;
  try {
    stamp = source_stamp(checkpoint);
  } catch (const std::exception& e) {
    return {checkpoint, false,
            fmt::format("weights: as stored (cannot list {}: {})", checkpoint.string(), e.what())};
  }
  const fs::path beside = checkpoint / ".molt-cache" / "rows8";
  const fs::path user = user_layout_cache_dir(checkpoint);
  for (const fs::path& c : {beside, user}) {
    if (!c.empty() && current(c, stamp)) {
      return {c, true, fmt::format("weights: rows8 copy {}", c.string())};
    }
  }
  std::string why_beside, why_user = "no cache folder ($MOLT_CACHE_DIR, $XDG_CACHE_HOME, $HOME)";
  for (const fs::path& c : {beside, user}) {
    if (c.empty()) continue;
    const auto t0 = clock::now();
    std::string& why = c == beside ? why_beside : why_user;
    if (make_copy(checkpoint, c, stamp, why)) {
      const double s = std::chrono::duration<double>(clock::now() - t0).count();
      return {c, true, fmt::format("weights: rows8 copy {} (made now, {:.1f} s)", c.string(), s)};
    }
  }
  return {checkpoint, false,
          fmt::format("weights: as stored (no rows8 copy: beside it: {}; user cache: {})",
                      why_beside, why_user)};
}

}  // namespace molt
