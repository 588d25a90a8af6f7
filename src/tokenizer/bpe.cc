#include "tokenizer/bpe.h"

#include <bit>
#include <climits>
#include <cstring>
#include <queue>

#include "molt/common/error.h"
#include "tokenizer/byte_level.h"

namespace molt::tok {
namespace {

constexpr size_t kSmallPiece = 64;  // longer pieces use the heap-based merge

}  // namespace

PairMap::PairMap(size_t n) {
  size_t cap = 16;
  while (cap < n * 2) cap <<= 1;
  slots_.assign(cap, Slot{kEmpty, {0, 0}});
  mask_ = cap - 1;
  shift_ = 64 - std::countr_zero(cap);
}

void PairMap::insert(int32_t left, int32_t right, Merge m) {
  const uint64_t key = pack(left, right);
  size_t i = slot(key);
  while (slots_[i].key != kEmpty && slots_[i].key != key) i = (i + 1) & mask_;
  if (slots_[i].key == kEmpty) ++size_;
  slots_[i] = {key, m};
}

Bpe::Bpe(std::vector<std::string> vocab, const std::vector<std::pair<int32_t, int32_t>>& merges,
         bool ignore_merges, const std::string& source)
    : vocab_(std::move(vocab)), merges_(merges.size()), ignore_merges_(ignore_merges) {
  token_to_id_.reserve(vocab_.size());
  for (size_t id = 0; id < vocab_.size(); ++id) {
    if (vocab_[id].empty()) continue;
    const int32_t earlier = token_to_id_.insert(vocab_[id], static_cast<int32_t>(id));
    if (earlier >= 0) {
      fail("{}: token '{}' appears twice (ids {} and {})", source, byte_level_encode(vocab_[id]),
           earlier, id);
    }
  }
  byte_token_.fill(-1);
  for (int b = 0; b < 256; ++b) byte_token_[b] = token_id(std::string(1, static_cast<char>(b)));

  std::string joined;
  for (size_t rank = 0; rank < merges.size(); ++rank) {
    const auto [l, r] = merges[rank];
    auto known = [&](int32_t id) {
      return id >= 0 && static_cast<size_t>(id) < vocab_.size() && !vocab_[id].empty();
    };
    if (!known(l) || !known(r)) fail("{}: merge {} refers to an unknown token id", source, rank);
    joined = vocab_[l] + vocab_[r];
    const int32_t result = token_id(joined);
    if (result < 0) {
      fail("{}: merge {} ('{}' + '{}') makes a token that is not in the vocabulary", source, rank,
           byte_level_encode(vocab_[l]), byte_level_encode(vocab_[r]));
    }
    merges_.insert(l, r, {static_cast<int32_t>(rank), result});
  }
}

int32_t Bpe::byte_token(uint8_t b) const {
  const int32_t id = byte_token_[b];
  if (id < 0) fail("the vocabulary has no token for byte 0x{:02X}", b);
  return id;
}

void Bpe::encode(std::string_view piece, std::vector<int32_t>& out) const {
  if (piece.size() == 1) {
    out.push_back(byte_token(static_cast<uint8_t>(piece[0])));
    return;
  }
  if (piece.size() > PieceCache::kMaxPiece) {
    encode_uncached(piece, out);
    return;
  }
  const uint64_t hash = hash_bytes(piece);
  {
    std::lock_guard<std::mutex> lock(cache_mu_);
    if (cache_.lookup(piece, hash, out)) return;
  }
  const size_t before = out.size();
  encode_uncached(piece, out);
  std::lock_guard<std::mutex> lock(cache_mu_);
  cache_.insert(piece, hash, std::span<const int32_t>(out.data() + before, out.size() - before));
}

void Bpe::encode_uncached(std::string_view piece, std::vector<int32_t>& out) const {
  if (ignore_merges_) {
    const int32_t whole = token_id(piece);
    if (whole >= 0) {
      out.push_back(whole);
      return;
    }
  }
  if (piece.size() <= kSmallPiece) {
    merge_small(piece, out);
  } else {
    merge_large(piece, out);
  }
}

void Bpe::clear_cache() const {
  std::lock_guard<std::mutex> lock(cache_mu_);
  cache_.clear();
}

// Quadratic in the piece length but with tiny constants: rescan the pair ranks for the lowest.
void Bpe::merge_small(std::string_view piece, std::vector<int32_t>& out) const {
  int32_t syms[kSmallPiece], ranks[kSmallPiece], results[kSmallPiece];
  size_t n = piece.size();
  for (size_t i = 0; i < n; ++i) syms[i] = byte_token(static_cast<uint8_t>(piece[i]));
  auto look = [&](size_t i) {
    const PairMap::Merge* m = merges_.find(syms[i], syms[i + 1]);
    ranks[i] = m ? m->rank : INT32_MAX;
    results[i] = m ? m->result : -1;
  };
  for (size_t i = 0; i + 1 < n; ++i) look(i);
  while (n > 1) {
    size_t best = 0;
    for (size_t i = 1; i + 1 < n; ++i) {
      if (ranks[i] < ranks[best]) best = i;
    }
    if (ranks[best] == INT32_MAX) break;
    syms[best] = results[best];
    // Symbols after the merged pair move down one; so do the pairs after its right neighbour
    // (the pair that starts at the neighbour is recomputed below).
    const size_t sym_tail = n - best - 2;
    const size_t pair_tail = sym_tail > 0 ? sym_tail - 1 : 0;
    std::memmove(syms + best + 1, syms + best + 2, sym_tail * sizeof(int32_t));
    std::memmove(ranks + best + 1, ranks + best + 2, pair_tail * sizeof(int32_t));
    std::memmove(results + best + 1, results + best + 2, pair_tail * sizeof(int32_t));
    --n;
    if (best > 0) look(best - 1);
    if (best + 1 < n) look(best);
  }
  out.insert(out.end(), syms, syms + n);
}

// Hugging Face's algorithm for long pieces: a heap of candidate merges ordered by (rank,
// position) over a linked list of symbols; entries made stale by earlier merges are skipped.
void Bpe::merge_large(std::string_view piece, std::vector<int32_t>& out) const {
  const int32_t n = static_cast<int32_t>(piece.size());
  std::vector<int32_t> id(n), prev(n), next(n);
  for (int32_t i = 0; i < n; ++i) {
    id[i] = byte_token(static_cast<uint8_t>(piece[i]));
    prev[i] = i - 1;
    next[i] = i + 1 < n ? i + 1 : -1;
  }
  struct Candidate {
    int32_t rank, pos, result;
    bool operator>(const Candidate& o) const {
      return rank != o.rank ? rank > o.rank : pos > o.pos;
    }
  };
  std::priority_queue<Candidate, std::vector<Candidate>, std::greater<>> heap;
  auto push = [&](int32_t pos) {
    if (const PairMap::Merge* m = merges_.find(id[pos], id[next[pos]])) {
      heap.push({m->rank, pos, m->result});
    }
  };
  for (int32_t i = 0; i + 1 < n; ++i) push(i);
  while (!heap.empty()) {
    const Candidate c = heap.top();
    heap.pop();
    const int32_t r = next[c.pos];
    if (id[c.pos] < 0 || r < 0) continue;
    const PairMap::Merge* m = merges_.find(id[c.pos], id[r]);
    if (m == nullptr || m->rank != c.rank || m->result != c.result) continue;  // stale
    id[c.pos] = c.result;
    id[r] = -1;  // dead
    next[c.pos] = next[r];
    if (next[r] >= 0) prev[next[r]] = c.pos;
    if (prev[c.pos] >= 0) push(prev[c.pos]);
    if (next[c.pos] >= 0) push(c.pos);
  }
  for (int32_t i = 0; i >= 0; i = next[i]) out.push_back(id[i]);
}

}  // namespace molt::tok
