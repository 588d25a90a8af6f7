// Quantised checkpoints: the C++ quantiser and dequantiser against the independent NumPy
// reference (tools/reference/mlx_quant.py) bit for bit; MLX-layout and int8 checkpoints
// written by molt quantize load and agree with load-time quantisation; logits and held-out
// NLL of the tiny ladder stay within stated tolerances of the original; malformed
// quantised checkpoints give errors naming the tensor.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>

#include "molt/common/error.h"
#include "molt/formats/hf_config.h"
#include "molt/formats/safetensors.h"
#include "molt/kernels/quant.h"
#include "molt/model/model.h"
#include "molt/model/quantize.h"
#include "molt/tokenizer/tokenizer.h"
#include "test_util.h"

namespace molt {
namespace {

namespace fs = std::filesystem;

fs::path fixture_path() {
  return fs::path(MOLT_SOURCE_DIR) / "tests" / "fixtures" / "mlx_quant" / "fixture.safetensors";
}
fs::path tiny_s() {
  return fs::path(MOLT_SOURCE_DIR) / "models" / "tiny-ladder" / "s";
}

bool same_bytes(const TensorView& t, const AlignedVector<uint8_t>& v) {
  return t.nbytes == v.size() && std::memcmp(t.data, v.data(), v.size()) == 0;
}

TEST(MlxReference, DequantizeAndQuantizeMatchNumPyBitForBit) {
  auto f = SafetensorsFile::open(fixture_path());
  const TensorView& src = *f->find("source");
  const int64_t rows = src.shape[0], cols = src.shape[1];
  const WeightMatrix source{src.dtype, rows, cols, src.data};
  int checked = 0;
  for (int bits : {4, 8}) {
    for (int G : {32, 64, 128}) {
      for (const char* sd : {"bf16", "f16", "f32"}) {
        const std::string name = fmt::format("affine_b{}_g{}_{}", bits, G, sd);
        SCOPED_TRACE(name);
        const TensorView& wt = *f->find(name + ".weight");
        const TensorView& st = *f->find(name + ".scales");
        const TensorView& bt = *f->find(name + ".biases");
        const TensorView& dq = *f->find(name + ".dequant");
        ASSERT_EQ(wt.dtype, DType::U32);
        ASSERT_EQ(wt.shape, (std::vector<int64_t>{rows, cols * bits / 32}));
        WeightMatrix w{DType::U32, rows, cols, wt.data};
        w.bits = bits;
        w.group_size = G;
        w.scale_dtype = st.dtype;
        w.scales = st.data;
        w.biases = bt.data;
        std::vector<float> row(static_cast<size_t>(cols));
        for (int64_t r = 0; r < rows; ++r) {
          dequantize_row(w, r, row.data());
          ASSERT_EQ(std::memcmp(row.data(), dq.data + r * cols * 4, cols * 4), 0) << "row " << r;
        }
        const QuantizedMatrix q = quantize_affine(source, bits, G, st.dtype);
        EXPECT_TRUE(same_bytes(wt, q.data)) << "packed weights differ";
        EXPECT_TRUE(same_bytes(st, q.scales)) << "scales differ";
        EXPECT_TRUE(same_bytes(bt, q.biases)) << "biases differ";
        ++checked;
      }
    }
  }
  for (int G : {0, 32, 64}) {
    const std::string name = fmt::format("int8_g{}", G);
    SCOPED_TRACE(name);
    const TensorView& wt = *f->find(name + ".weight");
    const TensorView& st = *f->find(name + ".scales");
    const TensorView& dq = *f->find(name + ".dequant");
    const QuantizedMatrix q = quantize_int8(source, G);
    EXPECT_TRUE(same_bytes(wt, q.data));
    EXPECT_TRUE(same_bytes(st, q.scales));
    std::vector<float> row(static_cast<size_t>(cols));
    for (int64_t r = 0; r < rows; ++r) {
      dequantize_row(q.view(), r, row.data());
      ASSERT_EQ(std::memcmp(row.data(), dq.data + r * cols * 4, cols * 4), 0) << "row " << r;
    }
    ++checked;
  }
  EXPECT_EQ(checked, 21);
}

// Mean NLL of `ids` (next-token) through one prefill per window.
double mean_nll(const Model& m, const std::vector<int32_t>& ids, int64_t window) {
  const int64_t V = m.config().vocab_size;
  double sum = 0.0;
  int64_t n = 0;
  for (size_t p = 0; p + 1 < ids.size(); p += static_cast<size_t>(window)) {
    const size_t len = std::min(ids.size() - p, static_cast<size_t>(window) + 1);
    std::vector<int32_t> in(ids.begin() + p, ids.begin() + p + len - 1);
    KVCache cache = m.new_cache(static_cast<int64_t>(in.size()));
    std::vector<float> logits(in.size() * V);
    m.forward(in, cache, logits);
    for (size_t t = 0; t < in.size(); ++t) {
      const float* l = &logits[t * V];
      const double mx = *std::max_element(l, l + V);
      double z = 0.0;
      for (int64_t v = 0; v < V; ++v) z += std::exp(l[v] - mx);
      sum += mx + std::log(z) - l[ids[p + t + 1]];
      ++n;
    }
  }
  return sum / static_cast<double>(n);
}

std::vector<int32_t> held_out_ids(size_t count) {
  std::ifstream f(fs::path(MOLT_SOURCE_DIR) / "models" / "tiny-ladder" / "data" / "test.txt");
  std::stringstream ss;
  ss << f.rdbuf();
  auto tok = Tokenizer::load(tiny_s() / "tokenizer.json");
  std::vector<int32_t> ids = tok->encode(ss.str().substr(0, 16 * count));
  if (ids.size() > count) ids.resize(count);
  return ids;
}

class TinyLadderQuant : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    if (!fs::exists(tiny_s() / "model.safetensors")) return;
    dir_ = new test::TempDir();
    QuantizeOptions q4, q8, i8, q4r8, q8r8, q8g32;
    q4.bits = 4;
    q8.bits = 8;
    q4r8.bits = 4;
    q4r8.interleave = true;
    q8r8.bits = 8;
    q8r8.group_size = 32;
    q8r8.interleave = true;
    q8g32.bits = 8;
    q8g32.group_size = 32;
    i8.mode = "int8";
    i8.bits = 8;
    i8.group_size = 0;
    quantize_checkpoint(tiny_s(), *dir_ / "q4", q4);
    quantize_checkpoint(tiny_s(), *dir_ / "q8", q8);
    quantize_checkpoint(tiny_s(), *dir_ / "int8", i8);
    quantize_checkpoint(tiny_s(), *dir_ / "q4-rows8", q4r8);
    quantize_checkpoint(tiny_s(), *dir_ / "q8g32-rows8", q8r8);
    quantize_checkpoint(tiny_s(), *dir_ / "q8g32", q8g32);
  }
  static void TearDownTestSuite() {
    delete dir_;
    dir_ = nullptr;
  }
  void SetUp() override {
    if (dir_ == nullptr) GTEST_SKIP() << "models/tiny-ladder/s is absent";
  }
  static test::TempDir* dir_;
};
test::TempDir* TinyLadderQuant::dir_ = nullptr;

