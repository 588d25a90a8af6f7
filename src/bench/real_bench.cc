#include "molt/bench/real_bench.h"

#include <fmt/format.h>

#include <algorithm>
#include <fstream>
#include <nlohmann/json.hpp>
#include <random>

#include "molt/bench/decode_bench.h"
#include "molt/bench/performance_report.h"
#include "molt/bench/switch_bench.h"
#include "molt/common/error.h"
#include "molt/kernels/bandwidth.h"
#include "molt/kernels/threads.h"
#include "molt/ladder/ladder.h"
#include "molt/ladder/process_memory.h"
#include "molt/model/quantize.h"
#include "molt/model/synth.h"
#include "molt/transfer/map_file.h"

namespace molt {
namespace {

namespace fs = std::filesystem;
using json = nlohmann::json;

constexpr uint64_t kSeed = 1;  // every geometry's weights, as scripts/performance.sh makes them

bool complete(const fs::path& dir) {
  return fs::exists(dir / "config.json");
}

// Makes <dir>/<geometry>-<precision> unless it is there; returns how it was made.
std::string make_checkpoint(const RealBenchOptions& o, const std::string& geometry,
                            const std::string& precision) {
  const fs::path out = real_checkpoint(o, geometry, precision);
  const fs::path bf16 = real_checkpoint(o, geometry, "bf16");
  std::string made_by;
  QuantizeOptions q;
  fs::path from = bf16;
  if (precision == "bf16") {
    made_by = fmt::format("molt synth --geometry {} --dtype bf16 --seed {}", geometry, kSeed);
  } else if (precision == "int8") {
    q.mode = "int8";
    q.bits = 8;
    q.group_size = 0;
    made_by = fmt::format("molt quantize --model {}-bf16 --int8 --group-size 0", geometry);
  } else if (precision == "q4") {
    made_by = fmt::format("molt quantize --model {}-bf16 --bits 4 --group-size 64", geometry);
  } else if (precision == "q4-rows8") {
    from = real_checkpoint(o, geometry, "q4");
    q.interleave = true;
    made_by = fmt::format("molt quantize --model {}-q4 --interleave", geometry);
  } else {
    fail("real geometries: unknown precision '{}' (bf16, int8, q4, q4-rows8)", precision);
  }
  if (complete(out)) return made_by;
  if (precision == "bf16") {
    // Written beside and renamed, so a run cut short never leaves half a checkpoint behind.
    const fs::path part = out.string() + ".partial";
    fs::remove_all(part);
    SynthOptions s;
    s.dtype = DType::BF16;
    s.seed = kSeed;
    write_synthetic_checkpoint(qwen25_geometry(geometry), s, part);
    fs::rename(part, out);
  } else {
    if (!complete(from)) make_checkpoint(o, geometry, precision == "q4-rows8" ? "q4" : "bf16");
    fs::remove_all(out);
    quantize_checkpoint(from, out, q);
  }
  return made_by;
}

// "qwen2.5-1.5b" → "1.5b": a rung's name in the routes' ladders.
std::string short_name(const std::string& geometry) {
  const size_t dash = geometry.rfind('-');
  return dash == std::string::npos ? geometry : geometry.substr(dash + 1);
}

uint64_t dir_bytes(const fs::path& dir) {
  uint64_t n = 0;
  for (const auto& e : fs::directory_iterator(dir)) {
    if (e.is_regular_file()) n += e.file_size();
  }
  return n;
}

}  // namespace

fs::path real_checkpoint(const RealBenchOptions& o, const std::string& geometry,
                         const std::string& precision) {
  return o.dir / (geometry + "-" + precision);
}

json run_real_bench(const RealBenchOptions& o,
                    const std::function<void(const std::string&, int64_t, int64_t)>& progress) {
  if (o.dir.empty()) fail("real geometries: no folder for the synthetic checkpoints");
  fs::create_directories(o.dir);
  json out = {{"dir", o.dir.string()},
              {"prompt_tokens", o.prompt_tokens},
              {"tokens", o.tokens},
              {"triad_repeats", o.triad_repeats}};
  // Checkpoints, made once (minutes at 3B) and kept for the next run.
  std::vector<std::pair<std::string, std::string>> needed;  // (geometry, precision)
  for (const std::string& g : o.geometries) {
    for (const std::string& p : o.precisions) needed.emplace_back(g, p);
  }
  for (const auto& [s, r] : o.routes) {
    for (const std::string& g : {s, r}) {
      const std::pair<std::string, std::string> bf16{g, "bf16"};
      if (std::find(needed.begin(), needed.end(), bf16) == needed.end()) needed.push_back(bf16);
    }
  }
  json checkpoints = json::object();
  int64_t done = 0;
  for (const auto& [g, p] : needed) {
    if (progress) progress("real geometries: checkpoints", done++, std::ssize(needed));
    const std::string made_by = make_checkpoint(o, g, p);
    const fs::path dir = real_checkpoint(o, g, p);
    checkpoints[dir.filename().string()] = {{"geometry", g},
                                            {"precision", p},
                                            {"made_by", made_by},
                                            {"bytes", dir_bytes(dir)},
                                            {"sha256", checkpoint_sha256(dir)}};
  }
  out["checkpoints"] = checkpoints;

  // Decode speed per precision, each beside a standalone triad of the same minute.
  json speed = json::array();
  done = 0;
  const int64_t runs = std::ssize(o.geometries) * std::ssize(o.precisions);
  for (const std::string& g : o.geometries) {
    for (const std::string& p : o.precisions) {
      if (progress) progress("real geometries: decode", done++, runs);
      const fs::path dir = real_checkpoint(o, g, p);
      const double triad = measure_triad_bandwidth_gbs(128, o.triad_repeats);
      DecodeBenchOptions d;
      d.prompt_tokens = o.prompt_tokens;
      d.tokens = o.tokens;
      d.bandwidth = true;
      d.rounds = o.rounds;
      // "q4" is the MLX layout as stored; an MLX checkpoint as published loads as "q4-rows8"
      // (its layout cache), so the table keeps both layouts.
      if (p == "q4") d.layout = WeightLayout::Stored;
      json j = run_decode_bench(dir, d);
      j.erase("peak_rss_mib");  // the process's high-water mark, not this checkpoint's
      j["model"] = dir.filename().string();
      j["geometry"] = g;
      j["checkpoint_precision"] = p;
      j["triad_standalone_gb_s"] = triad;
      j["x_standalone_triad"] = j.at("decode_gb_s").get<double>() / triad;
      FootprintShape shape;
      shape.threads = num_threads();
      shape.max_context = 4096;
      const Footprint f = Ladder::single(dir, {}, shape)->rung(0).footprint();
      json at = json::object();
      for (const int64_t ctx : {int64_t{1024}, int64_t{4096}}) {
        at[std::to_string(ctx)] = to_mib(f.total(ctx));
      }
      j["footprint"] = {{"weight_mib", to_mib(f.weight_bytes + f.heap_weight_bytes)},
                        {"kv_bytes_per_token", f.kv_bytes_per_token},
                        {"scratch_mib", to_mib(f.scratch_bytes)},
                        {"max_context", shape.max_context},
                        {"total_mib_at", at}};
      speed.push_back(j);
    }
  }
  if (progress && runs > 0) progress("real geometries: decode", runs, runs);
  out["speed"] = speed;

  // Switch cost down the real routes: bf16 rungs, a shape map of the real k.
  json sw = {{"shape_map_k", o.shape_map_k}, {"routes", json::array()}, {"rows", json::array()}};
  const int64_t longest =
      o.contexts.empty() ? 0 : *std::max_element(o.contexts.begin(), o.contexts.end());
  for (const auto& [sg, rg] : o.routes) {
    const std::string from = short_name(sg), to = short_name(rg);
    const std::string name = fmt::format("{}-{}", from, to);
    const fs::path route_dir = o.dir / "routes" / name;
    fs::create_directories(route_dir);
    const json manifest = {{"name", fmt::format("qwen2.5-{}-{}-synthetic", from, to)},
                           {"rungs",
                            {{{"name", from},
                              {"path", fs::absolute(real_checkpoint(o, sg, "bf16")).string()},
                              {"precision", "bf16"}},
                             {{"name", to},
                              {"path", fs::absolute(real_checkpoint(o, rg, "bf16")).string()},
                              {"precision", "bf16"}}}},
                           {"routes", {{{"from", from}, {"to", to}, {"maps", "maps/" + name}}}}};
    std::ofstream(route_dir / "ladder.json") << manifest.dump(1) << "\n";
    FootprintShape shape;
    shape.threads = num_threads();
    shape.max_context = longest + 1;
    {
      auto l = Ladder::open(route_dir / "ladder.json", shape);
      write_shape_map(*l, 0, 1, o.shape_map_k);
    }
    auto l = Ladder::open(route_dir / "ladder.json", shape);
    std::mt19937 rng(1);
    std::vector<int32_t> ids(static_cast<size_t>(longest + 1));
    const auto vocab = static_cast<uint32_t>(std::min<int64_t>(l->vocab_size(), 150000));
    for (int32_t& t : ids) t = static_cast<int32_t>(rng() % vocab);
    SwitchBenchOptions so;
    so.routes = {{from, to}};
    so.contexts = o.contexts;
    so.repeats = o.switch_repeats;
    so.fill_sender = true;
    const json r = run_switch_bench(*l, ids, so, [&](int64_t d, int64_t total) {
      if (progress) progress(fmt::format("real geometries: switch {} → {}", from, to), d, total);
    });
    for (const json& row : r.at("rows")) sw["rows"].push_back(row);
    json maps = json::object();
    for (const auto& e : fs::directory_iterator(route_dir / "maps" / name)) {
      if (e.is_regular_file()) maps[e.path().filename().string()] = sha256_file(e.path());
    }
    sw["routes"].push_back({{"from", from},
                            {"to", to},
                            {"from_checkpoint", real_checkpoint(o, sg, "bf16").filename().string()},
                            {"to_checkpoint", real_checkpoint(o, rg, "bf16").filename().string()},
                            {"map_sha256", maps}});
  }
  sw["contexts"] = o.contexts;
  sw["repeats"] = o.switch_repeats;
  out["switch"] = sw;
  return out;
}

}  // namespace molt
