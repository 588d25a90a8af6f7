// Reading one .safetensors file: mmap it, validate every header field, hand out zero-copy views.
#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <bit>
#include <cerrno>
#include <cstdint>
#include <cstring>
#include <nlohmann/json.hpp>
#include <set>

#include "molt/common/error.h"
#include "molt/formats/hf_config.h"
#include "molt/formats/safetensors.h"

namespace molt {

static_assert(std::endian::native == std::endian::little, "safetensors is little-endian");

namespace {

// Larger headers are almost certainly corrupt; the reference implementation uses the same cap.
constexpr uint64_t kMaxHeaderBytes = 100'000'000;

// Closes the descriptor on every path out of open().
struct FdCloser {
  int fd;
  ~FdCloser() {
    if (fd >= 0) ::close(fd);
  }
};

// Unmaps unless ownership was handed over (open() can still throw after mmap).
struct MapGuard {
  void* addr;
  size_t size;
  ~MapGuard() {
    if (addr != nullptr) ::munmap(addr, size);
  }
};

// Parses the header, noting top-level keys that appear twice (nlohmann keeps only the last).
nlohmann::json parse_header(const std::string& file, const char* begin, size_t n,
                            std::string* duplicate) {
  std::set<std::string> seen;
  auto cb = [&](int depth, nlohmann::json::parse_event_t ev, nlohmann::json& parsed) {
    if (depth >= kMaxJsonDepth && (ev == nlohmann::json::parse_event_t::object_start ||
                                   ev == nlohmann::json::parse_event_t::array_start)) {
      fail("{}: safetensors header nests deeper than {} levels", file, kMaxJsonDepth);
    }
    if (depth == 1 && ev == nlohmann::json::parse_event_t::key && duplicate->empty()) {
      const auto& k = parsed.get_ref<const std::string&>();
      if (!seen.insert(k).second) *duplicate = k;
    }
    return true;
  };
  try {
    return nlohmann::json::parse(begin, begin + n, cb);
  } catch (const nlohmann::json::parse_error& e) {
    fail("{}: safetensors header JSON is malformed at byte {} of the header: {}", file, e.byte,
         e.what());
  } catch (const nlohmann::json::exception& e) {  // e.g. out_of_range: a number like 1e400
    fail("{}: safetensors header JSON is malformed: {}", file, e.what());
  }
}

int64_t checked_numel(const std::string& file, const std::string& name,
                      const std::vector<int64_t>& shape) {
  int64_t n = 1;
  for (int64_t d : shape) {
    if (__builtin_mul_overflow(n, d, &n)) {
      fail("{}: tensor '{}': shape overflows 64-bit element count", file, name);
    }
  }
  return n;
}

TensorView parse_entry(const std::string& file, const std::string& name, const nlohmann::json& e,
                       uint64_t data_size, uint64_t* begin_out) {
  if (!e.is_object()) {
    fail(
        "{}: tensor '{}': header entry is a {}, expected an object with dtype, shape, "
        "data_offsets",
        file, name, e.type_name());
  }
  for (const char* field : {"dtype", "shape", "data_offsets"}) {
    if (!e.contains(field)) fail("{}: tensor '{}': missing field '{}'", file, name, field);
  }
  TensorView t;
  t.name = name;

  const auto& dt = e["dtype"];
  if (!dt.is_string()) {
    fail("{}: tensor '{}': field 'dtype' is a {}, expected a string", file, name, dt.type_name());
  }
  const auto& dts = dt.get_ref<const std::string&>();
  if (!parse_dtype(dts, &t.dtype)) {
    fail("{}: tensor '{}': unknown dtype '{}' (known: F32 F16 BF16 I8 U8 I32 U32 I64)", file, name,
         dts);
  }

  const auto& sh = e["shape"];
  if (!sh.is_array()) {
    fail("{}: tensor '{}': field 'shape' is a {}, expected an array of integers", file, name,
         sh.type_name());
  }
  for (size_t i = 0; i < sh.size(); ++i) {
    const auto& d = sh[i];
    if (!d.is_number_integer()) {
      fail("{}: tensor '{}': field 'shape' dimension {} is {}, expected an integer", file, name, i,
           d.dump());
    }
    if (d.is_number_unsigned() && d.get<uint64_t>() > static_cast<uint64_t>(INT64_MAX)) {
      fail("{}: tensor '{}': field 'shape' dimension {} is too large ({})", file, name, i,
           d.dump());
    }
    int64_t v = d.get<int64_t>();
    if (v < 0)
      fail("{}: tensor '{}': field 'shape' dimension {} is negative ({})", file, name, i, v);
    t.shape.push_back(v);
  }

  const auto& off = e["data_offsets"];
  if (!off.is_array() || off.size() != 2 || !off[0].is_number_unsigned() ||
      !off[1].is_number_unsigned()) {
    fail(
        "{}: tensor '{}': field 'data_offsets' is {}, expected two non-negative integers "
        "[begin, end]",
        file, name, off.dump());
  }
  uint64_t b = off[0].get<uint64_t>(), en = off[1].get<uint64_t>();
  if (en < b) {
    fail("{}: tensor '{}': field 'data_offsets' [{}, {}] decreases (end before begin)", file, name,
         b, en);
  }
  if (en > data_size) {
    fail("{}: tensor '{}': field 'data_offsets' [{}, {}] runs past the data block ({} bytes)", file,
         name, b, en, data_size);
  }
  int64_t numel = checked_numel(file, name, t.shape);
  uint64_t want;
  if (__builtin_mul_overflow(static_cast<uint64_t>(numel), dtype_size(t.dtype), &want) ||
      want != en - b) {
    fail(
        "{}: tensor '{}': data_offsets [{}, {}] hold {} bytes but shape {} of {} needs {} × {} "
        "bytes",
        file, name, b, en, en - b, sh.dump(), dts, numel, dtype_size(t.dtype));
  }
  t.nbytes = static_cast<size_t>(en - b);
  *begin_out = b;
  return t;
}

// Maps the file read-only at a 2 MiB-aligned address and asks for huge pages. Where the page
// cache holds the file in 2 MiB folios (Linux 6.x filesystems with large folios, e.g. ext4 since
// 6.16, fill them on the first read through a mapping advised this way), each 2 MiB of weights
// then takes one TLB entry instead of 512: decode reads ~5% faster (paired A/B, 0.5B bf16).
// Elsewhere the advice is ignored and the mapping behaves as a plain one.
void* map_huge_aligned(int fd, size_t size) {
  constexpr size_t kHuge = size_t{2} << 20;
  if (size < kHuge) return ::mmap(nullptr, size, PROT_READ, MAP_PRIVATE, fd, 0);
  // Reserve size + 2 MiB of address space, map the file over its aligned part, and give back
  // the slack on either side.
  void* r =
      ::mmap(nullptr, size + kHuge, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
  if (r == MAP_FAILED) return r;
  char* lo = static_cast<char*>(r);
  char* hi = lo + size + kHuge;
  char* at = lo + (kHuge - reinterpret_cast<uintptr_t>(lo) % kHuge) % kHuge;
  void* map = ::mmap(at, size, PROT_READ, MAP_PRIVATE | MAP_FIXED, fd, 0);
  if (map == MAP_FAILED) {
    ::munmap(r, size + kHuge);
    return map;
  }
  if (at > lo) ::munmap(lo, static_cast<size_t>(at - lo));
  const auto page = static_cast<size_t>(sysconf(_SC_PAGESIZE));
  char* end = at + (size + page - 1) / page * page;
  if (hi > end) ::munmap(end, static_cast<size_t>(hi - end));
  ::madvise(map, size, MADV_HUGEPAGE);  // best effort: EINVAL without THP support
  return map;
}

}  // namespace

int64_t TensorView::numel() const {
  int64_t n = 1;
  for (int64_t d : shape) n *= d;
  return n;
}

std::string TensorView::shape_str() const {
  std::string s = "[";
  for (size_t i = 0; i < shape.size(); ++i) {
    if (i) s += ", ";
    s += std::to_string(shape[i]);
  }
  return s + "]";
}

std::unique_ptr<SafetensorsFile> SafetensorsFile::open(const std::filesystem::path& path) {
  const std::string file = path.string();
  int fd = ::open(file.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) fail("{}: cannot open safetensors file: {}", file, std::strerror(errno));
  FdCloser closer{fd};
  struct stat st {};
  if (::fstat(fd, &st) != 0) fail("{}: cannot stat: {}", file, std::strerror(errno));
  if (!S_ISREG(st.st_mode)) fail("{}: not a regular file", file);
  const size_t size = static_cast<size_t>(st.st_size);
  if (size < 8) {
    fail("{}: file is {} bytes, shorter than the 8-byte safetensors header length", file, size);
  }
  void* map = map_huge_aligned(fd, size);
  if (map == MAP_FAILED) {
    fail("{}: mmap failed ({:.1f} MiB): {}", file, static_cast<double>(size) / (1 << 20),
         std::strerror(errno));
  }
  MapGuard guard{map, size};
  const char* base = static_cast<const char*>(map);

  uint64_t n;
  std::memcpy(&n, base, 8);
  if (n == 0) fail("{}: safetensors header length is 0", file);
  if (n > kMaxHeaderBytes) {
    fail("{}: safetensors header length {} exceeds the {} byte limit", file, n, kMaxHeaderBytes);
  }
  if (n > size - 8) {
    fail("{}: safetensors header length {} runs past the end of the file ({} bytes)", file, n,
         size);
  }
  std::string duplicate;
  nlohmann::json header = parse_header(file, base + 8, n, &duplicate);
  if (!header.is_object()) {
    fail("{}: safetensors header is a JSON {}, expected an object", file, header.type_name());
  }
  if (!duplicate.empty()) fail("{}: tensor '{}' appears twice in the header", file, duplicate);

  auto f = std::unique_ptr<SafetensorsFile>(new SafetensorsFile());
  f->path_ = path;
  const uint64_t data_size = size - 8 - n;
  const std::byte* data = reinterpret_cast<const std::byte*>(base + 8 + n);
  std::vector<std::pair<uint64_t, size_t>> begins;  // (begin offset, index into tensors_)
  for (const auto& [key, value] : header.items()) {
    if (key == "__metadata__") {
      if (!value.is_object()) {
        fail("{}: __metadata__ is a {}, expected an object of strings", file, value.type_name());
      }
      for (const auto& [mk, mv] : value.items()) {
        if (!mv.is_string()) {
          fail("{}: __metadata__ field '{}' is a {}, expected a string", file, mk, mv.type_name());
        }
        f->metadata_[mk] = mv.get<std::string>();
      }
      continue;
    }
    uint64_t begin = 0;
    TensorView t = parse_entry(file, key, value, data_size, &begin);
    t.data = data + begin;
    begins.emplace_back(begin, f->tensors_.size());
    f->tensors_.push_back(std::move(t));
  }

  // Overlap check: sorted by begin, each tensor must end before the next starts.
  std::sort(begins.begin(), begins.end());
  for (size_t i = 1; i < begins.size(); ++i) {
    const TensorView& prev = f->tensors_[begins[i - 1].second];
    const TensorView& cur = f->tensors_[begins[i].second];
    if (begins[i - 1].first + prev.nbytes > begins[i].first) {
      fail("{}: tensors '{}' [{}, {}) and '{}' [{}, {}) overlap", file, prev.name,
           begins[i - 1].first, begins[i - 1].first + prev.nbytes, cur.name, begins[i].first,
           begins[i].first + cur.nbytes);
    }
  }

  f->map_ = map;
  f->size_ = size;
  guard.addr = nullptr;
  return f;
}

SafetensorsFile::~SafetensorsFile() {
  if (map_ != nullptr) ::munmap(map_, size_);
}

const TensorView* SafetensorsFile::find(const std::string& name) const {
  // Header keys arrive sorted (nlohmann::json is ordered by key), so binary search works.
  auto it = std::lower_bound(tensors_.begin(), tensors_.end(), name,
                             [](const TensorView& t, const std::string& n) { return t.name < n; });
  return it != tensors_.end() && it->name == name ? &*it : nullptr;
}

void SafetensorsFile::release_pages() const {
  if (map_ != nullptr) ::madvise(map_, size_, MADV_DONTNEED);
}

void SafetensorsFile::release_range(const void* p, size_t n) const {
  const auto base = reinterpret_cast<uintptr_t>(map_), at = reinterpret_cast<uintptr_t>(p);
  if (map_ == nullptr || at < base || at + n > base + size_) return;
  const auto page = static_cast<uintptr_t>(sysconf(_SC_PAGESIZE));
  const uintptr_t first = (at + page - 1) / page * page, last = (at + n) / page * page;
  if (last > first)
    ::madvise(static_cast<char*>(map_) + (first - base), last - first, MADV_DONTNEED);
}

}  // namespace molt
