// Steady-state decode allocates nothing: this binary's operator new counts every C++ heap
// allocation of every thread (OpenMP workers included) while a decode loop runs. Two caches
// decode interleaved on one Model, as two generations would, and each gets what it would
// alone.
#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <cstdlib>
#include <new>

#include "molt/common/error.h"
#include "molt/model/model.h"
#include "molt/model/synth.h"
#include "test_util.h"

namespace {

std::atomic<bool> g_counting{false};
std::atomic<int64_t> g_news{0};

void* counted_alloc(std::size_t n, std::size_t align) {
  if (g_counting.load(std::memory_order_relaxed)) g_news.fetch_add(1, std::memory_order_relaxed);
  if (n == 0) n = 1;
  void* p = align <= alignof(std::max_align_t)
                ? std::malloc(n)
                : std::aligned_alloc(align, (n + align - 1) / align * align);
  if (p == nullptr) throw std::bad_alloc();
  return p;
}

}  // namespace

void* operator new(std::size_t n) {
  return counted_alloc(n, 0);
}
void* operator new(std::size_t n, std::align_val_t a) {
  return counted_alloc(n, static_cast<std::size_t>(a));
}
// GCC at -O1 (the ASan preset) inlines these into gtest's `new TestClass` and takes the
// replaced pair for a mismatch; both sides are malloc/free here.
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wmismatched-new-delete"
#endif
void operator delete(void* p) noexcept {
  std::free(p);
}
void operator delete(void* p, std::size_t) noexcept {
  std::free(p);
}
void operator delete(void* p, std::align_val_t) noexcept {
  std::free(p);
}
void operator delete(void* p, std::size_t, std::align_val_t) noexcept {
  std::free(p);
}
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic pop
#endif