TEST_F(TinyLadderQuant, WrittenCheckpointsHaveTheMlxLayout) {
  const ModelConfig c = load_model_config(*dir_ / "q4");
  ASSERT_TRUE(c.quantization);
  EXPECT_EQ(c.quantization->bits, 4);
  EXPECT_EQ(c.quantization->group_size, 64);
  const WeightStore s = WeightStore::open_dir(*dir_ / "q4");
  const TensorView& w = s.get("model.layers.0.mlp.down_proj.weight");
  EXPECT_EQ(w.dtype, DType::U32);
  EXPECT_EQ(w.shape, (std::vector<int64_t>{c.hidden_size, c.intermediate_size / 8}));
  EXPECT_EQ(s.get("model.layers.0.mlp.down_proj.scales").dtype, DType::BF16);
  EXPECT_EQ(s.get("model.layers.0.mlp.down_proj.biases").shape,
            (std::vector<int64_t>{c.hidden_size, c.intermediate_size / 64}));
  EXPECT_EQ(s.get("model.embed_tokens.weight").dtype, DType::U32);
  EXPECT_EQ(s.get("model.norm.weight").dtype, DType::BF16);  // not quantised
  EXPECT_TRUE(fs::exists(*dir_ / "q4" / "tokenizer.json"));
  const WeightStore s8 = WeightStore::open_dir(*dir_ / "int8");
  EXPECT_EQ(s8.get("model.layers.1.self_attn.q_proj.weight").dtype, DType::I8);
  EXPECT_EQ(s8.get("model.layers.1.self_attn.q_proj.scales").shape,
            (std::vector<int64_t>{c.hidden_size, 1}));
}

