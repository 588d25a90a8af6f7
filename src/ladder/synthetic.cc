// Synthetic ladders for tests and the demo's fallback.
#include "molt/ladder/synthetic.h"

#include <algorithm>
#include <fstream>
#include <nlohmann/json.hpp>

#include "molt/common/error.h"
#include "molt/model/synth.h"

namespace molt {
namespace {

namespace fs = std::filesystem;

// Byte-level BPE merges over lowercase letters: "Ġ a".."Ġ z", then "a a", "a b", ... Enough
// for vocab ≤ 256 + 26 + 676. A salt rotates the letter order (a different tokenizer).
std::string merges_txt(int64_t count, const std::string& salt) {
  std::string letters = "abcdefghijklmnopqrstuvwxyz";
  if (!salt.empty()) std::rotate(letters.begin(), letters.begin() + 1, letters.end());
  std::string out = "#version: 0.2\n";
  int64_t n = 0;
  for (char c : letters) {
    if (n++ >= count) return out;
    out += std::string("\xC4\xA0 ") + c + "\n";  // "Ġ" is the byte-level spelling of ' '
  }
  for (char a : letters) {
    for (char b : letters) {
      if (n++ >= count) return out;
      out += std::string(1, a) + " " + b + "\n";
    }
  }
  if (n < count)
    fail("synthetic ladder: vocab {} needs more merges than the generator makes", count + 256);
  return out;
}

}  // namespace

fs::path write_synthetic_ladder(const fs::path& dir, const SyntheticLadderOptions& o) {
  if (o.tokenizer && (o.vocab <= 256 || o.vocab > 256 + 26 + 26 * 26)) {
    fail("synthetic ladder: vocab {} must be in (256, {}] with a tokenizer", o.vocab,
         256 + 26 + 26 * 26);
  }
  if (o.vocab <= 0) fail("synthetic ladder: vocab {} must be positive", o.vocab);
  if (o.route_method != "maps" && o.route_method != "reprefill") {
    fail("synthetic ladder: route method '{}' is not 'maps' or 'reprefill'", o.route_method);
  }
  fs::create_directories(dir);
  nlohmann::json rungs = nlohmann::json::array(), routes = nlohmann::json::array();
  for (size_t i = 0; i < o.rungs.size(); ++i) {
    const SyntheticRung& r = o.rungs[i];
    ModelConfig c;
    c.hidden_size = r.hidden;
    c.num_hidden_layers = r.layers;
    c.num_attention_heads = r.heads;
    c.num_key_value_heads = r.kv_heads;
    c.head_dim = r.head_dim > 0 ? r.head_dim : r.hidden / r.heads;
    c.intermediate_size = r.intermediate;
    c.vocab_size = o.vocab;
    c.max_position_embeddings = 4096;
    c.sliding_window = 4096;
    c.max_window_layers = r.layers;
    c.rope_theta = o.rope_theta;
    c.tie_word_embeddings = true;
    c.eos_token_ids = {};  // random weights: never stop early
    SynthOptions so;
    so.dtype = o.dtype;
    so.seed = o.seed + i;
    write_synthetic_checkpoint(c, so, dir / r.name);
    if (o.tokenizer) {
      std::ofstream(dir / r.name / "merges.txt", std::ios::binary)
          << merges_txt(o.vocab - 256, i == 0 ? o.tokenizer_salt : "");
    }
    rungs.push_back({{"name", r.name},
                     {"path", r.name},
                     {"precision", o.dtype == DType::F32   ? "f32"
                                   : o.dtype == DType::F16 ? "f16"
                                                           : "bf16"}});
  }
  // Every ordered pair: a budget may skip a rung on the way down or back up.
  for (const SyntheticRung& a : o.rungs) {
    for (const SyntheticRung& b : o.rungs) {
      if (a.name == b.name) continue;
      nlohmann::json route = {{"from", a.name}, {"to", b.name}};
      if (o.route_method == "maps") {
        route["maps"] = "maps/" + a.name + "-" + b.name;
      } else {
        route["method"] = "reprefill";
      }
      routes.push_back(route);
    }
  }
  fs::path manifest = dir / "ladder.json";
  std::ofstream(manifest)
      << nlohmann::json{{"name", "synthetic-ladder"}, {"rungs", rungs}, {"routes", routes}}.dump(2)
      << "\n";
  return manifest;
}

}  // namespace molt
