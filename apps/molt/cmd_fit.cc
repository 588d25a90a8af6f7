// molt fit: fit a route's KV map in closed form (transfer/fit.h says exactly how).
//   molt fit --from DIR --to DIR --corpus FILE --out DIR [options]   fit and write the map
//   (each writes the token-identity floor beside the map too: floor.safetensors)
//   molt fit ... --shard I/N                                          write partial statistics
//   molt fit merge DIR                                                sum the shards, solve, write
//   molt fit report DIR [--json]                                      what a map holds
//   molt fit floor DIR --to DIR --corpus FILE                         add the floor to a map dir
#include <fmt/core.h>
#include <fmt/format.h>

#include <charconv>
#include <chrono>
#include <climits>
#include <cstdio>
#include <optional>

#include "cmd_transfer_util.h"
#include "command.h"
#include "floor_cli.h"
#include "molt/common/error.h"
#include "molt/kernels/threads.h"
#include "molt/transfer/fit.h"
#include "molt/transfer/map_file.h"

namespace molt::cli {
namespace {

struct FitArgs {
  std::string from, to, corpus, corpus_ids, out;
  std::string k = "auto";
  std::string embed_tokens = "auto";
  std::string sender_kv = "separate";
  std::string method = "ridge";
  std::string shard;
  double lambda = 0.01;
  int64_t sequences = 500, seq_len = 1024, stride = 4, recompute = 0, native_layers = 0;
  int64_t heldout_every = 10, select_windows = 4;
  int threads = 2;
  bool keep_stats = false;
  bool no_floor = false;
  bool no_rope_sandwich = false;
  // merge / report
  std::string dir, merge_out, merge_method, merge_k, merge_embed, merge_sender_kv;
  double merge_lambda = -1;
  int64_t merge_native = -1;
  bool json = false;
};

std::string stats_name(int64_t index, int64_t count) {
  return fmt::format("stats-{}-of-{}.molt-stats", index + 1, count);
}

void log_line(const std::string& s) {
  fmt::print("{}\n", s);
  std::fflush(stdout);  // the solve takes a while: show each line as it comes
}

// --embed-tokens: auto or an integer in 0..16.
int64_t parse_embed_tokens(const std::string& e) {
  if (e == "auto") return kAutoEmbedTokens;
  int64_t n = -1;
  const auto r = std::from_chars(e.data(), e.data() + e.size(), n);
  if (e.empty() || r.ec != std::errc() || r.ptr != e.data() + e.size() || n < 0 || n > 16) {
    fail("--embed-tokens: '{}' is not auto or an integer in 0..16", e);
  }
  return n;
}

int64_t parse_k(const std::string& k) {
  if (k == "auto") return 0;
  if (k == "all") return INT_MAX;
  try {
    size_t used = 0;
    const long v = std::stol(k, &used);
    if (used == k.size() && v > 0) return v;
  } catch (const std::exception&) {
  }
  fail("--k: '{}' is not a positive integer, 'auto' or 'all'", k);
}

// The map and its token-identity floor appear together (write_map_dir's one unit) or not at all.
void write_map(const std::filesystem::path& out, const MapData& map,
               const std::optional<TokenFloor>& floor) {
  write_map_dir(out, map, [&](const std::filesystem::path& staging) {
    if (floor) write_token_floor(staging, *floor);
  });
  if (!floor) {
    std::error_code ec;  // an older fit's floor, carried over but no longer listed
    std::filesystem::remove(out / kTokenFloorFile, ec);
  }
  const auto& r = map.info["residuals"]["total"];
  fmt::print("wrote {} (method {}, k = {}, held-out residual K {:.4f} V {:.4f})\n",
             (out / "map.safetensors").string(), map.method, map.info["k"].dump(),
             r["k"]["rel_rms"].get<double>(), r["v"]["rel_rms"].get<double>());
  if (floor) {
    fmt::print("wrote {} (token-identity floor: {})\n", (out / kTokenFloorFile).string(),
               floor_line(*floor));
  }
}

void run_fit(const FitArgs& a) {
  if (a.from.empty() || a.to.empty() || a.out.empty()) {
    fail("molt fit needs --from, --to and --out (or a subcommand: merge, report)");
  }
  if (a.corpus.empty() == a.corpus_ids.empty()) {
    fail("molt fit needs exactly one of --corpus (text) and --corpus-ids (token ids)");
  }
  set_num_threads(a.threads);
  FitOptions o;
  o.method = a.method;
  o.k = parse_k(a.k);
  o.lambda = a.lambda;
  o.sequences = a.sequences;
  o.seq_len = a.seq_len;
  o.stride = a.stride;
  o.recompute_layers = a.recompute;
  o.native_layers = a.method == "ridge" ? a.native_layers : 0;
  o.heldout_every = a.heldout_every;
  o.select_windows = a.select_windows;
  o.token_identity = !a.no_floor;
  o.rope_sandwich = !a.no_rope_sandwich;
  o.sender_kv = a.method == "ridge" ? a.sender_kv : "separate";
  if (a.method != "ridge") {
    o.embed_tokens = 0;  // the callback refused an explicit --embed-tokens
  } else {
    o.embed_tokens = parse_embed_tokens(a.embed_tokens);
  }
  if (!a.shard.empty()) {
    // I/N, both decimal (std::regex here tripped GCC 12's maybe-uninitialized under ASan).
    const std::string& sh = a.shard;
    const size_t slash = sh.find('/');
    int64_t i = 0, n = 0;
    const auto parse = [](const char* b, const char* e, int64_t& v) {
      const auto r = std::from_chars(b, e, v);
      return b != e && r.ec == std::errc() && r.ptr == e && *b != '-' && *b != '+';
    };
    if (slash == std::string::npos || !parse(sh.data(), sh.data() + slash, i) ||
        !parse(sh.data() + slash + 1, sh.data() + sh.size(), n)) {
      fail("--shard: '{}' is not I/N (e.g. 2/4)", a.shard);
    }
    o.shard_index = i - 1;
    o.shard_count = n;
    if (o.shard_count < 1 || o.shard_index < 0 || o.shard_index >= o.shard_count) {
      fail("--shard {}: I must be in 1..N", a.shard);
    }
  }
  const std::filesystem::path corpus = a.corpus.empty() ? a.corpus_ids : a.corpus;
  o.sender_name = rung_name(a.from);
  o.receiver_name = rung_name(a.to);
  o.corpus_name = corpus.filename().string();
  o.sender_dir = std::filesystem::absolute(a.from).string();
  o.receiver_dir = std::filesystem::absolute(a.to).string();
  o.corpus_path = std::filesystem::absolute(corpus).string();
  o.corpus_ids = !a.corpus_ids.empty();

  auto sender = Model::load(a.from);
  auto receiver = Model::load(a.to);
  Corpus c = open_corpus(corpus, o.corpus_ids, a.from, a.to);
  const auto t0 = std::chrono::steady_clock::now();
  int64_t mine = 0;
  for (int64_t i = 0; i < o.sequences; ++i) mine += i % o.shard_count == o.shard_index;
  ProgressBar bar("fit " + o.sender_name + " → " + o.receiver_name, mine);
  RouteStats st = collect_stats(
      *sender, *receiver, *c.stream, o, [&](int64_t done, int64_t) { bar.update(done); }, log_line);
  bar.finish();
  const double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  fmt::print(
      "statistics: {} training + {} held-out windows of {} tokens ({} + {} rows) in {:.1f} s\n",
      st.train.sequences, st.heldout.sequences, o.seq_len, st.train.k.n, st.heldout.k.n, secs);
  const std::filesystem::path out = a.out;
  if (o.shard_count > 1 || a.keep_stats) {
    // The statistics are a file of their own, written whole or not at all, before the solve
    // (the shards of one fit share a folder and may run at once; kept statistics outlive a
    // failed solve). The map then replaces its two files and keeps them.
    const bool fresh = !std::filesystem::exists(out);
    std::filesystem::create_directories(out);
    const std::filesystem::path f = out / stats_name(o.shard_index, o.shard_count);
    try {
      st.save(f);
    } catch (const Error&) {
      std::error_code ec;
      if (fresh) std::filesystem::remove(out, ec);  // still empty: leave no trace
      throw;
    }
    fmt::print("wrote {}\n", f.string());
    if (o.shard_count > 1) {
      fmt::print("when all {} shards are in {}, run: molt fit merge {}\n", o.shard_count,
                 out.string(), out.string());
      return;
    }
  }
  MapData map = solve_route(st, *sender, *receiver, o, log_line);
  map.info["corpus_sha256"] = sha256_file(corpus);
  write_map(
      out, map,
      floor_from_fit(st, o, *receiver, map.info["corpus_sha256"].get<std::string>(), out.string()));
}

void run_merge(const FitArgs& a) {
  set_num_threads(a.threads);
  const std::filesystem::path dir = a.dir;
  if (!std::filesystem::is_directory(dir)) fail("{}: not a directory", dir.string());
  std::vector<std::filesystem::path> files;
  for (const auto& e : std::filesystem::directory_iterator(dir)) {
    if (e.path().extension() == ".molt-stats") files.push_back(e.path());
  }
  std::sort(files.begin(), files.end());
  if (files.empty())
    fail("{}: no *.molt-stats files (write them with molt fit --shard I/N)", dir.string());
  RouteStats st = RouteStats::load(files[0]);
  for (size_t i = 1; i < files.size(); ++i) st.merge(RouteStats::load(files[i]), files[i].string());
  std::vector<int64_t> have;
  for (int64_t s : st.shards_merged) have.push_back(s + 1);
  fmt::print("merged {} statistics files: shards {} of {}\n", files.size(), fmt::join(have, ", "),
             st.shard_count);
  if (static_cast<int64_t>(st.shards_merged.size()) != st.shard_count) {
    std::vector<int64_t> missing;
    for (int64_t s = 0; s < st.shard_count; ++s) {
      if (std::find(st.shards_merged.begin(), st.shards_merged.end(), s) ==
          st.shards_merged.end()) {
        missing.push_back(s + 1);
      }
    }
    fail("{}: shards {} of {} are missing", dir.string(), fmt::join(missing, ", "), st.shard_count);
  }
  FitOptions o = fit_options_from_settings(st.settings);
  o.shard_index = 0;
  // The same statistics solve other variants (ablations): method, k, λ.
  if (!a.merge_method.empty()) o.method = a.merge_method;
  if (!a.merge_k.empty()) o.k = parse_k(a.merge_k);
  if (a.merge_lambda >= 0) o.lambda = a.merge_lambda;
  if (!a.merge_embed.empty()) o.embed_tokens = parse_embed_tokens(a.merge_embed);
  if (!a.merge_sender_kv.empty()) o.sender_kv = a.merge_sender_kv;
  if (a.merge_native >= 0) o.native_layers = a.merge_native;
  if (o.method != "ridge") {  // features are ridge inputs
    o.embed_tokens = 0;
    o.native_layers = 0;
    o.sender_kv = "separate";
  }
  auto sender = Model::load(o.sender_dir);
  auto receiver = Model::load(o.receiver_dir);
  MapData map = solve_route(st, *sender, *receiver, o, log_line);
  if (std::filesystem::exists(o.corpus_path))
    map.info["corpus_sha256"] = sha256_file(o.corpus_path);
  const std::filesystem::path out = a.merge_out.empty() ? dir : std::filesystem::path(a.merge_out);
  write_map(out, map,
            a.no_floor
                ? std::nullopt
                : floor_from_fit(st, o, *receiver, map.info.value("corpus_sha256", std::string()),
                                 out.string()));
}

std::string rung_line(const RungSpec& r) {
  const CacheGeometry& g = r.geometry;
  return fmt::format(
      "{} ({} layers, {} KV heads × {}, hidden {}; RoPE θ {}, head_dim {}, rotate-half)", r.name,
      g.n_layers, g.n_kv_heads, g.head_dim, g.hidden_size, r.rope.theta, r.rope.head_dim);
}

std::string text_of(const nlohmann::json& j) {
  return j.is_string() ? j.get<std::string>() : j.dump();
}

void run_report(const FitArgs& a) {
  const MapData map = read_map_dir(a.dir);
  if (a.json) {
    nlohmann::json j = map.info;
    j["method"] = map.method;
    j["sender"] = map.sender.to_json();
    j["receiver"] = map.receiver.to_json();
    nlohmann::json sk = nlohmann::json::array(), sv = nlohmann::json::array();
    for (const LayerMap& L : map.layers) sk.push_back(L.k_sources), sv.push_back(L.v_sources);
    j["sources"] = {{"k", sk}, {"v", sv}};
    j["features"] = map.features.to_json();
    j["checksum"] = "verified";
    j["token_identity_floor"] = floor_report(a.dir);
    fmt::print("{}\n", j.dump(2));
    return;
  }
  const nlohmann::json& info = map.info;
  fmt::print("map       {} (method {}, SHA-256 verified against index.json)\n", a.dir, map.method);
  fmt::print("sender    {}\n", rung_line(map.sender));
  fmt::print("receiver  {}\n", rung_line(map.receiver));
  const nlohmann::json stored = floor_report(a.dir);
  fmt::print("floor     {}\n", stored.is_null() ? "none (molt fit floor adds one)"
                                                : stored["summary"].get<std::string>());
  if (info.contains("k"))
    fmt::print("k         {} — {}\n", text_of(info["k"]), text_of(info.value("k_chosen_by", "")));
  fmt::print(
      "features  {}{}\n",
      map.features.embed_tokens > 0
          ? fmt::format("the receiver's {} of the token and the {} before it ({} "
                        "inputs per layer map after the sender's)",
                        map.features.native_layers > 0
                            ? fmt::format("hidden states after its first {} layer(s), run "
                                          "natively over the context,",
                                          map.features.native_layers)
                            : std::string("embeddings"),
                        map.features.embed_tokens - 1,
                        map.features.embed_tokens * map.receiver.geometry.hidden_size)
      : map.features.native_layers > 0
          ? fmt::format("none (the sender's K/V only; the receiver's first {} layer(s) run "
                        "natively)",
                        map.features.native_layers)
          : std::string("none (the sender's K/V only)"),
      map.features.joint_kv ? "; K and V maps read the sender's keys and values together" : "");
  if (info.contains("k_candidates")) {
    for (const auto& c : info["k_candidates"]) {
      fmt::print("            k = {:>2}{}{}: held-out residual K {:.4f} V {:.4f}{}\n",
                 c["k"].get<int64_t>(),
                 c.contains("embed_tokens")
                     ? fmt::format(", {} token features", c["embed_tokens"].get<int64_t>())
                     : "",
                 c.value("sender_kv", "separate") == "joint" ? ", K+V together" : "",
                 c["k_residual"]["rel_rms"].get<double>(), c["v_residual"]["rel_rms"].get<double>(),
                 c.contains("heldout_nll")
                     ? fmt::format(", prefix-KV NLL {:.4f} (gap {:+.4f})",
                                   c["heldout_nll"].get<double>(), c["nll_gap"].get<double>())
                     : "");
    }
  }
  if (info.contains("lambda")) {
    fmt::print("λ         {} applied to {}\n", text_of(info["lambda"]),
               text_of(info.value("lambda_applied_to", "")));
  }
  if (info.contains("ranked_by")) fmt::print("ranking   {}\n", text_of(info["ranked_by"]));
  if (info.contains("calibration")) {
    const auto& c = info["calibration"];
    fmt::print(
        "calib.    {} training + {} held-out windows × {} tokens, rows every {} tokens ({} + {} "
        "rows), corpus {}\n",
        c.value("train_windows", 0), c.value("heldout_windows", 0), c.value("seq_len", 0),
        c.value("stride", 0), c.value("train_rows", 0.0), c.value("heldout_rows", 0.0),
        text_of(info.value("corpus", "?")));
  }
  if (!info.contains("residuals")) return;
  const auto& res = info["residuals"];
  const bool floor = res["total"].contains("k_token_identity");
  fmt::print("\nresiduals on {}, keys {}: relative RMS ‖Y−Ŷ‖/‖Y‖ (centred ‖Y−Ŷ‖/‖Y−Ȳ‖){}\n",
             text_of(res.value("on", "")), text_of(res.value("keys", "")),
             floor ? "; token-identity floor beside" : "");
  fmt::print("{:>5}  {:<18} {:<18} {:>17} {:>17}{}\n", "layer", "K sources", "V sources", "K", "V",
             floor ? "   floor K           floor V" : "");
  auto cell = [](const nlohmann::json& r) {
    return fmt::format("{:.4f} ({:.4f})", r["rel_rms"].get<double>(), r["centred"].get<double>());
  };
  for (const auto& L : res["layers"]) {
    const int64_t j = L["layer"].get<int64_t>();
    fmt::print("{:>5}  {:<18} {:<18} {:>17} {:>17}{}\n", j,
               fmt::format("{}", fmt::join(map.layers[j].k_sources, ",")),
               fmt::format("{}", fmt::join(map.layers[j].v_sources, ",")), cell(L["k"]),
               cell(L["v"]),
               floor ? fmt::format("   {:>17} {:>17}", cell(L["k_token_identity"]),
                                   cell(L["v_token_identity"]))
                     : "");
  }
  fmt::print("{:>5}  {:<18} {:<18} {:>17} {:>17}{}\n", "all", "", "", cell(res["total"]["k"]),
             cell(res["total"]["v"]),
             floor ? fmt::format("   {:>17} {:>17}", cell(res["total"]["k_token_identity"]),
                                 cell(res["total"]["v_token_identity"]))
                   : "");
  for (const auto& b : res["boundary"]) {
    fmt::print("boundary r = {}: sender hidden {} → receiver hidden {}: {:.4f} ({:.4f})\n",
               b["r"].get<int64_t>(), b["sender_hidden"].get<int64_t>(),
               b["receiver_hidden"].get<int64_t>(), b["rel_rms"].get<double>(),
               b["centred"].get<double>());
  }
}

const bool registered = register_command([](CLI::App& root) {
  auto a = std::make_shared<FitArgs>();
  // Not a group(): `molt fit` runs with options itself, merge / report are optional.
  CLI::App* f =
      root.add_subcommand("fit", "Fit a KV map for a route (sender → receiver) in closed form");
  f->require_subcommand(0, 1);
  f->add_option("--from", a->from, "sender checkpoint directory");
  f->add_option("--to", a->to, "receiver checkpoint directory");
  f->add_option("--corpus", a->corpus, "calibration text (tokenized with the sender's tokenizer)");
  f->add_option("--corpus-ids", a->corpus_ids, "calibration token ids, whitespace-separated");
  f->add_option("--out", a->out, "output directory (map.safetensors + index.json)");
  f->add_option("--k", a->k,
                "sender layers per receiver layer: N, all, or auto (by held-out prefix NLL)");
  f->add_option("--embed-tokens", a->embed_tokens,
                "ridge inputs gain the receiver's embeddings of the token and the N − 1 before "
                "it: N in 0..16, or auto (0, 1 or 3, chosen with k by held-out prefix NLL)");
  f->add_option("--native-layers", a->native_layers,
                "ridge: the receiver's first N layers run natively over the context when the map "
                "is applied, and the token features are the hidden states they produce instead "
                "of the embeddings (N below the receiver's layers)")
      ->check(CLI::NonNegativeNumber);
  f->add_option("--sender-kv", a->sender_kv,
                "what each ridge map reads of the sender: separate (K maps keys, V maps values), "
                "joint (both read keys and values of their source layers; statistics twice as "
                "wide), or auto (both tried, chosen with k by held-out prefix NLL)")
      ->check(CLI::IsMember({"separate", "joint", "auto"}));
  f->add_option("--lambda", a->lambda, "ridge λ on the centred input covariance")
      ->check(CLI::NonNegativeNumber);
  f->add_option("--sequences", a->sequences, "calibration windows")->check(CLI::PositiveNumber);
  f->add_option("--seq-len", a->seq_len, "tokens per window")->check(CLI::Range(2, 1 << 20));
  f->add_option("--stride", a->stride, "take every stride-th position as a row")
      ->check(CLI::PositiveNumber);
  f->add_option("--recompute-layers", a->recompute,
                "fit boundary maps for r = 1..R (selective recompute)")
      ->check(CLI::NonNegativeNumber);
  f->add_option("--method", a->method, "ridge | depth-remap | diagonal")
      ->check(CLI::IsMember({"ridge", "depth-remap", "diagonal"}));
  f->add_option("--heldout-every", a->heldout_every, "hold out every N-th window (0: none)")
      ->check(CLI::NonNegativeNumber);
  f->add_option("--select-windows", a->select_windows, "held-out windows used to choose k")
      ->check(CLI::PositiveNumber);
  f->add_option("--shard", a->shard, "I/N: accumulate only this shard's windows, write statistics");
  f->add_flag("--keep-stats", a->keep_stats, "also write the statistics file");
  f->add_flag("--no-floor", a->no_floor,
              "no token-identity floor beside the map (a map fitted only to be compared with)");
  f->add_flag("--no-rope-sandwich", a->no_rope_sandwich,
              "map keys as cached, after RoPE (no un-rotation, no re-rotation): the ablation "
              "the RoPE sandwich is measured against; needs --no-floor");
  f->add_option("--threads", a->threads, "threads (0 = all cores)")->check(CLI::NonNegativeNumber);
  f->callback([a, f] {
    if (!f->get_subcommands().empty()) return;
    if (a->no_rope_sandwich && !a->no_floor) {
      fail(
          "--no-rope-sandwich needs --no-floor: the token-identity floor is a mean of un-rotated "
          "keys, which a map on rotated keys never sees");
    }
    // A flag the method does not read is an error, not silently dropped.
    const bool k = f->count("--k") > 0, lambda = f->count("--lambda") > 0;
    if (a->method != "ridge" && f->count("--sender-kv") > 0) {
      fail("--sender-kv does not apply to --method {} (it chooses a ridge map's inputs)",
           a->method);
    }
    if (a->method != "ridge" && f->count("--native-layers") > 0) {
      fail("--native-layers does not apply to --method {} (they feed a ridge map's inputs)",
           a->method);
    }
    if (a->method != "ridge" && f->count("--embed-tokens") > 0) {
      fail("--embed-tokens does not apply to --method {} (token features are ridge inputs)",
           a->method);
    }
    if (a->method == "diagonal" && (k || lambda)) {
      fail(
          "{} does not apply to --method diagonal (receiver layer j reads sender layer j, "
          "no ridge)",
          k ? "--k" : "--lambda");
    }
    if (a->method == "depth-remap" && k) {
      fail("--k does not apply to --method depth-remap (k = 1: the proportional sender layer)");
    }
    run_fit(*a);
  });

  CLI::App* m = f->add_subcommand(
      "merge",
      "Sum the statistics files in DIR (shards, or one run's --keep-stats), solve, write the map");
  m->add_option("dir", a->dir, "directory holding stats-I-of-N.molt-stats")->required();
  m->add_option("--out", a->merge_out, "map directory (default: DIR)");
  m->add_option("--method", a->merge_method, "solve as ridge or depth-remap (default: as fitted)")
      ->check(CLI::IsMember({"ridge", "depth-remap", "diagonal"}));
  m->add_option("--k", a->merge_k, "override k: N, all or auto");
  m->add_option("--lambda", a->merge_lambda, "override λ")->check(CLI::NonNegativeNumber);
  m->add_option("--embed-tokens", a->merge_embed,
                "override the token features: N (up to what the statistics hold) or auto");
  m->add_option("--native-layers", a->merge_native,
                "0: statistics fitted with --native-layers solve a map without them (and without "
                "token features, --embed-tokens 0: the reference ridge)")
      ->check(CLI::NonNegativeNumber);
  m->add_option("--sender-kv", a->merge_sender_kv,
                "override what the maps read of the sender: separate, or joint / auto when the "
                "statistics hold K and V together")
      ->check(CLI::IsMember({"separate", "joint", "auto"}));
  m->add_flag("--no-floor", a->no_floor, "no token-identity floor beside the map");
  m->add_option("--threads", a->threads, "threads (0 = all cores)")->check(CLI::NonNegativeNumber);
  m->callback([a] { run_merge(*a); });

  add_fit_floor_command(f);

  CLI::App* r = f->add_subcommand("report", "Print a map's metadata and held-out residuals");
  r->add_option("dir", a->dir, "map directory")->required();
  r->add_flag("--json", a->json, "everything as one JSON object");
  r->callback([a] { run_report(*a); });
});

}  // namespace
}  // namespace molt::cli