// molt quantize --interleave: the rows8 layout on disk, loaded (mmapped) with the same values
// and the same kernel as interleaving at load, so both give bit-identical logits.
TEST_F(TinyLadderQuant, InterleavedCheckpointsLoadAsInterleavedAtLoad) {
  const ModelConfig c = load_model_config(*dir_ / "q4-rows8");
  ASSERT_TRUE(c.quantization);
  EXPECT_EQ(c.quantization->layout, "rows8");
  const WeightStore s = WeightStore::open_dir(*dir_ / "q4-rows8");
  EXPECT_EQ(s.get("model.layers.0.mlp.down_proj.weight").shape,
            (std::vector<int64_t>{c.hidden_size / 8, c.intermediate_size / 8 * 8}));
  EXPECT_EQ(s.get("model.layers.0.mlp.down_proj.scales").shape,
            (std::vector<int64_t>{c.hidden_size / 8, c.intermediate_size / 64 * 8}));
  const std::vector<int32_t> ids = held_out_ids(24);
  for (const auto& [file, plain] :
       {std::pair{"q4-rows8", "q4"}, std::pair{"q8g32-rows8", "q8g32"}}) {
    SCOPED_TRACE(file);
    auto a = Model::load(*dir_ / file);
    EXPECT_TRUE(a->weights().layers[1].up.rows8);
    EXPECT_TRUE(a->weights().lm_head.rows8);
    LoadOptions o;
    o.layout = WeightLayout::Memory;
    auto b = Model::load(*dir_ / plain, o);
    KVCache ca = a->new_cache(32), cb = b->new_cache(32);
    EXPECT_EQ(a->prefill(ids, ca), b->prefill(ids, cb));
    EXPECT_EQ(a->decode(7, ca), b->decode(7, cb));
  }
  // Against the row-major files as they are: the logits of a prompt (dequantised GEMM, also for
  // the lm_head) bit for bit. (prefill() would compare the last position's lm_head matvec, whose
  // two kernels add in different orders.)
  for (const auto& [file, plain] :
       {std::pair{"q4-rows8", "q4"}, std::pair{"q8g32-rows8", "q8g32"}}) {
    LoadOptions stored;
    stored.layout = WeightLayout::Stored;
    auto a = Model::load(*dir_ / file), b = Model::load(*dir_ / plain, stored);
    EXPECT_FALSE(b->weights().layers[0].up.rows8);
    const int64_t V = a->config().vocab_size, n = static_cast<int64_t>(ids.size());
    std::vector<float> la(n * V), lb(n * V);
    KVCache ca = a->new_cache(n), cb = b->new_cache(n);
    a->forward(ids, ca, la);
    b->forward(ids, cb, lb);
    EXPECT_EQ(la, lb) << file;
  }
}

TEST_F(TinyLadderQuant, FileAndLoadTimeQuantisationAgreeExactly) {
  const std::vector<int32_t> ids = {314, 3728, 3859, 82, 261, 1668, 1073, 285};
  for (const auto& [sub, p] : {std::pair{"q4", Precision::Q4}, std::pair{"q8", Precision::Q8},
                               std::pair{"int8", Precision::Int8}}) {
    auto from_file = Model::load(*dir_ / sub);
    LoadOptions o;
    o.precision = p;
    auto at_load = Model::load(tiny_s(), o);
    KVCache a = from_file->new_cache(16), b = at_load->new_cache(16);
    EXPECT_EQ(from_file->prefill(ids, a), at_load->prefill(ids, b)) << sub;
    EXPECT_EQ(from_file->decode(7, a), at_load->decode(7, b)) << sub;
    EXPECT_EQ(from_file->weights().bytes < at_load->weights().bytes * 2, true);
  }
}

