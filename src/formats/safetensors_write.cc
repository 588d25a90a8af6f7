// Writing .safetensors files, single or sharded with a Hugging Face index.
#include <algorithm>
#include <nlohmann/json.hpp>
#include <set>

#include "molt/common/error.h"
#include "molt/formats/atomic_file.h"
#include "molt/formats/safetensors.h"

namespace molt {
namespace {

// The data block starts at a multiple of a cache line in the file, and so in memory (files are
// mapped at 2 MiB-aligned addresses): with it at 8 or 16 mod 64, every 64-byte load of the
// AVX-512 decode kernels split over two cache lines. Tensors lie back to back, so one whose
// bytes are a multiple of 64 (nearly all of them at the Qwen2.5 geometries) keeps the
// alignment for the next.
constexpr size_t kDataAlign = 64;

// Checks names and byte sizes before anything touches the disk.
void check_tensors(const std::filesystem::path& path, const std::vector<TensorToWrite>& tensors) {
  std::set<std::string> names;
  for (const auto& t : tensors) {
    if (t.name.empty()) fail("{}: a tensor to write has an empty name", path.string());
    if (t.name == "__metadata__") fail("{}: '__metadata__' is not a tensor name", path.string());
    if (!names.insert(t.name).second) {
      fail("{}: tensor '{}' is given twice", path.string(), t.name);
    }
    uint64_t numel = 1;
    for (int64_t d : t.shape) {
      if (d < 0) fail("{}: tensor '{}': negative dimension {}", path.string(), t.name, d);
      if (__builtin_mul_overflow(numel, static_cast<uint64_t>(d), &numel)) {
        fail("{}: tensor '{}': shape overflows", path.string(), t.name);
      }
    }
    if (numel * dtype_size(t.dtype) != t.bytes.size()) {
      fail("{}: tensor '{}': {} bytes given, shape of {} elements of {} needs {}", path.string(),
           t.name, t.bytes.size(), numel, dtype_name(t.dtype), numel * dtype_size(t.dtype));
    }
  }
}

// The order the reference (Rust) safetensors writer uses: larger elements first, then by
// name. Tensors then lie back to back with no gaps (the reference loader rejects gaps) and each
// one still starts at a multiple of its element size.
std::vector<const TensorToWrite*> in_file_order(const std::vector<TensorToWrite>& tensors) {
  std::vector<const TensorToWrite*> v;
  v.reserve(tensors.size());
  for (const auto& t : tensors) v.push_back(&t);
  std::sort(v.begin(), v.end(), [](auto* a, auto* b) {
    const size_t sa = dtype_size(a->dtype), sb = dtype_size(b->dtype);
    return sa != sb ? sa > sb : a->name < b->name;
  });
  return v;
}

// Through an AtomicFile: a failure never leaves a half-written file under the real name.
void write_one_file(const std::filesystem::path& path,
                    const std::vector<const TensorToWrite*>& order,
                    const std::map<std::string, std::string>& metadata) {
  nlohmann::json header = nlohmann::json::object();
  if (!metadata.empty()) header["__metadata__"] = metadata;
  size_t pos = 0;
  for (const auto* t : order) {
    header[t->name] = {{"dtype", std::string(dtype_name(t->dtype))},
                       {"shape", t->shape},
                       {"data_offsets", {pos, pos + t->bytes.size()}}};
    pos += t->bytes.size();
  }
  std::string text = header.dump();
  // Spaces after the JSON (the format allows them) put the data block at 8 + n ≡ 0 (mod 64).
  text.resize((8 + text.size() + kDataAlign - 1) / kDataAlign * kDataAlign - 8, ' ');

  AtomicFile f(path);
  const uint64_t n = text.size();
  f.write(&n, 8);
  f.write(text);
  for (const auto* t : order) f.write(t->bytes.data(), t->bytes.size());  // back to back
  f.commit();
}

}  // namespace

void write_safetensors(const std::filesystem::path& path, const std::vector<TensorToWrite>& tensors,
                       const std::map<std::string, std::string>& metadata) {
  check_tensors(path, tensors);
  write_one_file(path, in_file_order(tensors), metadata);
}

void write_safetensors_sharded(const std::filesystem::path& dir,
                               const std::vector<TensorToWrite>& tensors, size_t max_shard_bytes,
                               const std::map<std::string, std::string>& metadata) {
  if (max_shard_bytes == 0) fail("{}: max_shard_bytes must be positive", dir.string());
  check_tensors(dir, tensors);
  std::filesystem::create_directories(dir);
  auto order = in_file_order(tensors);

  // Greedy in file order; a tensor larger than the limit gets a shard of its own.
  std::vector<std::vector<const TensorToWrite*>> shards(1);
  size_t in_shard = 0, total = 0;
  for (const auto* t : order) {
    size_t n = t->bytes.size();
    if (!shards.back().empty() && in_shard + n > max_shard_bytes) {
      shards.emplace_back();
      in_shard = 0;
    }
    shards.back().push_back(t);
    in_shard += n;
    total += t->bytes.size();
  }

  const auto index_path = dir / "model.safetensors.index.json";
  std::error_code ec;
  if (shards.size() == 1) {
    write_one_file(dir / "model.safetensors", shards[0], metadata);
    std::filesystem::remove(index_path, ec);  // a stale index would win over the new file
    return;
  }
  nlohmann::json weight_map = nlohmann::json::object();
  for (size_t i = 0; i < shards.size(); ++i) {
    std::string name = fmt::format("model-{:05d}-of-{:05d}.safetensors", i + 1, shards.size());
    write_one_file(dir / name, shards[i], metadata);
    for (const auto* t : shards[i]) weight_map[t->name] = name;
  }
  nlohmann::json index = {{"metadata", {{"total_size", total}}}, {"weight_map", weight_map}};
  write_file_atomically(index_path, index.dump(2) + "\n");
  std::filesystem::remove(dir / "model.safetensors", ec);  // the index wins anyway; avoid confusion
}

}  // namespace molt
