// The rows8 layout cache: an MLX checkpoint as published loads through a rows8 copy made once
// beside it (mapped, so parkable), equal to interleaving at load; the copy is reused, made again
// when the checkpoint changes (even with its mtime kept) or the copy is damaged, made in the user's
// cache folder when it cannot be written beside, and skipped (weights as stored, the reason in the
// note) when it cannot be written at all.
#include "molt/model/layout_cache.h"

#include <gtest/gtest.h>
#include <stdlib.h>  // NOLINT(modernize-deprecated-headers): setenv / unsetenv are POSIX

#include <chrono>
#include <filesystem>
#include <string>
#include <vector>

#include "molt/common/error.h"
#include "molt/formats/hf_config.h"
#include "molt/kernels/quant.h"
#include "molt/model/model.h"
#include "molt/model/quantize.h"
#include "molt/model/synth.h"
#include "small_config.h"
#include "test_util.h"

namespace molt {
namespace {

namespace fs = std::filesystem;

using test::small_config;

// MOLT_CACHE_DIR pointed at `dir` for the scope of one test.
class CacheDirEnv {
 public:
  explicit CacheDirEnv(const fs::path& dir) { setenv("MOLT_CACHE_DIR", dir.c_str(), 1); }
  ~CacheDirEnv() { unsetenv("MOLT_CACHE_DIR"); }
  CacheDirEnv(const CacheDirEnv&) = delete;
  CacheDirEnv& operator=(const CacheDirEnv&) = delete;
};

class LayoutCache : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!rows8_preferred()) GTEST_SKIP() << "this CPU's kernel reads MLX rows as they are";
    SynthOptions s;
    s.dtype = DType::BF16;
    s.seed = 5;
    write_synthetic_checkpoint(small_config(), s, dir_ / "dense");
    QuantizeOptions q;
    q.bits = 4;
    quantize_checkpoint(dir_ / "dense", mlx_, q);
  }

  // Prefill and two decode steps of a fixed prompt.
  static std::vector<float> run(const Model& m) {
    KVCache c = m.new_cache(16);
    std::vector<float> out = m.prefill(std::vector<int32_t>{3, 17, 40, 99, 5}, c);
    for (const int32_t t : {7, 250}) {
      const std::vector<float> l = m.decode(t, c);
      out.insert(out.end(), l.begin(), l.end());
    }
    return out;
  }

  static fs::file_time_type stamp_time(const fs::path& cache) {
    return fs::last_write_time(cache / "molt-source.json");
  }

  test::TempDir dir_;
  fs::path mlx_ = dir_ / "mlx-q4";
  fs::path beside_ = mlx_ / ".molt-cache" / "rows8";
};

TEST_F(LayoutCache, MlxCheckpointLoadsThroughAMappedRows8CopyMadeOnce) {
  CacheDirEnv env(dir_ / "user-cache");
  auto m = Model::load(mlx_);
  EXPECT_TRUE(m->weights().layers[0].up.rows8);
  EXPECT_TRUE(m->weights().lm_head.rows8);
  EXPECT_NE(m->layout_note().find("made now"), std::string::npos) << m->layout_note();
  EXPECT_EQ(m->store().dir(), beside_);
  // Mapped from the copy's file, not a heap copy: parking can give the pages back.
  EXPECT_EQ(m->weights().layers[1].gate.data,
            m->store().get("model.layers.1.mlp.gate_proj.weight").data);
  const ModelConfig c = load_model_config(beside_);
  ASSERT_TRUE(c.quantization);
  EXPECT_EQ(c.quantization->layout, "rows8");
  // The source's own files are untouched and its config still says MLX rows.
  EXPECT_EQ(load_model_config(mlx_).quantization->layout, "rows");

  // Interleaving at load and reading the copy give the same model bit for bit.
  LoadOptions mem, stored;
  mem.layout = WeightLayout::Memory;
  stored.layout = WeightLayout::Stored;
  auto h = Model::load(mlx_, mem);
  EXPECT_EQ(run(*m), run(*h));
  auto s = Model::load(mlx_, stored);
  EXPECT_FALSE(s->weights().layers[0].up.rows8);
  EXPECT_TRUE(s->layout_note().empty());

  // A second load reuses the copy.
  const fs::file_time_type t0 = stamp_time(beside_);
  auto again = Model::load(mlx_);
  EXPECT_EQ(again->layout_note(), "weights: rows8 copy " + beside_.string());
  EXPECT_EQ(stamp_time(beside_), t0);
  EXPECT_EQ(run(*again), run(*h));
  EXPECT_FALSE(fs::exists(dir_ / "user-cache"));
}