// Interleaved rows (LoadOptions::interleave) change the decode kernel, not the values:
// prefill (dequantised GEMM) is bit-identical; decode's first step matches the row-major
// kernel's to float rounding (the same int8 sums, added in another order), and over a whole
// prompt it stays as close to the exact prefill logits as the row-major kernel does (later
// steps can differ between the two by more than float rounding: a difference of 1e-6 can move
// an input of the next layer across an int8 rounding boundary).
TEST_F(TinyLadderQuant, InterleavedRowsGiveTheSameModel) {
  const std::vector<int32_t> ids = held_out_ids(48);
  for (const char* sub : {"q4", "q8"}) {
    SCOPED_TRACE(sub);
    LoadOptions stored, o;
    stored.layout = WeightLayout::Stored;
    auto plain = Model::load(*dir_ / sub, stored);
    o.layout = WeightLayout::Memory;
    auto inter = Model::load(*dir_ / sub, o);
    EXPECT_EQ(inter->weights().layers[0].gate.rows8, rows8_preferred());
    EXPECT_EQ(inter->weights().lm_head.rows8, rows8_preferred());
    EXPECT_FALSE(plain->weights().layers[0].gate.rows8);
    EXPECT_EQ(inter->weights().bytes, plain->weights().bytes);
    const int64_t V = plain->config().vocab_size, n = static_cast<int64_t>(ids.size());
    std::vector<float> a(n * V), b(n * V);
    KVCache ca = plain->new_cache(n + 1), cb = inter->new_cache(n + 1);
    plain->forward(ids, ca, a);
    inter->forward(ids, cb, b);
    EXPECT_EQ(a, b);
    const auto [lo, hi] = std::minmax_element(a.begin(), a.end());
    const double spread = *hi - *lo;
    const std::vector<float> da = plain->decode(7, ca), db = inter->decode(7, cb);
    double first = 0.0;
    for (int64_t v = 0; v < V; ++v) first = std::max<double>(first, std::fabs(da[v] - db[v]));
    // The two kernels' float sums differ by rounding; whether that moves one layer's input
    // across an int8 rounding step depends on how the compiler fuses multiply-adds: at -O2 the
    // first step measured < 1e-4 of the spread, at -O1 (the asan preset) q8 measured 1.8%
    // (one activation rounded the other way). Bound it at ~1.4× that; the kernels themselves
    // are compared exactly in tests/kernels/quant_test.cc.
    EXPECT_LE(first / spread, 0.025);
    // Decode against prefill at every position, for both kernels.
    auto decode_gap = [&](const Model& m) {
      KVCache d = m.new_cache(n);
      double worst = 0.0;
      for (int64_t i = 0; i < n; ++i) {
        const std::vector<float> l = m.decode(ids[static_cast<size_t>(i)], d);
        for (int64_t v = 0; v < V; ++v) {
          worst = std::max<double>(worst, std::fabs(l[v] - a[i * V + v]));
        }
      }
      return worst / spread;
    };
    // Both measured ~3-4% of the spread at the worst of the 48 positions.
    EXPECT_LE(decode_gap(*inter), 0.05);
    EXPECT_LE(decode_gap(*plain), 0.05);
  }
}

