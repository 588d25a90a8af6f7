// Reading helpers and the added-token formats shared by every loader.
#include <cerrno>
#include <cstring>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>

#include "molt/common/error.h"
#include "molt/formats/hf_config.h"
#include "tokenizer/spec.h"

namespace molt::tok {

std::string read_file_bytes(const std::filesystem::path& path) {
  std::ifstream f(path, std::ios::binary);
  if (!f) fail("{}: cannot open: {}", path.string(), std::strerror(errno));
  std::ostringstream ss;
  ss << f.rdbuf();
  if (f.bad()) fail("{}: read error", path.string());
  return std::move(ss).str();
}

nlohmann::json parse_json_file(const std::filesystem::path& path) {
  // parse_json_text names the file and refuses 1e400 (out_of_range) and absurd nesting like bad
  // syntax; the tokenizer's messages add what a user most likely has in hand.
  const std::string text = read_file_bytes(path);
  try {
    return parse_json_text(text, path.string());
  } catch (const Error& e) {
    fail("{} (not valid JSON: truncated or corrupt?)", e.what());
  }
}

void check_id_space(const std::string& where, int64_t largest_id, size_t count) {
  constexpr int64_t kSlack = 1024;
  if (largest_id >= 2 * static_cast<int64_t>(count) + kSlack) {
    fail(
        "{}: id {} is far past the {} token(s) the file defines (ids are numbered densely from "
        "0); the file is corrupt",
        where, largest_id, count);
  }
}

namespace {

AddedToken added_token_from_object(const nlohmann::json& t, int64_t id, const std::string& where) {
  if (!t.is_object() || !t.contains("content") || !t["content"].is_string()) {
    fail("{}: added token {} has no string 'content'", where, id);
  }
  auto flag = [&](const char* key, bool fallback) {
    if (!t.contains(key) || t[key].is_null()) return fallback;
    if (!t[key].is_boolean()) fail("{}: added token {}: '{}' is not a boolean", where, id, key);
    return t[key].get<bool>();
  };
  if (flag("single_word", false)) {
    fail("{}: added token {} ('{}') sets single_word, which molt does not support", where, id,
         t["content"].get<std::string>());
  }
  AddedToken a;
  a.content = t["content"].get<std::string>();
  a.id = static_cast<int32_t>(id);
  a.special = flag("special", false);
  a.lstrip = flag("lstrip", false);
  a.rstrip = flag("rstrip", false);
  return a;
}

int64_t checked_id(const nlohmann::json& v, const std::string& where, const std::string& what) {
  if (!v.is_number_integer()) fail("{}: {}: id is not an integer", where, what);
  const int64_t id = v.get<int64_t>();
  if (id < 0 || id >= (int64_t{1} << 24)) fail("{}: {}: id {} is out of range", where, what, id);
  return id;
}

}  // namespace

std::vector<AddedToken> parse_added_tokens(const nlohmann::json& j, const std::string& where) {
  std::vector<AddedToken> out;
  if (j.is_array()) {  // tokenizer.json "added_tokens"
    for (const auto& t : j) {
      if (!t.is_object() || !t.contains("id")) fail("{}: added token without an 'id'", where);
      const int64_t id = checked_id(t["id"], where, "added token");
      out.push_back(added_token_from_object(t, id, where));
    }
    return out;
  }
  if (!j.is_object()) fail("{}: expected a JSON object or list of added tokens", where);
  if (j.contains("added_tokens")) return parse_added_tokens(j["added_tokens"], where);
  if (j.contains("added_tokens_decoder")) {  // tokenizer_config.json: {"151643": {...}}
    const auto& d = j["added_tokens_decoder"];
    if (!d.is_object()) fail("{}: 'added_tokens_decoder' is not an object", where);
    for (const auto& [key, t] : d.items()) {
      int64_t id = -1;
      try {
        size_t used = 0;
        id = std::stoll(key, &used);
        if (used != key.size()) id = -1;
      } catch (const std::exception&) {
      }
      if (id < 0 || id >= (int64_t{1} << 24)) {
        fail("{}: added_tokens_decoder key '{}' is not a token id", where, key);
      }
      out.push_back(added_token_from_object(t, id, where));
    }
    return out;
  }
  // {"<|endoftext|>": 151643, ...}: qwen2.5_specials.json, added_tokens.json. No flags are
  // stored, so every token counts as special.
  for (const auto& [content, v] : j.items()) {
    AddedToken a;
    a.content = content;
    a.id = static_cast<int32_t>(checked_id(v, where, "token '" + content + "'"));
    out.push_back(std::move(a));
  }
  return out;
}

std::vector<AddedToken> load_added_tokens(const std::filesystem::path& path) {
  return parse_added_tokens(parse_json_file(path), path.string());
}

}  // namespace molt::tok
