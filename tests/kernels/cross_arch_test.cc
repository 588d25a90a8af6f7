// The quantised kernels agree across machines: tests/fixtures/kernels/quant_x86.json holds, for
// every quantised layout molt runs, the stored weights (bytes), inputs and the outputs one x86
// machine computed (decode matvec at 1 and 3 vectors, prefill matmul). Every build checks its
// own kernels against them: on x86 the same code at this machine's SIMD target, on arm64
// (make arm64-test, under qemu) the NEON paths. Each side is within the kernel's documented
// bound of the exact product (x rounded to int8 per block of ≤ 64 inputs: half a step times
// Σ|w|, plus f32 rounding), so the two are within twice that of each other.
//
// Regenerate (on x86, after a deliberate change of the format or the kernels):
//   MOLT_WRITE_CROSS_ARCH_FIXTURE=1 build/tests/molt_kernels_tests --gtest_filter='CrossArch.*'
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <random>
#include <string>
#include <vector>

#include "kernels/qmatvec.h"
#include "molt/kernels/linear.h"
#include "molt/kernels/ops.h"
#include "molt/kernels/quant.h"
#include "test_util.h"

namespace molt {
namespace {

const std::filesystem::path kFixture =
    std::filesystem::path(MOLT_SOURCE_DIR) / "tests/fixtures/kernels/quant_x86.json";
constexpr int64_t kRows = 64, kCols = 256, kVectors = 3, kPrefill = 8;

struct Layout {
  const char* name;
  const char* mode;  // affine or int8
  int bits;
  int64_t group;
  DType scale_dtype;
  bool rows8;
};
constexpr Layout kLayouts[] = {
    {"int8_per_channel", "int8", 8, 0, DType::F32, false},
    {"int8_g64", "int8", 8, 64, DType::F32, false},
    {"mlx8_g32_bf16", "affine", 8, 32, DType::BF16, false},
    {"mlx8_g64_f16", "affine", 8, 64, DType::F16, false},
    {"mlx8_g64_rows8", "affine", 8, 64, DType::BF16, true},
    {"mlx4_g32_bf16", "affine", 4, 32, DType::BF16, false},
    {"mlx4_g64_bf16", "affine", 4, 64, DType::BF16, false},
    {"mlx4_g128_f32", "affine", 4, 128, DType::F32, false},
    {"mlx4_g64_rows8", "affine", 4, 64, DType::BF16, true},
};

// Inputs from integers only, so that every machine draws the same floats.
std::vector<float> draw(size_t n, uint32_t seed, float scale) {
  std::mt19937 rng(seed);
  std::vector<float> v(n);
  for (float& x : v) x = scale * static_cast<float>(static_cast<int>(rng() % 20001) - 10000) / 1e4f;
  return v;
}

std::string hex(const AlignedVector<uint8_t>& b) {
  static const char* d = "0123456789abcdef";
  std::string s;
  s.reserve(2 * b.size());
  for (uint8_t c : b) {
    s += d[c >> 4];
    s += d[c & 15];
  }
  return s;
}

AlignedVector<uint8_t> unhex(const std::string& s) {
  AlignedVector<uint8_t> b(s.size() / 2);
  for (size_t i = 0; i < b.size(); ++i) {
    b[i] = static_cast<uint8_t>(std::stoi(s.substr(2 * i, 2), nullptr, 16));
  }
  return b;
}

// The outputs of this machine's kernels for one stored matrix.
struct Outputs {
  std::vector<float> decode, batch, prefill;
};
Outputs run(const WeightMatrix& w, const std::vector<float>& x) {
  Outputs o;
  o.decode.resize(kRows);
  matvec(w, x.data(), o.decode.data());
  o.batch.resize(static_cast<size_t>(kVectors * kRows));
  matvec_batch(w, x.data(), kVectors, o.batch.data());
  o.prefill.resize(static_cast<size_t>(kPrefill * kRows));
  matmul(w, x.data(), kPrefill, o.prefill.data());
  return o;
}

// |a - b| allowed for row r of vector v: twice the int8 rounding bound of x plus f32 rounding.
double bound(const std::vector<float>& wq, const float* x, int64_t r) {
  double mag = 0, xerr = 0;
  for (int64_t b = 0; b < kCols; b += 64) {
    float amax = 0;
    for (int64_t i = b; i < b + 64; ++i) amax = std::max(amax, std::fabs(x[i]));
    for (int64_t i = b; i < b + 64; ++i) {
      const double w = wq[static_cast<size_t>(r * kCols + i)];
      mag += std::fabs(w * x[i]);
      xerr += std::fabs(w) * 0.5 * amax / 127.0;
    }
  }
  return 2 * xerr + 2e-5 * mag + 2e-6;
}

TEST(CrossArch, QuantisedKernelsAgreeWithTheX86Fixture) {
  test::GemmPrecisionGuard guard;
  set_gemm_precision(GemmPrecision::kF32);  // prefill: dequantised f32 tiles on every machine
  const std::vector<float> x = draw(static_cast<size_t>(kPrefill * kCols), 7, 2.0f);
  if (std::getenv("MOLT_WRITE_CROSS_ARCH_FIXTURE") != nullptr) {
    nlohmann::json cases = nlohmann::json::array();
    for (const Layout& L : kLayouts) {
      const std::vector<float> dense = draw(static_cast<size_t>(kRows * kCols), 11, 0.5f);
      const WeightMatrix d{DType::F32, kRows, kCols, dense.data()};
      QuantizedMatrix q = std::string(L.mode) == "int8"
                              ? quantize_int8(d, L.group)
                              : quantize_affine(d, L.bits, L.group, L.scale_dtype);
      if (L.rows8) q = interleave_rows8(q.view());
      const Outputs o = run(q.view(), x);
      cases.push_back({{"name", L.name},
                       {"group_size", q.group_size},
                       {"data", hex(q.data)},
                       {"scales", hex(q.scales)},
                       {"biases", hex(q.biases)},
                       {"decode", o.decode},
                       {"batch", o.batch},
                       {"prefill", o.prefill}});
    }
    const nlohmann::json j = {{"produced_on", {{"arch", "x86_64"}, {"simd", simd_target_name()}}},
                              {"rows", kRows},
                              {"cols", kCols},
                              {"cases", cases}};
    std::filesystem::create_directories(kFixture.parent_path());
    std::ofstream(kFixture) << j.dump() << "\n";
    GTEST_SKIP() << "wrote " << kFixture;
  }
  const auto j = nlohmann::json::parse(test::read_file(kFixture));
  ASSERT_EQ(j.at("cases").size(), std::size(kLayouts));
  std::printf("    fixture from %s (%s); this machine: %s, quantised kernel %s\n",
              j["produced_on"]["arch"].get<std::string>().c_str(),
              j["produced_on"]["simd"].get<std::string>().c_str(), simd_target_name(),
              qmatvec_kernel_name());
  for (size_t c = 0; c < std::size(kLayouts); ++c) {
    const Layout& L = kLayouts[c];
    const auto& f = j["cases"][c];
    ASSERT_EQ(f.at("name"), L.name);
    QuantizedMatrix q;
    q.dtype = std::string(L.mode) == "int8" ? DType::I8 : DType::U32;
    q.rows = kRows;
    q.cols = kCols;
    q.bits = L.bits;
    q.group_size = f.at("group_size").get<int64_t>();
    q.scale_dtype = L.scale_dtype;
    q.rows8 = L.rows8;
    q.data = unhex(f.at("data"));
    q.scales = unhex(f.at("scales"));
    q.biases = unhex(f.at("biases"));
    const WeightMatrix w = q.view();
    std::vector<float> wq(static_cast<size_t>(kRows * kCols));
    for (int64_t r = 0; r < kRows; ++r) dequantize_row(w, r, &wq[static_cast<size_t>(r * kCols)]);
    const Outputs o = run(w, x);
    double worst = 0;
    auto check = [&](const std::vector<float>& got, const char* what, int64_t vectors) {
      const auto want = f.at(what).get<std::vector<float>>();
      ASSERT_EQ(want.size(), got.size()) << L.name << " " << what;
      for (int64_t v = 0; v < vectors; ++v) {
        for (int64_t r = 0; r < kRows; ++r) {
          const size_t i = static_cast<size_t>(v * kRows + r);
          const double b = bound(wq, x.data() + v * kCols, r);
          worst = std::max(worst, std::fabs(got[i] - want[i]) / b);
          ASSERT_NEAR(got[i], want[i], b)
              << L.name << " " << what << " vector " << v << " row " << r;
        }
      }
    };
    check(o.decode, "decode", 1);
    check(o.batch, "batch", kVectors);
    check(o.prefill, "prefill", kPrefill);
    std::printf("    %-18s largest difference %.3f of the bound\n", L.name, worst);
  }
}

}  // namespace
}  // namespace molt
