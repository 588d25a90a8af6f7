// Hugging Face tokenizer.json: a BPE model over the byte-level alphabet, added tokens, an NFC
// (or no) normaliser, Split / ByteLevel pre-tokenizers and a ByteLevel decoder.
#include <algorithm>
#include <nlohmann/json.hpp>

#include "molt/common/error.h"
#include "tokenizer/byte_level.h"
#include "tokenizer/pretokenizer.h"
#include "tokenizer/spec.h"

namespace molt::tok {
namespace {

using nlohmann::json;

std::string type_of(const json& j) {
  if (!j.is_object() || !j.contains("type") || !j["type"].is_string()) return "";
  return j["type"].get<std::string>();
}

bool bool_field(const json& j, const char* key, bool fallback, const std::string& where) {
  if (!j.contains(key) || j[key].is_null()) return fallback;
  if (!j[key].is_boolean()) fail("{}: '{}' is not a boolean", where, key);
  return j[key].get<bool>();
}

void read_normalizer(const json& n, TokenizerSpec& spec, const std::string& where) {
  if (n.is_null()) {
    spec.nfc = false;
    return;
  }
  const std::string type = type_of(n);
  if (type == "NFC") {
    spec.nfc = true;
  } else if (type == "Sequence" && n.contains("normalizers") && n["normalizers"].is_array()) {
    spec.nfc = false;
    for (const auto& s : n["normalizers"]) {
      if (type_of(s) != "NFC")
        fail("{}: normalizer '{}' is not supported (only NFC)", where, type_of(s));
      spec.nfc = true;
    }
  } else {
    fail("{}: normalizer '{}' is not supported (only NFC)", where, type);
  }
}

void read_pre_tokenizer(const json& p, TokenizerSpec& spec, const std::string& where) {
  if (p.is_null()) return;
  const std::string type = type_of(p);
  if (type == "Sequence") {
    if (!p.contains("pretokenizers") || !p["pretokenizers"].is_array()) {
      fail("{}: pre_tokenizer Sequence has no 'pretokenizers' list", where);
    }
    for (const auto& s : p["pretokenizers"]) {
      read_pre_tokenizer(s, spec, where);
    }
  } else if (type == "Split") {
    const json& pat = p.value("pattern", json());
    const std::string behavior = p.value("behavior", "");
    if (behavior != "Isolated") {
      fail("{}: Split behavior '{}' is not supported (only Isolated)", where, behavior);
    }
    if (bool_field(p, "invert", false, where + ": Split"))
      fail("{}: inverted Split is not supported", where);
    if (pat.contains("Regex") && pat["Regex"].is_string()) {
      spec.splits.push_back({pat["Regex"].get<std::string>(), false});
    } else if (pat.contains("String") && pat["String"].is_string()) {
      spec.splits.push_back({pat["String"].get<std::string>(), true});
    } else {
      fail("{}: Split has no 'pattern' with 'Regex' or 'String'", where);
    }
  } else if (type == "ByteLevel") {
    // Its byte-to-alphabet mapping is implicit (molt works on bytes). A prefix space is only
    // supported where it applies to whole text segments, i.e. when nothing splits before it.
    if (bool_field(p, "add_prefix_space", false, where + ": ByteLevel")) {
      if (!spec.splits.empty())
        fail("{}: ByteLevel add_prefix_space after a Split is not supported", where);
      spec.add_prefix_space = true;
    }
    if (bool_field(p, "use_regex", true, where + ": ByteLevel")) {
      spec.splits.push_back({std::string(kGpt2Pattern), false});
    }
  } else {
    fail("{}: pre_tokenizer '{}' is not supported (Split, ByteLevel or a Sequence of them)", where,
         type);
  }
}

void read_decoder(const json& d, const std::string& where) {
  if (d.is_null()) return;
  const std::string type = type_of(d);
  if (type == "ByteLevel") return;
  if (type == "Sequence" && d.contains("decoders") && d["decoders"].is_array()) {
    for (const auto& s : d["decoders"]) read_decoder(s, where);
    return;
  }
  fail("{}: decoder '{}' is not supported (only ByteLevel)", where, type);
}

}  // namespace

TokenizerSpec load_tokenizer_json(const std::filesystem::path& path) {
  const std::string where = path.string();
  const json j = parse_json_file(path);
  if (!j.is_object() || !j.contains("model") || !j["model"].is_object()) {
    fail("{}: no 'model' object (is this a tokenizer.json?)", where);
  }
  const json& model = j["model"];
  const std::string model_type = type_of(model);
  if (!model_type.empty() && model_type != "BPE") {
    fail("{}: model type '{}' is not supported (only BPE)", where, model_type);
  }
  for (const char* key : {"continuing_subword_prefix", "end_of_word_suffix"}) {
    if (model.contains(key) && !model[key].is_null() && model[key] != "") {
      fail("{}: model.{} is not supported", where, key);
    }
  }
  if (model.contains("dropout") && model["dropout"].is_number() &&
      model["dropout"].get<double>() > 0) {
    fail("{}: model.dropout is set; BPE dropout is for training only", where);
  }

  TokenizerSpec spec;
  spec.source = path;
  spec.format = "tokenizer.json";
  spec.ignore_merges = bool_field(model, "ignore_merges", false, where + ": model");

  if (!model.contains("vocab") || !model["vocab"].is_object())
    fail("{}: model.vocab is missing", where);
  std::unordered_map<std::string, int32_t> by_name;  // byte-level spelling -> id
  by_name.reserve(model["vocab"].size());
  int64_t largest = -1;
  for (const auto& [name, v] : model["vocab"].items()) {
    if (!v.is_number_integer() || v.get<int64_t>() < 0 || v.get<int64_t>() >= (1 << 24)) {
      fail("{}: model.vocab: token '{}' has no valid id", where, name);
    }
    largest = std::max(largest, v.get<int64_t>());
  }
  check_id_space(where + ": model.vocab", largest, model["vocab"].size());
  for (const auto& [name, v] : model["vocab"].items()) {
    const auto id = static_cast<int32_t>(v.get<int64_t>());
    std::optional<std::string> bytes = byte_level_decode(name);
    if (!bytes || bytes->empty()) {
      fail(
          "{}: model.vocab: token '{}' is not in the byte-level alphabet (only byte-level BPE is "
          "supported)",
          where, name);
    }
    if (static_cast<size_t>(id) >= spec.vocab.size()) spec.vocab.resize(id + 1);
    if (!spec.vocab[id].empty()) fail("{}: model.vocab: id {} is used twice", where, id);
    spec.vocab[id] = std::move(*bytes);
    by_name.emplace(name, id);
  }

  if (!model.contains("merges") || !model["merges"].is_array())
    fail("{}: model.merges is missing", where);
  spec.merges.reserve(model["merges"].size());
  auto lookup = [&](const std::string& name, size_t rank) {
    auto it = by_name.find(name);
    if (it == by_name.end())
      fail("{}: model.merges[{}]: token '{}' is not in the vocabulary", where, rank, name);
    return it->second;
  };
  size_t rank = 0;
  for (const auto& m : model["merges"]) {
    std::string a, b;
    if (m.is_string()) {  // "a b" (older files)
      const std::string s = m.get<std::string>();
      const size_t sp = s.find(' ');
      if (sp == std::string::npos || s.find(' ', sp + 1) != std::string::npos) {
        fail("{}: model.merges[{}]: '{}' is not two tokens separated by one space", where, rank, s);
      }
      a = s.substr(0, sp);
      b = s.substr(sp + 1);
    } else if (m.is_array() && m.size() == 2 && m[0].is_string() && m[1].is_string()) {  // [a, b]
      a = m[0].get<std::string>();
      b = m[1].get<std::string>();
    } else {
      fail("{}: model.merges[{}] is neither \"a b\" nor [a, b]", where, rank);
    }
    spec.merges.emplace_back(lookup(a, rank), lookup(b, rank));
    ++rank;
  }

  if (j.contains("added_tokens") && !j["added_tokens"].is_null()) {
    spec.added = parse_added_tokens(j["added_tokens"], where + ": added_tokens");
  }
  read_normalizer(j.value("normalizer", json()), spec, where);
  read_pre_tokenizer(j.value("pre_tokenizer", json()), spec, where);
  read_decoder(j.value("decoder", json()), where);
  return spec;
}

}  // namespace molt::tok
