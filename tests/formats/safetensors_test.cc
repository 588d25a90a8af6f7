// safetensors round trips, layout, zero-copy views and page release.
#include "molt/formats/safetensors.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <nlohmann/json.hpp>
#include <numeric>
#include <sstream>

#include "molt/common/error.h"
#include "test_util.h"

namespace molt {
namespace {

using test::TempDir;

template <typename T>
std::span<const std::byte> bytes_of(const std::vector<T>& v) {
  return std::as_bytes(std::span<const T>(v));
}

// One tensor of each dtype the brief names, with odd sizes so padding is exercised.
struct Sample {
  std::vector<float> f32 = {1.5f, -2.25f, 3.0f, 0.0f, 1e-8f, -7.0f};
  std::vector<uint16_t> f16, bf16;
  std::vector<int8_t> i8 = {-128, -1, 0, 1, 127};
  std::vector<uint32_t> u32 = {0u, 1u, 0xdeadbeefu};
  Sample() {
    for (float x : f32) f16.push_back(f32_to_f16(x)), bf16.push_back(f32_to_bf16(x));
    f16.push_back(f32_to_f16(0.5f));  // 7 elements: 14 bytes, not a multiple of 8
  }
  std::vector<TensorToWrite> tensors() const {
    return {
        {"z.f32", DType::F32, {2, 3}, bytes_of(f32)},    {"a.f16", DType::F16, {7}, bytes_of(f16)},
        {"m.bf16", DType::BF16, {3, 2}, bytes_of(bf16)}, {"b.i8", DType::I8, {5}, bytes_of(i8)},
        {"c.u32", DType::U32, {1, 3}, bytes_of(u32)},    {"empty", DType::F32, {0, 4}, {}}};
  }
};

void expect_same(const TensorToWrite& w, const TensorView& v) {
  EXPECT_EQ(v.name, w.name);
  EXPECT_EQ(v.dtype, w.dtype);
  EXPECT_EQ(v.shape, w.shape);
  ASSERT_EQ(v.nbytes, w.bytes.size()) << w.name;
  if (v.nbytes == 0) return;  // memcmp on a null span is UB even for 0 bytes
  EXPECT_EQ(0, std::memcmp(v.data, w.bytes.data(), v.nbytes)) << w.name;
}

TEST(Safetensors, RoundTripEveryDtypeWithMetadata) {
  TempDir tmp;
  Sample s;
  std::map<std::string, std::string> meta = {{"format", "pt"}, {"method", "ridge λ=0.01"}};
  write_safetensors(tmp / "x.safetensors", s.tensors(), meta);
  auto f = SafetensorsFile::open(tmp / "x.safetensors");
  EXPECT_EQ(f->metadata(), meta);
  ASSERT_EQ(f->tensors().size(), 6u);
  for (const auto& w : s.tensors()) {
    const TensorView* v = f->find(w.name);
    ASSERT_NE(v, nullptr) << w.name;
    expect_same(w, *v);
  }
  EXPECT_EQ(f->find("nope"), nullptr);
  const TensorView* m = f->find("m.bf16");
  EXPECT_EQ(m->numel(), 6);
  EXPECT_EQ(m->shape_str(), "[3, 2]");
  EXPECT_EQ(f->find("empty")->numel(), 0);
  EXPECT_FALSE(std::filesystem::exists(tmp / "x.safetensors.tmp"));
}

TEST(Safetensors, LayoutSortedAlignedAndPadded) {
  TempDir tmp;
  Sample s;
  write_safetensors(tmp / "x.safetensors", s.tensors(), {{"k", "v"}});
  std::string raw = test::read_file(tmp / "x.safetensors");
  uint64_t n;
  std::memcpy(&n, raw.data(), 8);
  // The data block starts at a cache line (64-byte loads of the decode kernels split none).
  EXPECT_EQ((8 + n) % 64, 0u);
  std::string header = raw.substr(8, n);
  EXPECT_EQ(header.find_last_not_of(' ') + 1, nlohmann::json::parse(header).dump().size());
  auto j = nlohmann::json::parse(header);
  // Larger elements first, then by name; back to back with no gaps (as the reference Rust
  // writer lays files out, whose loader rejects gaps); each tensor element-aligned.
  struct Entry {
    size_t elem;
    std::string name;
    uint64_t begin, end;
  };
  std::vector<Entry> entries;
  for (const auto& [name, e] : j.items()) {
    if (name == "__metadata__") continue;
    DType t{};
    ASSERT_TRUE(parse_dtype(e["dtype"].get<std::string>(), &t));
    entries.push_back({dtype_size(t), name, e["data_offsets"][0], e["data_offsets"][1]});
  }
  std::sort(entries.begin(), entries.end(),
            [](const Entry& a, const Entry& b) { return a.begin < b.begin; });
  uint64_t expect_begin = 0;
  for (size_t i = 0; i < entries.size(); ++i) {
    EXPECT_EQ(entries[i].begin, expect_begin) << entries[i].name << ": gap or overlap";
    EXPECT_EQ(entries[i].begin % entries[i].elem, 0u) << entries[i].name;
    if (i > 0) {
      const Entry& p = entries[i - 1];
      EXPECT_TRUE(p.elem > entries[i].elem ||
                  (p.elem == entries[i].elem && p.name < entries[i].name))
          << p.name << " before " << entries[i].name;
    }
    expect_begin = entries[i].end;
  }
  // Every view is element-aligned in memory too (the mapping is page aligned), and one at a
  // multiple of 64 bytes into the data block is at a cache line.
  auto f = SafetensorsFile::open(tmp / "x.safetensors");
  for (const auto& t : f->tensors()) {
    EXPECT_EQ(reinterpret_cast<uintptr_t>(t.data) % dtype_size(t.dtype), 0u) << t.name;
    const auto e = std::find_if(entries.begin(), entries.end(),
                                [&](const Entry& x) { return x.name == t.name; });
    ASSERT_NE(e, entries.end());
    if (e->begin % 64 == 0) {
      EXPECT_EQ(reinterpret_cast<uintptr_t>(t.data) % 64, 0u) << t.name;
    }
  }
}

// The process mapping of `file` from /proc/self/smaps: address range and resident kB.
struct Mapping {
  uintptr_t begin = 0, end = 0;
  long rss_kb = -1;
  std::string flags;  // VmFlags: "hg" = advised for huge pages
};
Mapping find_mapping(const std::filesystem::path& file) {
  std::ifstream in("/proc/self/smaps");
  std::string line, want = std::filesystem::canonical(file).string();
  Mapping m;
  bool inside = false;
  while (std::getline(in, line)) {
    unsigned long lo, hi;
    char dash;
    std::istringstream ls(line);
    if (line.find("-") != std::string::npos && (ls >> std::hex >> lo >> dash >> hi) &&
        dash == '-') {
      inside = line.size() >= want.size() &&
               line.compare(line.size() - want.size(), want.size(), want) == 0;
      if (inside) m.begin = lo, m.end = hi;
    } else if (inside && line.rfind("Rss:", 0) == 0) {
      m.rss_kb = std::stol(line.substr(4));
    } else if (inside && line.rfind("VmFlags:", 0) == 0) {
      m.flags = line.substr(8);
    }
  }
  return m;
}

TEST(Safetensors, ViewsAreZeroCopyIntoTheMapping) {
  TempDir tmp;
  Sample s;
  write_safetensors(tmp / "x.safetensors", s.tensors());
  auto f = SafetensorsFile::open(tmp / "x.safetensors");
  Mapping m = find_mapping(tmp / "x.safetensors");
  ASSERT_NE(m.begin, 0u) << "no mapping of the file in /proc/self/smaps";
  EXPECT_GE(m.end - m.begin, f->file_size());
  for (const auto& t : f->tensors()) {
    auto p = reinterpret_cast<uintptr_t>(t.data);
    EXPECT_GE(p, m.begin) << t.name;
    EXPECT_LE(p + t.nbytes, m.begin + f->file_size()) << t.name;
  }
  f.reset();  // the destructor unmaps
  EXPECT_EQ(find_mapping(tmp / "x.safetensors").begin, 0u);
}

TEST(Safetensors, ReleasePagesDropsResidencyKeepsViewsValid) {
  TempDir tmp;
  std::vector<float> big(1 << 20);  // 4 MiB
  std::iota(big.begin(), big.end(), 0.0f);
  write_safetensors(tmp / "x.safetensors", {{"w", DType::F32, {1024, 1024}, bytes_of(big)}});
  auto f = SafetensorsFile::open(tmp / "x.safetensors");
  const auto& v = *f->find("w");
  auto at = [&](size_t i) {
    float x;
    std::memcpy(&x, v.data + 4 * i, 4);
    return x;
  };
  double sum = 0;
  for (size_t i = 0; i < big.size(); i += 256) sum += at(i);  // touch every page
  EXPECT_GT(sum, 0);
  EXPECT_GE(find_mapping(tmp / "x.safetensors").rss_kb, 4000);
  f->release_pages();
  EXPECT_LT(find_mapping(tmp / "x.safetensors").rss_kb, 100);
  EXPECT_EQ(at(12345), 12345.0f);  // re-read from the file on touch
  EXPECT_EQ(at(big.size() - 1), static_cast<float>(big.size() - 1));
}

// A range (one tensor copied out at load) drops only its own whole pages: the rest stays
// resident, and everything still reads back.
TEST(Safetensors, ReleaseRangeDropsOnlyThoseWholePages) {
  TempDir tmp;
  std::vector<float> big(1 << 20);  // 4 MiB
  std::iota(big.begin(), big.end(), 0.0f);
  write_safetensors(tmp / "x.safetensors", {{"w", DType::F32, {1024, 1024}, bytes_of(big)}});
  auto f = SafetensorsFile::open(tmp / "x.safetensors");
  const auto& v = *f->find("w");
  auto at = [&](size_t i) {
    float x;
    std::memcpy(&x, v.data + 4 * i, 4);
    return x;
  };
  double sum = 0;
  for (size_t i = 0; i < big.size(); i += 256) sum += at(i);
  EXPECT_GT(sum, 0);
  EXPECT_GE(find_mapping(tmp / "x.safetensors").rss_kb, 4000);
  f->release_range(v.data + 100, v.nbytes / 2);  // the first half, less a partial first page
  const size_t rss = find_mapping(tmp / "x.safetensors").rss_kb;
  EXPECT_LT(rss, 2200);
  EXPECT_GT(rss, 1900);
  int outside = 0;
  f->release_range(&outside, sizeof outside);  // not in the mapping: nothing happens
  EXPECT_EQ(find_mapping(tmp / "x.safetensors").rss_kb, rss);
  EXPECT_EQ(at(12345), 12345.0f);
  EXPECT_EQ(at(big.size() - 1), static_cast<float>(big.size() - 1));
}

TEST(Safetensors, FilesOfTwoMiBOrMoreAreMappedAtAHugePageBoundary) {
  // The mapping starts 2 MiB-aligned (and is advised for huge pages), so a page cache holding
  // the file in 2 MiB folios maps each with one TLB entry; the bytes read are unchanged.
  TempDir tmp;
  std::vector<float> big(3 << 18);  // 3 MiB
  std::iota(big.begin(), big.end(), 0.0f);
  write_safetensors(tmp / "x.safetensors", {{"w", DType::F32, {768, 1024}, bytes_of(big)}});
  std::ifstream in(tmp / "x.safetensors", std::ios::binary);
  uint64_t header = 0;
  in.read(reinterpret_cast<char*>(&header), 8);
  auto f = SafetensorsFile::open(tmp / "x.safetensors");
  const auto& v = *f->find("w");
  const auto base = reinterpret_cast<uintptr_t>(v.data) - 8 - header;
  EXPECT_EQ(base % (size_t{2} << 20), 0u);
  const Mapping m = find_mapping(tmp / "x.safetensors");
  EXPECT_EQ(m.begin, base);
  // qemu-user (make arm64-test sets MOLT_UNDER_EMULATION) does not pass madvise on to the kernel.
  if (std::filesystem::exists("/sys/kernel/mm/transparent_hugepage") &&  // kernel has THP
      !test::under_emulation()) {
    EXPECT_NE(m.flags.find(" hg"), std::string::npos) << m.flags;
  }
  EXPECT_EQ(std::memcmp(v.data, big.data(), v.nbytes), 0);
}

TEST(Safetensors, WriterRejectsBadInput) {
  TempDir tmp;
  std::vector<float> v(3);
  auto expect_fail = [&](std::vector<TensorToWrite> t, const std::string& needle) {
    try {
      write_safetensors(tmp / "w.safetensors", t);
      ADD_FAILURE() << "no error for " << needle;
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find(needle), std::string::npos) << e.what();
      EXPECT_NE(std::string(e.what()).find("w.safetensors"), std::string::npos) << e.what();
    }
  };
  expect_fail({{"t", DType::F32, {4}, bytes_of(v)}}, "'t'");
  expect_fail({{"t", DType::F32, {3}, bytes_of(v)}, {"t", DType::F32, {3}, bytes_of(v)}}, "twice");
  expect_fail({{"t", DType::F32, {-3}, bytes_of(v)}}, "negative");
  expect_fail({{"__metadata__", DType::F32, {3}, bytes_of(v)}}, "__metadata__");
  EXPECT_FALSE(std::filesystem::exists(tmp / "w.safetensors"));
}

}  // namespace
}  // namespace molt
