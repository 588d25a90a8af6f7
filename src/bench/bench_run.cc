#include "molt/bench/bench_run.h"

#include <fmt/format.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <ctime>
#include <fstream>
#include <memory>
#include <nlohmann/json.hpp>
#include <thread>

#include "molt/bench/conditions_bench.h"
#include "molt/bench/kv_bench.h"
#include "molt/bench/needles.h"
#include "molt/bench/real_bench.h"
#include "molt/bench/switch_bench.h"
#include "molt/bench/transfer_bench.h"
#include "molt/common/error.h"
#include "molt/formats/hf_config.h"
#include "molt/kernels/linear.h"
#include "molt/kernels/ops.h"
#include "molt/kernels/threads.h"
#include "molt/ladder/ladder.h"
#include "molt/scheduler/bench.h"
#include "molt/tokenizer/tokenizer.h"
#include "molt/transfer/map_file.h"

namespace molt {
namespace {

namespace fs = std::filesystem;
using json = nlohmann::json;

// One line of a command's output ("" when it fails): git's answers for the provenance.
std::string first_line(const std::string& cmd) {
  std::FILE* p = popen(cmd.c_str(), "r");
  if (p == nullptr) return "";
  char buf[256] = {};
  std::string out = std::fgets(buf, sizeof buf, p) != nullptr ? buf : "";
  pclose(p);
  while (!out.empty() && (out.back() == '\n' || out.back() == '\r')) out.pop_back();
  return out;
}

std::string cpu_model() {
  std::ifstream f("/proc/cpuinfo");
  for (std::string line; std::getline(f, line);) {
    if (line.starts_with("model name") || line.starts_with("Model")) {
      const size_t c = line.find(':');
      if (c != std::string::npos) return line.substr(line.find_first_not_of(' ', c + 1));
    }
  }
  return "unknown";
}

// SHA-256 of every file the ladder's rungs and maps are read from, by path relative to the
// manifest's folder.
json ladder_sha256(const fs::path& manifest) {
  json out = json::object();
  const fs::path base = manifest.parent_path();
  out[manifest.filename().string()] = sha256_file(manifest);
  auto l = Ladder::open(manifest);
  auto add_dir = [&](const fs::path& dir) {
    if (!fs::is_directory(dir)) return;
    for (const auto& e : fs::directory_iterator(dir)) {
      if (e.is_regular_file()) {
        out[fs::relative(e.path(), base).generic_string()] = sha256_file(e.path());
      }
    }
  };
  for (int i = 0; i < l->size(); ++i) add_dir(l->rung(i).path());
  for (const ManifestRoute& r : l->manifest().routes) {
    if (r.method == "maps") add_dir(r.maps);
  }
  return out;
}

// A copy of `manifest` whose routes with maps of their own (maps/<name>) read
// maps/ablations/<name>-<suffix> instead, with absolute paths, written under `dir`. Records the
// map folders it points at in `read`.
fs::path ablation_manifest(const fs::path& manifest, const std::string& suffix, const fs::path& dir,
                           std::vector<fs::path>& read) {
  const fs::path base = fs::absolute(manifest).parent_path();
  json m = read_json_file(manifest);
  for (json& r : m.at("rungs")) r["path"] = (base / r.at("path").get<std::string>()).string();
  int swapped = 0;
  if (!m.contains("routes")) fail("{}: no routes", manifest.string());
  for (json& r : m.at("routes")) {
    if (!r.contains("maps")) continue;
    const fs::path maps = r.at("maps").get<std::string>();
    const fs::path alt = base / "maps" / "ablations" / (maps.filename().string() + "-" + suffix);
    if (fs::is_directory(alt)) {
      r["maps"] = alt.string();
      read.push_back(alt);
      ++swapped;
    } else {
      r["maps"] = (base / maps).string();
    }
    r.erase("evidence");  // measured on the shipped maps, not these
  }
  if (swapped == 0) fail("{}: no route has maps/ablations/<route>-{}", manifest.string(), suffix);
  fs::create_directories(dir);
  fs::path out = dir / ("ladder-" + suffix + ".json");
  std::ofstream(out) << m.dump(1);
  return out;
}

// Whether some route of `manifest` has a comparison map maps/ablations/<route>-<suffix>.
bool has_ablation(const fs::path& manifest, const std::string& suffix) {
  const fs::path dir = fs::absolute(manifest).parent_path() / "maps" / "ablations";
  if (!fs::is_directory(dir)) return false;
  for (const auto& e : fs::directory_iterator(dir)) {
    const std::string n = e.path().filename().string();
    if (e.is_directory() && n.ends_with("-" + suffix)) return true;
  }
  return false;
}

}  // namespace

fs::path default_real_dir() {
  if (const char* x = std::getenv("XDG_CACHE_HOME"); x != nullptr && *x != '\0') {
    return fs::path(x) / "molt" / "real-geometries";
  }
  if (const char* h = std::getenv("HOME"); h != nullptr && *h != '\0') {
    return fs::path(h) / ".cache" / "molt" / "real-geometries";
  }
  return fs::temp_directory_path() / "molt-real-geometries";
}

std::vector<fs::path> evaluation_traces(const fs::path& dir, bool quick) {
  std::vector<std::string> names = {"spike_mid_answer", "slow_squeeze", "flapping",
                                    "cut_below_smallest", "cut_and_recovery"};
  if (quick) names = {"spike_mid_answer", "cut_below_smallest"};
  std::vector<fs::path> out;
  out.reserve(names.size());
  for (const std::string& n : names) out.push_back(dir / (n + ".json"));
  return out;
}

json run_provenance(const fs::path& source_dir, int threads) {
  const std::string git = fmt::format("git -C '{}' ", source_dir.string());
  std::string commit = first_line(git + "rev-parse HEAD 2>/dev/null");
  const bool dirty = !commit.empty() && !first_line(git + "status --porcelain 2>/dev/null").empty();
  if (commit.empty()) commit = "unknown";
  const std::time_t now = std::time(nullptr);
  char when[32] = {};
  std::strftime(when, sizeof when, "%Y-%m-%dT%H:%M:%SZ", std::gmtime(&now));
  return {{"commit", commit},           {"dirty", dirty},
          {"cpu", cpu_model()},         {"cores", std::thread::hardware_concurrency()},
          {"simd", simd_target_name()}, {"gemm", gemm_path_name()},
          {"threads", threads},         {"started", when}};
}

json bench_run(const BenchRunOptions& o,
               const std::function<void(const std::string&, int64_t, int64_t)>& progress) {
  const auto t0 = std::chrono::steady_clock::now();
  set_num_threads(o.threads);
  auto ladder = Ladder::open(o.ladder);
  const bool quick = o.quick || o.smoke;
  std::vector<std::string> traces;
  for (const fs::path& t : o.traces.empty() ? evaluation_traces(o.traces_dir, quick) : o.traces) {
    if (!fs::exists(t)) fail("{}: trace not found", t.string());
    traces.push_back(t.string());
  }
  json results = {{"schema", "molt-results/1"},
                  {"quick", quick},
                  {"smoke", o.smoke},
                  {"provenance", run_provenance(fs::absolute(o.ladder).parent_path(), o.threads)}};
  auto tok = Tokenizer::load(ladder->rung(0).path());
  const int prose = o.smoke ? 1 : quick ? 2 : 12, chat = o.smoke ? 1 : quick ? 2 : 8;
  const std::vector<BenchPrompt> prompts =
      bench_prompts(*tok, o.text.string(), o.needles.string(), prose, chat);
  ConditionsOptions co;
  co.max_tokens = quick ? 40 : 48;
  // Ablations of molt: the route's map without token features and the depth remap (both
  // committed under maps/ablations/, solved from the shipped map's statistics), recompute and
  // anchors added.
  const fs::path scratch =
      fs::temp_directory_path() / fmt::format("molt-bench-{}", static_cast<long>(getpid()));
  // The ablations' manifests live there until the conditions are measured, errors included.
  struct RemoveDir {
    fs::path dir;
    ~RemoveDir() {
      std::error_code ec;
      fs::remove_all(dir, ec);
    }
  };
  auto scratch_guard = std::make_unique<RemoveDir>(RemoveDir{scratch});
  std::vector<fs::path> ablation_maps;
  co.ablations.push_back({"molt, ridge without token features",
                          "the shipped map's token features removed (the reference ridge)",
                          Policy::kMolt,
                          ablation_manifest(o.ladder, "ridge", scratch, ablation_maps).string(),
                          {},
                          "molt"});
  co.ablations.push_back(
      {"molt, depth remap",
       "the ridge map replaced by the depth remap (each receiver layer copies the "
       "proportional sender layer through the RoPE sandwich)",
       Policy::kMolt,
       ablation_manifest(o.ladder, "depth", scratch, ablation_maps).string(),
       {},
       "molt"});
  // The RoPE sandwich and the diagonal re-alignment, where their comparison maps are committed.
  const bool rope = has_ablation(o.ladder, "rope"), cross = has_ablation(o.ladder, "cross");
  if (rope) {
    co.ablations.push_back(
        {"molt, naive map on rotated keys",
         "the RoPE sandwich removed: a ridge map fitted and applied on keys as cached, after "
         "RoPE (no token features, as the reference ridge)",
         Policy::kMolt,
         ablation_manifest(o.ladder, "rope", scratch, ablation_maps).string(),
         {},
         "molt"});
  }
  if (cross) {
    co.ablations.push_back(
        {"molt, cross-size map between precisions",
         "the diagonal re-alignment replaced by a cross-size ridge map on the precision route",
         Policy::kMolt,
         ablation_manifest(o.ladder, "cross", scratch, ablation_maps).string(),
         {},
         "molt"});
  }
  co.ablations.push_back({"molt + recompute 2",
                          "the receiver's last 2 layers recomputed natively from the boundary map",
                          Policy::kMolt,
                          "",
                          {2, 0},
                          "molt"});
  co.ablations.push_back({"molt + anchors 16",
                          "the last 16 context tokens re-run natively on the receiver",
                          Policy::kMolt,
                          "",
                          {0, 16},
                          "molt"});
  results["conditions"] =
      run_conditions(*ladder, prompts, traces, co, [&](int64_t done, int64_t total) {
        if (progress) progress("conditions", done, total);
      });
  scratch_guard.reset();

  // Switch cost against context on the routes with maps of their own.
  SwitchBenchOptions sw;
  for (const ManifestRoute& r : ladder->manifest().routes) {
    if (r.method == "maps" && r.maps.filename() == r.from + "-" + r.to) {
      sw.routes.emplace_back(r.from, r.to);
    }
  }
  if (quick) {
    sw.routes.resize(std::min<size_t>(sw.routes.size(), 1));
    sw.contexts = {256};
    sw.repeats = 1;
  }
  const std::vector<int32_t> text_ids = tok->encode(read_text_file(o.text));
  results["switch"] = run_switch_bench(*ladder, text_ids, sw, [&](int64_t done, int64_t total) {
    if (progress) progress("switch", done, total);
  });
  // Tenants sharing one budget: the scheduler's standard scenario.
  if (progress) progress("tenants", 0, 1);
  sched::TenantsBenchOptions to;
  to.ladder = o.ladder;
  to.trace = o.traces_dir / "two_step_squeeze.json";
  to.threads = o.threads;
  if (!fs::exists(to.trace)) fail("{}: trace not found", to.trace.string());
  results["tenants"] = sched::run_tenants_bench(to);
  results["tenants"]["trace"] = to.trace.filename().string();
  if (progress) progress("tenants", 1, 1);
  // The KV cache's precision: bytes, prefix NLL and needles per row type. After the switch
  // costs, which time loads: these leave every rung loaded, and they are released here.
  KvBenchOptions kvo;
  if (quick) {
    kvo.context = 256;
    kvo.windows = o.smoke ? 1 : 2;
    kvo.needles = {{700, o.smoke ? 1 : 4}};
  }
  results["kv"] = run_kv_bench(*ladder, text_ids, o.needles, kvo, [&](int64_t done, int64_t total) {
    if (progress) progress("kv", done, total);
  });
  ladder->release_unused();
  // Transfer per route: residuals, prefix NLL beside the floors, needles at the switch.
  TransferBenchOptions tro;
  if (quick) {
    tro.windows = o.smoke ? 1 : 2;
    tro.needles = {{700, o.smoke ? 1 : 4}};
    if (o.smoke) {
      tro.prefix = 384;
      tro.continuation = 128;
    }
  }
  results["transfer"] =
      run_transfer_bench(*ladder, o.text, o.needles, tro, [&](int64_t done, int64_t total) {
        if (progress) progress("transfer", done, total);
      });
  ladder->release_unused();
  // Speed, memory and switch cost at the real geometries (synthetic weights).
  if (!o.real_dir.empty()) {
    RealBenchOptions ro;
    ro.dir = o.real_dir;
    if (quick) {
      ro.geometries = {"qwen2.5-0.5b"};
      ro.prompt_tokens = 32;
      ro.tokens = 4;
      ro.rounds = 2;
      ro.triad_repeats = 3;
      ro.routes = {};
    }
    results["real"] = run_real_bench(ro, progress);
  }
  json inputs = {{"ladder", o.ladder.generic_string()},
                 {"text", o.text.filename().string()},
                 {"needles", o.needles.filename().string()},
                 {"sha256", ladder_sha256(o.ladder)}};
  inputs["sha256"][o.text.filename().string()] = sha256_file(o.text);
  inputs["sha256"][o.needles.filename().string()] = sha256_file(o.needles);
  for (const std::string& t : traces) {
    inputs["sha256"][fs::path(t).filename().string()] = sha256_file(t);
  }
  inputs["sha256"][to.trace.filename().string()] = sha256_file(to.trace);
  const fs::path base = fs::absolute(o.ladder).parent_path();
  for (const fs::path& dir : ablation_maps) {
    for (const auto& e : fs::directory_iterator(dir)) {
      if (e.is_regular_file()) {
        inputs["sha256"][fs::relative(e.path(), base).generic_string()] = sha256_file(e.path());
      }
    }
  }
  results["inputs"] = inputs;
  // What this run does not measure yet, named on the page rather than left out silently.
  json missing =
      json::array({"tenants under other traces and tenant mixes than the standard "
                   "scenario"});
  if (!rope) {
    missing.push_back(
        "the ablation of the RoPE sandwich (a naive map on rotated keys): no maps/ablations/"
        "<route>-rope is committed");
  }
  if (!cross) {
    missing.push_back(
        "the ablation of the diagonal re-alignment (a cross-size map between precisions): no "
        "maps/ablations/<route>-cross is committed");
  }
  if (o.real_dir.empty()) {
    missing.push_back("speed, memory and switch cost at the real geometries (no --real-dir)");
  } else if (quick) {
    missing.push_back(
        "switch cost at the real 1.5B → 0.5B and 3B → 1.5B geometries, and speed beyond 0.5B at "
        "bf16 and 4-bit (a --quick run)");
  }
  if (quick) missing.push_back("needles at ~2,000 tokens (a --quick run)");
  if (o.smoke) {
    missing.push_back(
        "figures worth reading: this --smoke run measured 2 prompts, 1 evaluation window and 1 "
        "needle per set, enough to check the pipeline and not the method");
  }
  results["not_measured"] = missing;
  results["seconds"] = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  return results;
}

}  // namespace molt