TEST_F(LayoutCache, AChangedCheckpointOrADamagedCopyIsMadeAgain) {
  CacheDirEnv env(dir_ / "user-cache");
  (void)Model::load(mlx_);
  // The checkpoint replaced in place (a new modification time): a new copy.
  fs::last_write_time(mlx_ / "model.safetensors",
                      fs::last_write_time(mlx_ / "model.safetensors") + std::chrono::seconds(5));
  auto m = Model::load(mlx_);
  EXPECT_NE(m->layout_note().find("made now"), std::string::npos) << m->layout_note();
  // Replaced by a same-size file with its mtime set back (as cp -p does): a new inode and
  // ctime, so a new copy.
  m.reset();
  const fs::file_time_type t = fs::last_write_time(mlx_ / "model.safetensors");
  fs::copy_file(mlx_ / "model.safetensors", dir_ / "replacement");
  fs::rename(dir_ / "replacement", mlx_ / "model.safetensors");
  fs::last_write_time(mlx_ / "model.safetensors", t);
  m = Model::load(mlx_);
  EXPECT_NE(m->layout_note().find("made now"), std::string::npos) << m->layout_note();
  // The copy cut short (as by a full disk or a crash after the stamp): made again, not read.
  m.reset();
  fs::resize_file(beside_ / "model.safetensors", 100);
  m = Model::load(mlx_);
  EXPECT_NE(m->layout_note().find("made now"), std::string::npos) << m->layout_note();
  LoadOptions mem;
  mem.layout = WeightLayout::Memory;
  EXPECT_EQ(run(*m), run(*Model::load(mlx_, mem)));
}

TEST_F(LayoutCache, UnwritableBesideGoesToTheUserCacheThenToTheStoredLayout) {
  // Where .molt-cache cannot be a folder (a file is in the way; a read-only folder is the usual
  // case, but tests may run as root), the copy goes to the user's cache folder.
  test::write_file(mlx_ / ".molt-cache", "not a folder");
  const fs::path user = dir_ / "user-cache";
  {
    CacheDirEnv env(user);
    auto m = Model::load(mlx_);
    const fs::path where = user_layout_cache_dir(mlx_);
    EXPECT_EQ(where.parent_path(), user / "rows8");
    EXPECT_EQ(m->store().dir(), where);
    EXPECT_TRUE(m->weights().layers[0].q.rows8);
    EXPECT_NE(m->layout_note().find("made now"), std::string::npos) << m->layout_note();
    auto again = Model::load(mlx_);
    EXPECT_EQ(again->layout_note(), "weights: rows8 copy " + where.string());
  }
  // Neither writable: the weights as stored, and the note says why.
  test::write_file(dir_ / "blocked", "a file, so no folder can be made under it");
  CacheDirEnv env(dir_ / "blocked" / "cache");
  auto m = Model::load(mlx_);
  EXPECT_FALSE(m->weights().layers[0].q.rows8);
  EXPECT_EQ(m->store().dir(), mlx_);
  EXPECT_NE(m->layout_note().find("weights: as stored (no rows8 copy"), std::string::npos)
      << m->layout_note();
  EXPECT_NE(m->layout_note().find(".molt-cache"), std::string::npos) << m->layout_note();
  LoadOptions stored;
  stored.layout = WeightLayout::Stored;
  EXPECT_EQ(run(*m), run(*Model::load(mlx_, stored)));
}

TEST_F(LayoutCache, DenseAndAlreadyInterleavedCheckpointsMakeNoCopy) {
  CacheDirEnv env(dir_ / "user-cache");
  auto d = Model::load(dir_ / "dense");
  EXPECT_TRUE(d->layout_note().empty());
  EXPECT_FALSE(fs::exists(dir_ / "dense" / ".molt-cache"));
  QuantizeOptions q;
  q.interleave = true;
  quantize_checkpoint(mlx_, dir_ / "r8", q);
  auto r = Model::load(dir_ / "r8");
  EXPECT_TRUE(r->weights().layers[0].q.rows8);
  EXPECT_FALSE(fs::exists(dir_ / "r8" / ".molt-cache"));
  // 8 bits: read as stored (both layouts decode alike), no copy.
  QuantizeOptions q8;
  q8.bits = 8;
  quantize_checkpoint(dir_ / "dense", dir_ / "q8", q8);
  auto e = Model::load(dir_ / "q8");
  EXPECT_FALSE(e->weights().layers[0].q.rows8);
  EXPECT_FALSE(fs::exists(dir_ / "q8" / ".molt-cache"));
  // Quantised at load (already a heap copy): interleaved in memory, no files.
  LoadOptions q4;
  q4.precision = Precision::Q4;
  auto h = Model::load(dir_ / "dense", q4);
  EXPECT_TRUE(h->weights().layers[0].q.rows8);
  EXPECT_FALSE(fs::exists(dir_ / "dense" / ".molt-cache"));
  EXPECT_THROW(parse_weight_layout("fast"), Error);
}

}  // namespace
}  // namespace molt
