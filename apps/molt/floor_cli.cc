#include "floor_cli.h"

#include <fmt/core.h>
#include <fmt/format.h>

#include "cmd_transfer_util.h"
#include "molt/common/error.h"
#include "molt/kernels/threads.h"
#include "molt/transfer/map_file.h"

namespace molt::cli {
namespace {

// The receiver the map was fitted for must be the one given.
void check_receiver(const MapData& map, const std::filesystem::path& dir, const Model& receiver,
                    const std::filesystem::path& receiver_dir) {
  const RungSpec have = RungSpec::of(receiver, rung_name(receiver_dir));
  const CacheGeometry &a = map.receiver.geometry, &b = have.geometry;
  if (a.n_layers != b.n_layers || a.n_kv_heads != b.n_kv_heads || a.head_dim != b.head_dim ||
      a.hidden_size != b.hidden_size || map.receiver.rope.theta != have.rope.theta ||
      map.receiver.rope.head_dim != have.rope.head_dim) {
    fail(
        "{}: the map's receiver is {} ({} layers, {} KV heads × {}, hidden {}) but --to {} has "
        "{} layers, {} KV heads × {}, hidden {}: a floor is fitted on the map's receiver",
        (dir / "map.safetensors").string(), map.receiver.name, a.n_layers, a.n_kv_heads, a.head_dim,
        a.hidden_size, receiver_dir.string(), b.n_layers, b.n_kv_heads, b.head_dim, b.hidden_size);
  }
}

}  // namespace

std::string floor_line(const TokenFloor& f) {
  const nlohmann::json c = f.info.value("calibration", nlohmann::json::object());
  return fmt::format(
      "{} ids seen in {} rows of {} windows × {} tokens (a row every {} positions) of {}",
      c.value("distinct_tokens", int64_t{0}), c.value("rows", int64_t{0}),
      c.value("windows", int64_t{0}), c.value("seq_len", int64_t{0}), c.value("stride", int64_t{0}),
      f.info.value("corpus", std::string("?")));
}

void add_floor_flags(CLI::App* cmd, FloorFlags& f) {
  cmd->add_option("--floor-corpus", f.corpus,
                  "fit the token-identity floor now on this calibration text (instead of the "
                  "stored floor; never the evaluation text)");
  cmd->add_option("--floor-corpus-ids", f.corpus_ids,
                  "the same from token ids, whitespace-separated");
  cmd->add_option("--floor-windows", f.windows,
                  "calibration windows for --floor-corpus (default: the map's, else 500)")
      ->check(CLI::PositiveNumber);
}

void refuse_floor_flags(const FloorFlags& f, const std::string& why) {
  if (!f.corpus.empty()) fail("--floor-corpus does not apply {}", why);
  if (!f.corpus_ids.empty()) fail("--floor-corpus-ids does not apply {}", why);
  if (f.windows > 0) fail("--floor-windows does not apply {}", why);
}

TokenFloor resolve_floor(const FloorFlags& f, const std::filesystem::path& dir,
                         const std::filesystem::path& receiver_dir, const Model& receiver,
                         FloorWindows w, const std::string& missing) {
  if (!f.corpus.empty() && !f.corpus_ids.empty())
    fail("give one of --floor-corpus and --floor-corpus-ids, not both");
  if (!f.given()) {
    if (f.windows > 0) fail("--floor-windows applies only with --floor-corpus");
    if (dir.empty()) fail("{}", missing);
    if (!has_token_floor(dir)) {
      fail(
          "{}: no token-identity floor (index.json lists no {}). The floor's means come from "
          "calibration text, never from the evaluation windows: fit one with `molt fit floor {} "
          "--to {} --corpus CALIBRATION_TEXT`, or pass --floor-corpus FILE{}",
          dir.string(), kTokenFloorFile, dir.string(), receiver_dir.string(),
          missing.empty() ? " (or --no-floors)" : "");
    }
    return read_token_floor(dir);
  }
  const bool ids = !f.corpus_ids.empty();
  const std::filesystem::path file = ids ? f.corpus_ids : f.corpus;
  if (f.windows > 0) w.sequences = f.windows;
  Corpus c = open_corpus(file, ids, receiver_dir, receiver_dir);
  const nlohmann::json info = {{"corpus", file.filename().string()},
                               {"corpus_sha256", sha256_file(file)},
                               {"created_by", "fitted in memory (--floor-corpus)"}};
  ProgressBar bar("[floor]", w.sequences);
  TokenFloor floor =
      fit_token_floor(receiver, RungSpec::of(receiver, rung_name(receiver_dir)), *c.stream, w, info,
                      [&](int64_t done, int64_t) { bar.update(done); });
  bar.finish();
  return floor;
}

std::optional<TokenFloor> floor_from_fit(const RouteStats& stats, const FitOptions& o,
                                         const Model& receiver, const std::string& corpus_sha256,
                                         const std::string& out) {
  if (!o.token_identity) {
    fmt::print("no token-identity floor (--no-floor)\n");
    return std::nullopt;
  }
  if (stats.layout.token_vocab <= 0) {
    fmt::print(
        "no token-identity floor: the vocabulary is too large for per-token sums during the "
        "fit; fit one with molt fit floor {} --to {} --corpus FILE\n",
        out, o.receiver_dir);
    return std::nullopt;
  }
  const nlohmann::json info = {
      {"corpus", o.corpus_name}, {"corpus_sha256", corpus_sha256}, {"created_by", "molt fit"}};
  return token_floor_from_stats(stats, RungSpec::of(receiver, o.receiver_name), info);
}

nlohmann::json floor_report(const std::filesystem::path& dir) {
  if (!has_token_floor(dir)) return nullptr;
  const TokenFloor f = read_token_floor(dir);
  nlohmann::json j = f.provenance();
  j["summary"] =
      fmt::format("{}: {}; SHA-256 verified against index.json", kTokenFloorFile, floor_line(f));
  return j;
}

namespace {

struct FloorArgs {
  std::string dir, to, corpus, corpus_ids;
  int64_t sequences = 0, seq_len = 0, stride = 0;
  int threads = 2;
};

void run_fit_floor(const FloorArgs& a) {
  if (a.corpus.empty() == a.corpus_ids.empty()) {
    fail("molt fit floor needs exactly one of --corpus (text) and --corpus-ids (token ids)");
  }
  set_num_threads(a.threads);
  const std::filesystem::path dir = a.dir;
  const MapData map = read_map_dir(dir);  // the map's checksum, and its calibration windows
  auto receiver = Model::load(a.to);
  check_receiver(map, dir, *receiver, a.to);
  FloorWindows w = FloorWindows::of_map(map);
  if (a.sequences > 0) w.sequences = a.sequences;
  if (a.seq_len > 0) w.seq_len = a.seq_len;
  if (a.stride > 0) w.stride = a.stride;
  const bool ids = !a.corpus_ids.empty();
  const std::filesystem::path file = ids ? a.corpus_ids : a.corpus;
  Corpus c = open_corpus(file, ids, a.to, a.to);
  const std::string sha = sha256_file(file);
  const std::string fitted_on = map.info.value("corpus_sha256", std::string());
  if (!fitted_on.empty() && fitted_on != sha) {
    fmt::print("note: {} is not the text the map was fitted on ({}, SHA-256 {})\n", file.string(),
               map.info.value("corpus", std::string("?")), fitted_on);
  }
  const nlohmann::json info = {{"corpus", file.filename().string()},
                               {"corpus_sha256", sha},
                               {"created_by", "molt fit floor"}};
  ProgressBar bar("floor " + rung_name(a.to), w.sequences);
  const TokenFloor floor =
      fit_token_floor(*receiver, RungSpec::of(*receiver, map.receiver.name), *c.stream, w, info,
                      [&](int64_t done, int64_t) { bar.update(done); });
  bar.finish();
  const int64_t read = floor.info["calibration"]["windows"].get<int64_t>();
  if (read < w.sequences) {
    fmt::print("note: {} holds only {} windows of {} tokens (asked for {})\n", file.string(), read,
               w.seq_len, w.sequences);
  }
  add_token_floor(dir, floor);
  fmt::print("wrote {} (token-identity floor: {}); {} is unchanged\n",
             (dir / kTokenFloorFile).string(), floor_line(floor),
             (dir / "map.safetensors").string());
}

}  // namespace

void add_fit_floor_command(CLI::App* fit) {
  auto a = std::make_shared<FloorArgs>();
  CLI::App* s = fit->add_subcommand(
      "floor",
      "Fit the token-identity floor (the receiver's mean K/V per token id over calibration "
      "text) into an existing map directory, leaving the map as it is");
  s->add_option("dir", a->dir, "map directory (molt fit --out)")->required();
  s->add_option("--to", a->to, "the map's receiver checkpoint directory")->required();
  s->add_option("--corpus", a->corpus, "calibration text (tokenized with the receiver's)");
  s->add_option("--corpus-ids", a->corpus_ids, "calibration token ids, whitespace-separated");
  s->add_option("--sequences", a->sequences, "calibration windows (default: the map's)")
      ->check(CLI::PositiveNumber);
  s->add_option("--seq-len", a->seq_len, "tokens per window (default: the map's)")
      ->check(CLI::Range(2, 1 << 20));
  s->add_option("--stride", a->stride, "take every stride-th position (default: the map's)")
      ->check(CLI::PositiveNumber);
  s->add_option("--threads", a->threads, "threads (0 = all cores)")->check(CLI::NonNegativeNumber);
  s->callback([a, fit] {
    // `molt fit --k 3 floor DIR`: fit's own flags would be dropped silently; refuse them.
    for (const CLI::Option* opt : fit->get_options()) {
      if (opt->count() > 0 && opt->get_name() != "--help") {
        fail("{} does not apply to molt fit floor (it fits no map, only the receiver's floor)",
             opt->get_name());
      }
    }
    run_fit_floor(*a);
  });
}

}  // namespace molt::cli
