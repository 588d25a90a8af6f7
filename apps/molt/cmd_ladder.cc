// molt ladder: inspect a ladder manifest (rungs, footprints, routes, tokenizer check).
#include <fmt/format.h>

#include "command.h"
#include "ladder_cli.h"
#include "molt/common/error.h"
#include "molt/ladder/synthetic.h"

namespace molt::cli {
namespace {

struct ShowArgs {
  std::string file;
  int64_t context = 1024;
};

struct SynthLadderArgs {
  std::string out;
  int64_t vocab = 512;
  uint64_t seed = 1;
  bool reprefill_routes = false, fit_maps = false, no_tokenizer = false;
};

void show(const ShowArgs& a) {
  auto l = Ladder::open(a.file, FootprintShape{64, a.context, 1});
  fmt::print("{}: {}\n", l->name(), l->tokenizer_note());
  print_ladder(stdout, *l, a.context);
  for (const ManifestRoute& r : l->manifest().routes) {
    fmt::print("  route {} → {}: {}\n", r.from, r.to,
               r.method == "reprefill" ? std::string("re-prefill")
               : r.maps_present()
                   ? "maps " + r.maps.string()
                   : "maps " + r.maps.string() + " (absent: re-prefill until fitted)");
  }
}

const bool registered = register_command([](CLI::App& root) {
  CLI::App* g = root.add_subcommand("ladder", "Ladders: show a manifest, write a synthetic one");
  g->require_subcommand(1);
  auto a = std::make_shared<ShowArgs>();
  CLI::App* s = g->add_subcommand("show", "Rungs, footprints, routes and the tokenizer check");
  s->add_option("file", a->file, "ladder.json")->required();
  s->add_option("--context", a->context, "tokens of KV cache in the footprint")
      ->check(CLI::PositiveNumber);
  s->callback([a] { show(*a); });

  auto y = std::make_shared<SynthLadderArgs>();
  CLI::App* w =
      g->add_subcommand("synth", "Write a random-weight 3-rung ladder (tiny-ladder sizes)");
  w->add_option("--out", y->out, "output folder")->required();
  w->add_option("--vocab", y->vocab, "vocabulary (257 .. 958 with a tokenizer; any size without)");
  w->add_flag("--no-tokenizer", y->no_tokenizer,
              "write no tokenizer files (ids only; any vocabulary)");
  w->add_option("--seed", y->seed, "random seed");
  w->add_flag("--reprefill-routes", y->reprefill_routes,
              "routes re-prefill instead of naming map folders");
  w->add_flag("--fit-maps", y->fit_maps,
              "fit the routes' maps on random ids (real files, meaningless quality)");
  w->callback([y] {
    SyntheticLadderOptions o;
    o.vocab = y->vocab;
    o.seed = y->seed;
    o.route_method = y->reprefill_routes ? "reprefill" : "maps";
    o.tokenizer = !y->no_tokenizer;
    const auto manifest = write_synthetic_ladder(y->out, o);
    fmt::print("wrote {}\n", manifest.string());
    if (y->fit_maps) fit_missing_maps(*Ladder::open(manifest), stdout);
  });
});

}  // namespace
}  // namespace molt::cli
