// How commands get the token-identity floor (transfer/token_floor.h, DESIGN.md §6). `molt fit`
// stores one beside each map and `molt fit floor` adds one to an existing map directory; the
// commands that show figures beside the floors read it back, or fit one now from calibration
// text (--floor-corpus), but never build it from their own evaluation windows.
#pragma once

#include <CLI/CLI.hpp>
#include <filesystem>
#include <optional>
#include <string>

#include "molt/model/model.h"
#include "molt/transfer/fit.h"
#include "molt/transfer/token_floor.h"

namespace molt::cli {

struct FloorFlags {
  std::string corpus, corpus_ids;  // calibration text / token ids to fit the floor on now
  int64_t windows = 0;             // 0: the map's calibration windows (else 500)
  bool given() const { return !corpus.empty() || !corpus_ids.empty(); }
};
// --floor-corpus, --floor-corpus-ids, --floor-windows.
void add_floor_flags(CLI::App* cmd, FloorFlags& f);
// Refuses the floor flags where no floor is drawn (`why`, e.g. "with --no-floors").
void refuse_floor_flags(const FloorFlags& f, const std::string& why);

// The floor for `receiver`: fitted now on the flags' corpus (the windows of `w`, --floor-windows
// overriding their count) when given, else the one stored in `dir`. With neither, refuses,
// naming `dir` and the command that fits one; `dir` empty: `missing` says what to pass.
TokenFloor resolve_floor(const FloorFlags& f, const std::filesystem::path& dir,
                         const std::filesystem::path& receiver_dir, const Model& receiver,
                         FloorWindows w, const std::string& missing = {});

// `molt fit` / `molt fit merge`: the floor from the statistics' per-token sums, to be written
// with the map at `out`; none (and a line saying how to fit one) when they hold no such sums.
std::optional<TokenFloor> floor_from_fit(const RouteStats& stats, const FitOptions& o,
                                         const Model& receiver, const std::string& corpus_sha256,
                                         const std::string& out);
// "N ids seen in R rows of W windows × L tokens (...) of CORPUS".
std::string floor_line(const TokenFloor& f);

// The stored floor's provenance plus a one-line "summary" (checksum verified), or null when the
// directory has none: for `molt fit report`.
nlohmann::json floor_report(const std::filesystem::path& dir);

// Registers `molt fit floor DIR --to DIR --corpus FILE` under `fit`.
void add_fit_floor_command(CLI::App* fit);

}  // namespace molt::cli
