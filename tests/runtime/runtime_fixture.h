// A synthetic three-rung ladder (tiny-ladder geometry, random weights, one tokenizer) for the
// runtime tests, written once per test binary, with maps fitted for its four routes through
// the transfer part's fitting API, and an oracle: the native greedy token of any rung after
// any prefix, computed by a fresh prefill.
#pragma once

#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <functional>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "ladder/shared_fixture.h"
#include "molt/kernels/threads.h"
#include "molt/ladder/ladder.h"
#include "molt/ladder/synthetic.h"
#include "molt/model/model.h"
#include "molt/runtime/session.h"
#include "molt/transfer/corpus.h"
#include "molt/transfer/fit.h"
#include "molt/transfer/map_file.h"
#include "test_util.h"

namespace molt::test {

constexpr int64_t kVocab = 400;

struct RuntimeLadder {
  std::filesystem::path with_maps, without_maps;  // manifests
  std::string maps_note;                          // why maps are absent, when they are
  std::vector<std::unique_ptr<Model>> models;     // oracle copies, in ladder order (l, m, s)

  RuntimeLadder() {
    set_num_threads(1);  // deterministic and quick on a shared machine
    const std::filesystem::path dir =
        shared_fixture("runtime-ladder", [this](const std::filesystem::path& d) {
          SyntheticLadderOptions o;
          o.vocab = kVocab;
          const auto manifest = write_synthetic_ladder(d / "maps-ladder", o);
          o.route_method = "reprefill";
          write_synthetic_ladder(d / "plain-ladder", o);
          fit_maps(*Ladder::open(manifest), d);
          std::ofstream(d / "maps_note.txt") << maps_note;
        });
    with_maps = dir / "maps-ladder" / "ladder.json";
    without_maps = dir / "plain-ladder" / "ladder.json";
    maps_note = read_file(dir / "maps_note.txt");
    auto l = Ladder::open(with_maps);
    for (int i = 0; i < l->size(); ++i) models.push_back(Model::load(l->rung(i).path()));
  }

  // Small fits (random weights: the point is a real map file through the real code path).
  void fit_maps(const Ladder& l, const std::filesystem::path& dir) {
    const std::filesystem::path corpus = dir / "corpus.txt";
    {
      std::ofstream f(corpus);
      std::mt19937 rng(5);
      for (int i = 0; i < 12 * 48 + 8; ++i) f << rng() % kVocab << ' ';
    }
    try {
      for (const ManifestRoute& r : l.manifest().routes) {
        auto sp = Model::load(l.rung(l.index(r.from)).path()),
             dp = Model::load(l.rung(l.index(r.to)).path());
        const Model &s = *sp, &d = *dp;
        FitOptions fo;
        fo.sequences = 12;
        fo.seq_len = 48;
        fo.stride = 2;
        fo.heldout_every = 4;
        fo.select_windows = 2;
        fo.k = 2;
        // As the shipped cross-size maps: the receiver's layer 0 native, its hidden states of
        // the token and the one before as features (heal then starts at layer 1).
        fo.native_layers = 1;
        fo.embed_tokens = 2;
        fo.corpus_name = "random ids";
        auto stream = TokenStream::ids(corpus);
        const RouteStats st = collect_stats(s, d, *stream, fo);
        write_map_dir(r.maps, solve_route(st, s, d, fo));
      }
    } catch (const std::exception& e) {
      maps_note = std::string("fitting the test maps failed: ") + e.what();
    }
  }

  // The native greedy next token of rung `r` after `prefix` (a fresh prefill).
  int32_t oracle(int r, const std::vector<int32_t>& prefix) const {
    const Model& m = *models[static_cast<size_t>(r)];
    KVCache c = m.new_cache(static_cast<int64_t>(prefix.size()));
    const std::vector<float> logits = m.prefill(prefix, c);
    return static_cast<int32_t>(std::max_element(logits.begin(), logits.begin() + kVocab) -
                                logits.begin());
  }
};

inline RuntimeLadder& runtime_ladder() {
  static RuntimeLadder l;
  return l;
}

inline std::vector<int32_t> test_prompt(int64_t n = 20) {
  std::vector<int32_t> p(static_cast<size_t>(n));
  for (size_t i = 0; i < p.size(); ++i) p[i] = static_cast<int32_t>((i * 37 + 11) % kVocab);
  return p;
}

// Footprint of rung r for a generation of this capacity (its own shape: default prefill chunk,
// this many positions, the threads in use, a cache of type kv: SessionOptions' by default).
inline double footprint_mib(const Ladder& l, int r, int64_t capacity,
                            KvDType kv = SessionOptions{}.kv_dtype) {
  const FootprintShape shape{SessionOptions{}.prefill_chunk, capacity, num_threads(), kv};
  return static_cast<double>(l.rung(r).footprint_for(shape).total(capacity)) / (1024.0 * 1024.0);
}

}  // namespace molt::test
