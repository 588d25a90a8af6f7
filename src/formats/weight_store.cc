// A checkpoint's weights across one file or the shards named by a Hugging Face index.
#include <fstream>
#include <nlohmann/json.hpp>
#include <set>
#include <sstream>

#include "molt/common/error.h"
#include "molt/formats/hf_config.h"
#include "molt/formats/safetensors.h"

namespace molt {
namespace {

// Shard names come from a file we did not write: keep them inside the checkpoint folder.
void check_shard_name(const std::string& index, const std::string& tensor,
                      const std::string& shard) {
  std::filesystem::path p(shard);
  bool escapes = shard.empty() || p.is_absolute() || shard.find('\0') != std::string::npos;
  for (const auto& part : p) escapes = escapes || part == "..";
  if (escapes) {
    fail("{}: weight_map['{}']: shard '{}' is not a file name inside the checkpoint folder", index,
         tensor, shard);
  }
}

// Reads the index, refusing a tensor listed twice in weight_map (JSON keeps only the last,
// which would silently pick one of two shards).
nlohmann::json read_index(const std::filesystem::path& path) {
  const std::string index = path.string();
  std::ifstream in(path, std::ios::binary);
  if (!in) fail("{}: cannot open index", index);
  std::stringstream ss;
  ss << in.rdbuf();
  std::string top_key, duplicate;
  std::set<std::string> seen;
  auto cb = [&](int depth, nlohmann::json::parse_event_t ev, nlohmann::json& parsed) {
    if (depth >= kMaxJsonDepth && (ev == nlohmann::json::parse_event_t::object_start ||
                                   ev == nlohmann::json::parse_event_t::array_start)) {
      fail("{}: JSON nests deeper than {} levels", index, kMaxJsonDepth);
    }
    if (ev != nlohmann::json::parse_event_t::key) return true;
    const auto& k = parsed.get_ref<const std::string&>();
    if (depth == 1) top_key = k;
    if (depth == 2 && top_key == "weight_map" && !seen.insert(k).second && duplicate.empty()) {
      duplicate = k;
    }
    return true;
  };
  nlohmann::json j;
  try {
    j = nlohmann::json::parse(ss.str(), cb);
  } catch (const nlohmann::json::parse_error& e) {
    fail("{}: malformed JSON at byte {}: {}", index, e.byte, e.what());
  } catch (const nlohmann::json::exception& e) {  // e.g. out_of_range: a number like 1e400
    fail("{}: malformed JSON: {}", index, e.what());
  }
  if (!duplicate.empty()) fail("{}: weight_map lists tensor '{}' twice", index, duplicate);
  return j;
}

}  // namespace

WeightStore WeightStore::open_dir(const std::filesystem::path& dir) {
  WeightStore s;
  s.dir_ = dir;
  const auto index_path = dir / "model.safetensors.index.json";
  const auto single_path = dir / "model.safetensors";

  if (!std::filesystem::exists(index_path)) {
    if (!std::filesystem::exists(single_path)) {
      fail("{}: no model.safetensors or model.safetensors.index.json in the checkpoint folder",
           dir.string());
    }
    s.files_.push_back(SafetensorsFile::open(single_path));
    for (const auto& t : s.files_[0]->tensors()) s.by_name_[t.name] = &t;
    return s;
  }

  const std::string index = index_path.string();
  nlohmann::json j = read_index(index_path);
  if (!j.is_object()) fail("{}: index is a JSON {}, expected an object", index, j.type_name());
  if (j.contains("metadata")) {
    const auto& m = j["metadata"];
    if (!m.is_object())
      fail("{}: field 'metadata' is a {}, expected an object", index, m.type_name());
    if (m.contains("total_size") && !m["total_size"].is_number()) {
      fail("{}: field 'metadata.total_size' is a {}, expected a number", index,
           m["total_size"].type_name());
    }
  }
  if (!j.contains("weight_map")) fail("{}: missing field 'weight_map'", index);
  const auto& wm = j["weight_map"];
  if (!wm.is_object()) {
    fail("{}: field 'weight_map' is a {}, expected an object of tensor → shard file", index,
         wm.type_name());
  }
  if (wm.empty()) fail("{}: field 'weight_map' lists no tensors", index);

  std::map<std::string, SafetensorsFile*> shard_by_name;
  for (const auto& [tensor, shard] : wm.items()) {
    if (!shard.is_string()) {
      fail("{}: weight_map['{}'] is a {}, expected a shard file name", index, tensor,
           shard.type_name());
    }
    const auto& name = shard.get_ref<const std::string&>();
    check_shard_name(index, tensor, name);
    if (!shard_by_name.count(name)) {
      const auto shard_path = dir / name;
      std::error_code ec;  // a name too long for the file system is "does not exist" too
      if (!std::filesystem::exists(shard_path, ec)) {
        fail("{}: weight_map['{}']: shard {} does not exist", index, tensor, shard_path.string());
      }
      s.files_.push_back(SafetensorsFile::open(shard_path));
      shard_by_name[name] = s.files_.back().get();
    }
    const TensorView* t = shard_by_name[name]->find(tensor);
    if (t == nullptr) {
      fail("{}: weight_map['{}'] names shard {}, which has no tensor '{}'", index, tensor,
           (dir / name).string(), tensor);
    }
    s.by_name_[tensor] = t;
  }
  // A tensor stored in two shards is ambiguous whichever one the index names.
  std::map<std::string, const SafetensorsFile*> owner;
  for (const auto& f : s.files_) {
    for (const auto& t : f->tensors()) {
      auto [it, fresh] = owner.emplace(t.name, f.get());
      if (!fresh) {
        fail("{}: tensor '{}' is stored in both {} and {}", index, t.name,
             it->second->path().string(), f->path().string());
      }
    }
  }
  return s;
}

const TensorView* WeightStore::find(const std::string& name) const {
  auto it = by_name_.find(name);
  return it == by_name_.end() ? nullptr : it->second;
}

const TensorView& WeightStore::get(const std::string& name) const {
  const TensorView* t = find(name);
  if (t == nullptr) fail("{}: checkpoint has no tensor '{}'", dir_.string(), name);
  return *t;
}

std::vector<std::string> WeightStore::names() const {
  std::vector<std::string> v;
  v.reserve(by_name_.size());
  for (const auto& [name, t] : by_name_) v.push_back(name);
  return v;
}

size_t WeightStore::total_bytes() const {
  size_t n = 0;
  for (const auto& [name, t] : by_name_) n += t->nbytes;
  return n;
}

void WeightStore::release_pages() const {
  for (const auto& f : files_) f->release_pages();
}

void WeightStore::release_range(const void* p, size_t n) const {
  for (const auto& f : files_) f->release_range(p, n);
}

}  // namespace molt