// Logits tolerance: max |logit - original| over a prompt, relative to the original's
// spread (max - min): measured 1.21% for int8, 0.85% for 8-bit affine, 10.6% for 4-bit; the
// tolerances are ~2× that (4-bit keeps 15%, 1.4×).
TEST_F(TinyLadderQuant, LogitsStayCloseToTheOriginal) {
  const std::vector<int32_t> ids = held_out_ids(64);
  auto ref = Model::load(tiny_s());
  const int64_t V = ref->config().vocab_size, n = static_cast<int64_t>(ids.size());
  std::vector<float> want(n * V);
  KVCache rc = ref->new_cache(n);
  ref->forward(ids, rc, want);
  const auto [lo, hi] = std::minmax_element(want.begin(), want.end());
  for (const auto& [sub, tol] : {std::pair{"int8", 0.025}, std::pair{"q8", 0.02},
                                 std::pair{"q4", 0.15}, std::pair{"q4-rows8", 0.15}}) {
    auto m = Model::load(*dir_ / sub);
    std::vector<float> got(n * V);
    KVCache c = m->new_cache(n);
    m->forward(ids, c, got);
    double worst = 0.0;
    for (size_t i = 0; i < got.size(); ++i)
      worst = std::max<double>(worst, std::fabs(got[i] - want[i]));
    std::printf("%s: logits max error %.4f of the spread (tolerance %.2f)\n", sub,
                worst / (*hi - *lo), tol);
    EXPECT_LE(worst / (*hi - *lo), tol) << sub;
    // Decode (the fused kernels, x rounded to int8) against prefill (exact dequantised GEMM).
    KVCache d = m->new_cache(n);
    std::vector<float> last;
    for (int32_t t : ids) last = m->decode(t, d);
    double dw = 0.0;
    for (int64_t v = 0; v < V; ++v)
      dw = std::max<double>(dw, std::fabs(last[v] - got[(n - 1) * V + v]));
    // x's rounding to int8 flips at half-steps with the f32 order of the sums before it, so
    // this depends on the kernel and the weights: at 4 bits 0.007 (AVX2, MLX rows), 0.022
    // (AVX-512 VNNI), 0.024 (rows by 8) measured; 8-bit 0.008 (AVX2), 0.015 (VNNI); int8 0.004
    // (the s of 21M tokens). The s of 23M tokens: 8-bit 0.021, 4-bit 0.012, int8 0.005 (AVX2).
    const std::string kind(sub);
    const double decode_tol = kind.starts_with("q4") ? 0.05 : kind == "q8" ? 0.035 : 0.02;
    std::printf("%s: decode vs prefill %.4f of the spread (tolerance %.3f)\n", sub,
                dw / (*hi - *lo), decode_tol);
    EXPECT_LE(dw / (*hi - *lo), decode_tol) << sub << " decode vs prefill";
  }
}

TEST_F(TinyLadderQuant, HeldOutNllWithinOnePercentInt8AndFivePercent4Bit) {
  const std::vector<int32_t> ids = held_out_ids(2049);
  const double base = mean_nll(*Model::load(tiny_s()), ids, 512);
  const double i8 = mean_nll(*Model::load(*dir_ / "int8"), ids, 512);
  const double q8 = mean_nll(*Model::load(*dir_ / "q8"), ids, 512);
  const double q4 = mean_nll(*Model::load(*dir_ / "q4"), ids, 512);
  RecordProperty("nll_bf16", std::to_string(base));
  RecordProperty("nll_int8", std::to_string(i8));
  RecordProperty("nll_q4", std::to_string(q4));
  EXPECT_LE(std::fabs(i8 - base) / base, 0.01) << base << " vs " << i8;
  EXPECT_LE(std::fabs(q8 - base) / base, 0.01) << base << " vs " << q8;
  EXPECT_LE(std::fabs(q4 - base) / base, 0.05) << base << " vs " << q4;
}

// ---- malformed checkpoints ----------------------------------------------------------------

// Rewrites `src` into `dst` with tensor `drop` left out and/or `replace` swapped in.
void rewrite(const fs::path& src, const fs::path& dst, const std::string& drop,
             const TensorToWrite* replace = nullptr) {
  fs::create_directories(dst);
  fs::copy_file(src / "config.json", dst / "config.json", fs::copy_options::overwrite_existing);
  auto f = SafetensorsFile::open(src / "model.safetensors");
  std::vector<TensorToWrite> out;
  for (const TensorView& t : f->tensors()) {
    if (t.name == drop) continue;
    if (replace != nullptr && t.name == replace->name) {
      out.push_back(*replace);
      continue;
    }
    out.push_back({t.name, t.dtype, t.shape, {t.data, t.nbytes}});
  }
  write_safetensors(dst / "model.safetensors", out);
}

void expect_load_error(const fs::path& dir, const std::vector<std::string>& needles) {
  try {
    Model::load(dir);
    FAIL() << "loaded; expected an error";
  } catch (const Error& e) {
    for (const auto& n : needles) {
      EXPECT_NE(std::string(e.what()).find(n), std::string::npos) << e.what();
    }
  }
}