namespace molt {
namespace {

int32_t argmax(const std::vector<float>& v) {
  return static_cast<int32_t>(std::max_element(v.begin(), v.end()) - v.begin());
}

TEST(Decode, SteadyStateAllocatesNothingAndCachesInterleave) {
  test::TempDir dir;
  ModelConfig c = qwen25_geometry("qwen2.5-0.5b");
  c.hidden_size = 64, c.num_hidden_layers = 2, c.num_attention_heads = 4;
  c.num_key_value_heads = 2, c.head_dim = 16, c.intermediate_size = 96;
  c.vocab_size = 301, c.eos_token_ids = {300}, c.bos_token_id = 300;
  SynthOptions o;
  o.dtype = DType::BF16;
  o.seed = 5;
  write_synthetic_checkpoint(c, o, dir.path());
  auto m = Model::load(dir.path());
  const int64_t V = c.vocab_size, prompt = 20, steps = 49;
  std::vector<int32_t> ids_a(prompt), ids_b(prompt);
  for (int64_t i = 0; i < prompt; ++i) {
    ids_a[i] = static_cast<int32_t>((i * 7 + 1) % 300);
    ids_b[i] = static_cast<int32_t>((i * 13 + 2) % 300);
  }
  std::vector<float> la(V), lb(V);

  // The kernels keep per-thread working memory that grows only when a context is longer than
  // any the thread has attended over: one generation past the measured length sizes it.
  {
    KVCache warm = m->new_cache(prompt + steps + 8);
    m->prefill(ids_a, warm);
    for (int64_t t = 0; t < steps + 4; ++t) m->decode(1, warm, la);
  }
  KVCache a = m->new_cache(prompt + steps), b = m->new_cache(prompt + steps + 1);
  m->forward(ids_a, a, {}, la);
  m->forward(ids_b, b, {}, lb);
  std::vector<int32_t> fed_a;
  fed_a.reserve(steps);

  g_news = 0;
  g_counting = true;
  for (int64_t t = 0; t < steps; ++t) {
    const int32_t ta = argmax(la), tb = argmax(lb);
    fed_a.push_back(ta);
    m->decode(ta, a, la);
    m->decode(tb, b, lb);
  }
  g_counting = false;
  EXPECT_EQ(g_news.load(), 0) << "allocations during " << 2 * steps << " decode steps";
  // The hook is live: the convenience overload allocates its vector.
  g_counting = true;
  const std::vector<float> returned = m->decode(argmax(lb), b);
  g_counting = false;
  EXPECT_GE(g_news.load(), 1);

  // Cache a alone, same tokens: the same logits bit for bit.
  KVCache alone = m->new_cache(prompt + steps);
  std::vector<float> lc(V);
  m->forward(ids_a, alone, {}, lc);
  for (int32_t t : fed_a) m->decode(t, alone, lc);
  EXPECT_EQ(lc, la);
  EXPECT_EQ(alone.size(), a.size());
}

// Batched decode works in the first cache's scratch and the kernels' kept buffers: once a batch
// of this size has run, further steps allocate nothing either.
TEST(Decode, SteadyStateBatchAllocatesNothing) {
  test::TempDir dir;
  ModelConfig c = qwen25_geometry("qwen2.5-0.5b");
  c.hidden_size = 64, c.num_hidden_layers = 2, c.num_attention_heads = 4;
  c.num_key_value_heads = 2, c.head_dim = 16, c.intermediate_size = 128;
  c.vocab_size = 301, c.eos_token_ids = {300}, c.bos_token_id = 300;
  write_synthetic_checkpoint(c, SynthOptions{}, dir.path());
  for (Precision p : {Precision::Native, Precision::Q4}) {
    LoadOptions o;
    o.precision = p;
    auto m = Model::load(dir.path(), o);
    const int64_t V = c.vocab_size, steps = 20;
    std::vector<KVCache> caches;
    std::vector<KVCache*> ptrs;
    for (int64_t i = 0; i < 3; ++i) caches.push_back(m->new_cache(2 * steps + 16));
    for (KVCache& k : caches) ptrs.push_back(&k);
    for (int64_t i = 0; i < 3; ++i) {
      const std::vector<int32_t> ids(static_cast<size_t>(3 + 5 * i), static_cast<int32_t>(i + 1));
      m->prefill(ids, caches[static_cast<size_t>(i)]);
    }
    std::vector<float> logits(static_cast<size_t>(3 * V));
    std::vector<int32_t> tokens = {1, 2, 3};
    // Warm-up past the measured lengths (attention's per-thread buffers grow with the context).
    for (int64_t t = 0; t < steps + 4; ++t) m->decode_batch(tokens, ptrs, logits);
    for (KVCache& k : caches) k.truncate(k.size() - steps - 4);
    g_news = 0;
    g_counting = true;
    for (int64_t t = 0; t < steps; ++t) {
      for (int64_t i = 0; i < 3; ++i) {
        const float* l = logits.data() + i * V;
        tokens[static_cast<size_t>(i)] = static_cast<int32_t>(std::max_element(l, l + V) - l);
      }
      m->decode_batch(tokens, ptrs, logits);
    }
    g_counting = false;
    EXPECT_EQ(g_news.load(), 0) << "allocations during " << steps << " batched steps, precision "
                                << precision_name(p);
  }
}

TEST(Decode, IntoTheCallersBufferChecksItsSize) {
  test::TempDir dir;
  ModelConfig c = qwen25_geometry("qwen2.5-0.5b");
  c.hidden_size = 32, c.num_hidden_layers = 1, c.num_attention_heads = 2;
  c.num_key_value_heads = 1, c.head_dim = 16, c.intermediate_size = 48;
  c.vocab_size = 101, c.eos_token_ids = {100}, c.bos_token_id = 100;
  write_synthetic_checkpoint(c, SynthOptions{}, dir.path());
  auto m = Model::load(dir.path());
  KVCache cache = m->new_cache(4);
  std::vector<float> small(100), logits(101);
  EXPECT_THROW(m->decode(3, cache, small), Error);
  EXPECT_EQ(cache.size(), 0);
  m->decode(3, cache, logits);
  EXPECT_EQ(logits, [&] {
    KVCache other = m->new_cache(4);
    return m->decode(3, other);
  }());
}

}  // namespace
}  // namespace molt
