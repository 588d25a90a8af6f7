// Route set-up for the front ends (route_setup.h).
#include "molt/runtime/route_setup.h"

#include <fmt/core.h>

#include <fstream>
#include <random>

#include "molt/common/error.h"
#include "molt/transfer/fit.h"
#include "molt/transfer/map_file.h"

namespace molt {

Corpus open_corpus(const std::filesystem::path& file, bool ids, const std::filesystem::path& sender,
                   const std::filesystem::path& receiver) {
  Corpus c;
  if (ids) {
    c.stream = TokenStream::ids(file);
    return c;
  }
  if (!has_tokenizer_files(sender)) {
    fail("{}: no tokenizer to read the text corpus {}; give token ids with --corpus-ids instead",
         sender.string(), file.string());
  }
  c.tokenizer = Tokenizer::load(sender);
  if (has_tokenizer_files(receiver)) {
    auto other = Tokenizer::load(receiver);
    if (other->fingerprint() != c.tokenizer->fingerprint()) {
      fail("{} and {} have different tokenizers: a map between them would pair unrelated tokens",
           sender.string(), receiver.string());
    }
  }
  c.stream = TokenStream::text(file, *c.tokenizer);
  return c;
}

void fit_missing_maps(const Ladder& l, std::FILE* log) {
  const std::filesystem::path corpus = l.manifest().file.parent_path() / "random-ids.txt";
  {
    std::ofstream f(corpus);
    std::mt19937 rng(5);
    for (int i = 0; i < 16 * 64 + 8; ++i) f << rng() % static_cast<uint32_t>(l.vocab_size()) << ' ';
  }
  for (const ManifestRoute& r : l.manifest().routes) {
    if (r.method != "maps" || r.maps_present()) continue;
    auto s = Model::load(l.rung(l.index(r.from)).path()),
         d = Model::load(l.rung(l.index(r.to)).path());
    FitOptions fo;
    fo.sequences = 16;
    fo.seq_len = 64;
    fo.stride = 2;
    fo.heldout_every = 4;
    fo.select_windows = 2;
    fo.corpus_name = "random ids";
    fo.sender_name = r.from;
    fo.receiver_name = r.to;
    auto stream = TokenStream::ids(corpus);
    const RouteStats st = collect_stats(*s, *d, *stream, fo);
    write_map_dir(r.maps, solve_route(st, *s, *d, fo));
    if (log)
      fmt::print(log, "fitted {} → {} on random ids into {}\n", r.from, r.to, r.maps.string());
  }
}

}  // namespace molt