TEST_F(TinyLadderQuant, MissingScalesOrBiasesAreNamed) {
  const std::string m = "model.layers.2.mlp.up_proj";
  rewrite(*dir_ / "q4", *dir_ / "no-scales", m + ".scales");
  expect_load_error(*dir_ / "no-scales", {m + ".weight", m + ".scales' is missing"});
  rewrite(*dir_ / "q4", *dir_ / "no-biases", m + ".biases");
  expect_load_error(*dir_ / "no-biases", {m + ".weight", m + ".biases' is missing"});
  rewrite(*dir_ / "int8", *dir_ / "int8-no-scales", m + ".scales");
  expect_load_error(*dir_ / "int8-no-scales", {m + ".weight", "scales"});
}

TEST_F(TinyLadderQuant, WrongPackedShapeIsNamed) {
  const std::string name = "model.layers.1.self_attn.o_proj.weight";
  std::vector<uint8_t> junk(128 * 8 * 4);
  const TensorToWrite bad{
      name, DType::U32, {128, 8}, {reinterpret_cast<const std::byte*>(junk.data()), junk.size()}};
  rewrite(*dir_ / "q4", *dir_ / "bad-shape", "", &bad);
  expect_load_error(*dir_ / "bad-shape", {name, "packed shape [128, 8]", "[128, 16]"});
  // The config says 8 bits but the tensors hold 4: every packed shape is wrong.
  rewrite(*dir_ / "q4", *dir_ / "bits8", "");
  nlohmann::json cfg = read_json_file(*dir_ / "q4" / "config.json");
  cfg["quantization"]["bits"] = 8;
  test::write_file(*dir_ / "bits8" / "config.json", cfg.dump());
  expect_load_error(*dir_ / "bits8", {"model.embed_tokens.weight", "packed shape"});
  // Scales of the wrong group count.
  const std::string sname = "model.layers.0.mlp.gate_proj.scales";
  std::vector<uint8_t> s(384 * 4 * 2);
  const TensorToWrite bad_scales{
      sname, DType::BF16, {384, 4}, {reinterpret_cast<const std::byte*>(s.data()), s.size()}};
  rewrite(*dir_ / "q4", *dir_ / "bad-scales", "", &bad_scales);
  expect_load_error(*dir_ / "bad-scales", {sname, "[384, 4]", "[384, 2]"});
  // A row-major file that says rows8, and a rows8 file that does not.
  rewrite(*dir_ / "q4", *dir_ / "says-rows8", "");
  cfg = read_json_file(*dir_ / "q4" / "config.json");
  cfg["quantization"]["layout"] = "rows8";
  test::write_file(*dir_ / "says-rows8" / "config.json", cfg.dump());
  expect_load_error(*dir_ / "says-rows8",
                    {"model.embed_tokens.weight", "interleaved by 8 (layout rows8)", "[512, 128]"});
  rewrite(*dir_ / "q4-rows8", *dir_ / "says-rows", "");
  cfg = read_json_file(*dir_ / "q4-rows8" / "config.json");
  cfg["quantization"].erase("layout");
  test::write_file(*dir_ / "says-rows" / "config.json", cfg.dump());
  expect_load_error(*dir_ / "says-rows", {"model.embed_tokens.weight", "packed shape [512, 128]"});
  cfg["quantization"]["layout"] = "cols4";
  test::write_file(*dir_ / "says-rows" / "config.json", cfg.dump());
  expect_load_error(*dir_ / "says-rows", {"layout 'cols4' is not supported"});
}

