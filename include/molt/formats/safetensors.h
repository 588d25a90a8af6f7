// safetensors: read through mmap with zero-copy views, write from memory.
// Format: u64 little-endian header length N, N bytes of JSON
// {"name": {"dtype", "shape", "data_offsets": [begin, end]}, "__metadata__": {str: str}},
// then the data block; offsets are relative to the start of the data block.
#pragma once

#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <map>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "molt/common/dtype.h"

namespace molt {

struct TensorView {
  std::string name;
  DType dtype = DType::F32;
  std::vector<int64_t> shape;
  const std::byte* data = nullptr;  // points into the mapping; valid while the file is open
  size_t nbytes = 0;
  int64_t numel() const;
  // Human-readable "[896, 4864]".
  std::string shape_str() const;
};

// One mapped .safetensors file. Every header field is validated on open: well-formed JSON,
// known dtypes, non-negative shapes, offsets inside the file, byte size = numel × dtype
// size, no two tensors overlapping, a sane header length. Errors name the file and tensor.
class SafetensorsFile {
 public:
  static std::unique_ptr<SafetensorsFile> open(const std::filesystem::path& path);
  ~SafetensorsFile();
  SafetensorsFile(const SafetensorsFile&) = delete;
  SafetensorsFile& operator=(const SafetensorsFile&) = delete;

  const std::filesystem::path& path() const { return path_; }
  const std::vector<TensorView>& tensors() const { return tensors_; }
  const TensorView* find(const std::string& name) const;  // nullptr when absent
  const std::map<std::string, std::string>& metadata() const { return metadata_; }
  size_t file_size() const { return size_; }

  // Ask the OS to drop the pages of the mapping (they are re-read from the file on the next
  // touch). Used to park a rung: the views stay valid, RSS falls.
  void release_pages() const;
  // The same for the whole pages inside [p, p + n) when they lie in this mapping (a tensor
  // copied out at load: its pages need not stay resident beside the copy).
  void release_range(const void* p, size_t n) const;

 private:
  SafetensorsFile() = default;
  std::filesystem::path path_;
  void* map_ = nullptr;
  size_t size_ = 0;
  std::vector<TensorView> tensors_;
  std::map<std::string, std::string> metadata_;
};

// A checkpoint's weights: one model.safetensors or shards listed by
// model.safetensors.index.json ({"metadata": {...}, "weight_map": {tensor: shard file}}).
class WeightStore {
 public:
  // `dir` holds model.safetensors or model.safetensors.index.json (the index wins).
  static WeightStore open_dir(const std::filesystem::path& dir);

  const TensorView* find(const std::string& name) const;
  // Throws molt::Error naming the checkpoint and tensor when absent.
  const TensorView& get(const std::string& name) const;
  std::vector<std::string> names() const;
  const std::vector<std::unique_ptr<SafetensorsFile>>& files() const { return files_; }
  const std::filesystem::path& dir() const { return dir_; }
  size_t total_bytes() const;
  void release_pages() const;
  void release_range(const void* p, size_t n) const;  // see SafetensorsFile::release_range

 private:
  std::filesystem::path dir_;
  std::vector<std::unique_ptr<SafetensorsFile>> files_;
  std::map<std::string, const TensorView*> by_name_;
};

struct TensorToWrite {
  std::string name;
  DType dtype = DType::F32;
  std::vector<int64_t> shape;
  std::span<const std::byte> bytes;  // numel × dtype size bytes, caller-owned
};

// Writes one file (tensors sorted by name, data 8-byte aligned, header padded with spaces).
void write_safetensors(const std::filesystem::path& path, const std::vector<TensorToWrite>& tensors,
                       const std::map<std::string, std::string>& metadata = {});

// Writes shards of at most `max_shard_bytes` each plus model.safetensors.index.json into dir,
// named model-00001-of-0000N.safetensors as Hugging Face does; one shard → model.safetensors.
void write_safetensors_sharded(const std::filesystem::path& dir,
                               const std::vector<TensorToWrite>& tensors, size_t max_shard_bytes,
                               const std::map<std::string, std::string>& metadata = {});

}  // namespace molt
