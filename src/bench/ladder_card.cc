#include "molt/bench/ladder_card.h"

#include <fmt/format.h>

#include <algorithm>
#include <fstream>
#include <nlohmann/json.hpp>
#include <set>
#include <string_view>
#include <vector>

#include "molt/common/error.h"
#include "molt/formats/hf_config.h"
#include "molt/formats/safetensors.h"
#include "molt/ladder/manifest.h"
#include "molt/model/synth.h"
#include "molt/tokenizer/tokenizer.h"
#include "molt/transfer/map_file.h"

namespace fs = std::filesystem;
using nlohmann::json;

namespace molt {
namespace {

std::string read_text(const fs::path& p) {
  std::ifstream f(p, std::ios::binary);
  if (!f) fail("ladder card: cannot read {}", p.string());
  return {std::istreambuf_iterator<char>(f), std::istreambuf_iterator<char>()};
}

// 4096 → "4,096".
std::string thousands(int64_t n) {
  std::string s = std::to_string(n);
  for (int i = static_cast<int>(s.size()) - 3; i > (n < 0 ? 1 : 0); i -= 3) s.insert(i, ",");
  return s;
}

// The values the rungs take, "a" when they agree, "a / b" when they do not.
std::string shared(const std::vector<std::string>& values) {
  std::vector<std::string> distinct;
  for (const std::string& v : values) {
    if (std::find(distinct.begin(), distinct.end(), v) == distinct.end()) distinct.push_back(v);
  }
  return fmt::format("{}", fmt::join(distinct, " / "));
}

// "<m>.scales" / "<m>.biases" beside a quantised "<m>.weight": quantisation, not weights.
bool quantisation_table(const WeightStore& w, const std::string& name) {
  for (const std::string_view suffix : {".scales", ".biases"}) {
    if (!name.ends_with(suffix)) continue;
    const TensorView* weight = w.find(name.substr(0, name.size() - suffix.size()) + ".weight");
    return weight != nullptr && (weight->dtype == DType::I8 || weight->dtype == DType::U32);
  }
  return false;
}

struct Rung {
  ManifestRung m;
  ModelConfig config;
  int64_t parameters = 0;
  uint64_t file_bytes = 0;
};

std::vector<Rung> read_rungs(const LadderManifest& manifest) {
  std::vector<Rung> out;
  for (const ManifestRung& m : manifest.rungs) {
    Rung r{m, load_model_config(m.path), parameter_count(m.path), 0};
    for (const auto& e : fs::directory_iterator(m.path)) {
      if (e.is_regular_file() && e.path().extension() == ".safetensors")
        r.file_bytes += e.file_size();
    }
    out.push_back(std::move(r));
  }
  return out;
}

std::string rungs_block(const std::vector<Rung>& rungs) {
  std::string md =
      "| rung | precision | hidden | layers | heads × head_dim | kv heads | intermediate | "
      "parameters | weight files |\n|---|---|---|---|---|---|---|---|---|\n";
  std::vector<std::string> vocab, tied, bias, theta, eps, ratio;
  for (const Rung& r : rungs) {
    const ModelConfig& c = r.config;
    md += fmt::format("| `{}` | {} | {} | {} | {} × {} | {} | {} | {:.2f} M | {:.1f} MiB |\n",
                      r.m.name, r.m.precision, c.hidden_size, c.num_hidden_layers,
                      c.num_attention_heads, c.head_dim, c.num_key_value_heads, c.intermediate_size,
                      static_cast<double>(r.parameters) / 1e6,
                      static_cast<double>(r.file_bytes) / (1 << 20));
    vocab.push_back(thousands(c.vocab_size));
    tied.push_back(c.tie_word_embeddings ? "tied embeddings (no `lm_head.weight`)"
                                         : "untied embeddings");
    bias.push_back(c.attention_bias ? "q/k/v bias" : "no q/k/v bias");
    theta.push_back(fmt::format("{:g}", c.rope_theta));
    eps.push_back(fmt::format("{:g}", c.rms_norm_eps));
    ratio.push_back(fmt::format(
        "{:.2f}", static_cast<double>(c.intermediate_size) / static_cast<double>(c.hidden_size)));
  }
  md += fmt::format(
      "\nEvery rung: vocab {}, {}, {}, RoPE θ = {}, RMSNorm ε = {}, SwiGLU.\n"
      "Parameters count the weights as trained (a quantised rung's scales are not counted);\n"
      "weight files are the rung's `*.safetensors`.\n",
      shared(vocab), shared(tied), shared(bias), shared(theta), shared(eps));
  // The real family beside it: `molt synth`'s Qwen2.5 geometries.
  std::vector<std::string> real;
  for (const auto& [geometry, size] :
       {std::pair{"qwen2.5-0.5b", "0.5B"}, {"qwen2.5-1.5b", "1.5B"}, {"qwen2.5-3b", "3B"}}) {
    const ModelConfig c = qwen25_geometry(geometry);
    real.push_back(
        fmt::format("{} {:.2f}", size,
                    static_cast<double>(c.intermediate_size) / static_cast<double>(c.hidden_size)));
  }
  md += fmt::format("\nintermediate / hidden: {} here; Qwen2.5 {} (`molt synth`'s geometries).\n",
                    shared(ratio), fmt::join(real, ", "));
  return md;
}

std::string tokenizer_block(const std::vector<Rung>& rungs) {
  const Rung& first = rungs.front();
  const std::string sha = sha256_file(first.m.path / "tokenizer.json");
  bool same = true;
  for (const Rung& r : rungs) same = same && sha256_file(r.m.path / "tokenizer.json") == sha;
  const json t = json::parse(read_text(first.m.path / "tokenizer.json"));
  const int64_t vocab = static_cast<int64_t>(t.at("model").at("vocab").size());
  const int64_t merges = static_cast<int64_t>(t.at("model").at("merges").size());
  std::vector<std::string> added;
  for (const json& a : t.value("added_tokens", json::array())) {
    added.push_back(
        fmt::format("`{}` {}", a.at("content").get<std::string>(), a.at("id").get<int64_t>()));
  }
  return fmt::format(
      "{} BPE ids ({} merges over a {}-symbol byte alphabet), then\n{} as special added "
      "tokens\n(`{}/tokenizer.json`{}).\n",
      thousands(vocab), thousands(merges), vocab - merges, fmt::join(added, ", "), first.m.name,
      same ? ", byte for byte the same file in every rung" : "; the rungs' files differ");
}

std::string data_block(const fs::path& dir, const Rung& first) {
  const std::string test = read_text(dir / "data" / "test.txt");
  const auto tok = Tokenizer::load(first.m.path);
  const int64_t tokens = static_cast<int64_t>(tok->encode(test).size());
  std::map<int64_t, std::pair<int64_t, int64_t>> needles;  // context → (count, ChatML)
  std::ifstream f(dir / "data" / "needles.jsonl");
  if (!f) fail("ladder card: cannot read {}", (dir / "data" / "needles.jsonl").string());
  for (std::string line; std::getline(f, line);) {
    if (line.empty()) continue;
    const json n = json::parse(line);
    auto& [count, chat] = needles[n.at("context").get<int64_t>()];
    ++count;
    chat += n.at("prompt").get<std::string>().find("<|im_start|>") != std::string::npos;
  }
  std::vector<std::string> per;
  std::set<std::pair<int64_t, int64_t>> counts;
  for (const auto& [ctx, c] : needles) {
    per.push_back(fmt::format("{}", ctx));
    counts.insert(c);
  }
  std::string needle_line;
  if (counts.size() == 1) {
    const auto [count, chat] = *counts.begin();
    needle_line = fmt::format("{} per context of {} tokens ({} of each {} as a ChatML turn)", count,
                              fmt::join(per, ", "), chat, count);
  } else {
    std::vector<std::string> each;
    for (const auto& [ctx, c] : needles) {
      each.push_back(fmt::format("{} at {} ({} ChatML)", c.first, ctx, c.second));
    }
    needle_line = fmt::format("{}", fmt::join(each, ", "));
  }
  return fmt::format(
      "- `data/test.txt`: {} bytes, {} tokens ({:.2f} bytes per token).\n"
      "- `data/needles.jsonl`: {}.\n",
      thousands(static_cast<int64_t>(test.size())), thousands(tokens),
      static_cast<double>(test.size()) / static_cast<double>(tokens), needle_line);
}

}  // namespace

int64_t parameter_count(const fs::path& dir) {
  const ModelConfig config = load_model_config(dir);
  const WeightStore w = WeightStore::open_dir(dir);
  int64_t n = 0;
  for (const std::string& name : w.names()) {
    if (quantisation_table(w, name)) continue;
    const TensorView& t = w.get(name);
    if (t.dtype != DType::U32) {
      n += t.numel();
      continue;
    }
    const std::string module = name.substr(0, name.rfind('.'));
    const int bits = config.quantization ? config.quantization->layer(module).bits : 0;
    if (bits <= 0) fail("{}: {} is packed but config.json gives no bits", dir.string(), name);
    n += t.numel() * 32 / bits;
  }
  return n;
}

std::map<std::string, std::string> ladder_card_blocks(const fs::path& manifest_file) {
  const LadderManifest manifest = LadderManifest::load(manifest_file);
  const std::vector<Rung> rungs = read_rungs(manifest);
  const fs::path dir = manifest_file.parent_path();
  return {{"tiny-ladder-rungs", rungs_block(rungs)},
          {"tiny-ladder-tokenizer", tokenizer_block(rungs)},
          {"tiny-ladder-data", data_block(dir, rungs.front())}};
}

}  // namespace molt