TEST_F(TinyLadderQuant, MixedMlxCheckpointsInterleaveModuleByModule) {
  // An MLX checkpoint as published may give some modules their own bits and groups and leave
  // others dense. Here: 4-bit g64 everywhere, layer 0's down_proj 8-bit g32 (from q8g32), its
  // up_proj dense. Re-laid out by molt quantize --interleave, nothing is requantised.
  const fs::path mixed = *dir_ / "mixed", re = *dir_ / "mixed-rows8";
  const std::string down = "model.layers.0.mlp.down_proj", up = "model.layers.0.mlp.up_proj";
  {
    const WeightStore q4 = WeightStore::open_dir(*dir_ / "q4");
    const WeightStore q8 = WeightStore::open_dir(*dir_ / "q8g32");
    const WeightStore dense = WeightStore::open_dir(tiny_s());
    std::vector<TensorToWrite> t;
    auto take = [&](const WeightStore& s, const std::string& name) {
      const TensorView& v = s.get(name);
      t.push_back({name, v.dtype, v.shape, {v.data, v.nbytes}});
    };
    for (const std::string& name : q4.names()) {
      if (name.rfind(down + ".", 0) != 0 && name.rfind(up + ".", 0) != 0) take(q4, name);
    }
    for (const char* k : {".weight", ".scales", ".biases"}) take(q8, down + k);
    take(dense, up + ".weight");
    fs::create_directories(mixed);
    write_safetensors(mixed / "model.safetensors", t);
    nlohmann::json cfg = read_json_file(*dir_ / "q4" / "config.json");
    for (const char* key : {"quantization", "quantization_config"}) {
      cfg[key][down] = {{"group_size", 32}, {"bits", 8}};
      cfg[key][up] = false;
    }
    test::write_file(mixed / "config.json", cfg.dump());
  }
  QuantizeOptions o;
  o.interleave = true;
  quantize_checkpoint(mixed, re, o);
  auto a = Model::load(mixed), b = Model::load(re);
  const LayerWeights& L = b->weights().layers[0];
  EXPECT_TRUE(L.down.rows8);
  EXPECT_EQ(L.down.bits, 8);
  EXPECT_EQ(L.down.group_size, 32);
  EXPECT_EQ(L.up.dtype, DType::BF16);
  EXPECT_TRUE(L.gate.rows8);
  EXPECT_EQ(L.gate.bits, 4);
  EXPECT_TRUE(b->weights().lm_head.rows8);
  const nlohmann::json cfg = read_json_file(re / "config.json");
  EXPECT_EQ(cfg["quantization"]["layout"], "rows8");
  EXPECT_EQ(cfg["quantization"][up], false);
  EXPECT_EQ(cfg["quantization"][down]["bits"], 8);
  // The same weights: prefill (dequantised GEMM) gives the same logits bit for bit.
  const std::vector<int32_t> ids = held_out_ids(24);
  const int64_t V = a->config().vocab_size, n = static_cast<int64_t>(ids.size());
  std::vector<float> la(n * V), lb(n * V);
  KVCache ca = a->new_cache(n), cb = b->new_cache(n);
  a->forward(ids, ca, la);
  b->forward(ids, cb, lb);
  EXPECT_EQ(la, lb);
}

TEST(QuantCheckpointErrors, GroupSizeThatDoesNotDivideIsNamed) {
  test::TempDir dir;
  nlohmann::json cfg = {{"architectures", {"Qwen2ForCausalLM"}},
                        {"model_type", "qwen2"},
                        {"hidden_size", 96},
                        {"num_hidden_layers", 1},
                        {"num_attention_heads", 2},
                        {"num_key_value_heads", 1},
                        {"intermediate_size", 160},
                        {"vocab_size", 64},
                        {"tie_word_embeddings", true},
                        {"quantization", {{"group_size", 64}, {"bits", 4}}}};
  test::write_file(dir / "config.json", cfg.dump());
  std::vector<uint8_t> w(64 * 12 * 4), s(64 * 2);
  const auto bytes = [](const std::vector<uint8_t>& v) {
    return std::span<const std::byte>(reinterpret_cast<const std::byte*>(v.data()), v.size());
  };
  write_safetensors(dir / "model.safetensors",
                    {{"model.embed_tokens.weight", DType::U32, {64, 12}, bytes(w)},
                     {"model.embed_tokens.scales", DType::BF16, {64, 1}, bytes(s)},
                     {"model.embed_tokens.biases", DType::BF16, {64, 1}, bytes(s)}});
  expect_load_error(dir.path(), {"model.embed_tokens.weight", "group size 64 does not divide",
                                 "input dimension 96"});
}

TEST(QuantCheckpointErrors, PrecisionOnAQuantisedCheckpointIsRefused) {
  if (!fs::exists(tiny_s() / "model.safetensors")) GTEST_SKIP();
  test::TempDir dir;
  QuantizeOptions o;
  quantize_checkpoint(tiny_s(), dir / "q4", o);
  LoadOptions lo;
  lo.precision = Precision::Int8;
  EXPECT_THROW(Model::load(dir / "q4", lo), Error);
  EXPECT_THROW(parse_precision("int4"), Error);
  EXPECT_THROW(quantize_checkpoint(dir / "q4", dir / "again", o), Error);
}

}  // namespace
}  // namespace molt
