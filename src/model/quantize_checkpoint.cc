#include <deque>
#include <fstream>
#include <nlohmann/json.hpp>

#include "molt/common/error.h"
#include "molt/formats/hf_config.h"
#include "molt/formats/safetensors.h"
#include "molt/kernels/quant.h"
#include "molt/model/quantize.h"

namespace molt {
namespace {

bool ends_with(const std::string& s, const std::string& suffix) {
  return s.size() >= suffix.size() &&
         s.compare(s.size() - suffix.size(), suffix.size(), suffix) == 0;
}

// The linears MLX quantises in a Qwen2 model, plus the embedding and lm_head.
bool quantisable(const std::string& name) {
  for (const char* m :
       {"q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"}) {
    if (ends_with(name, std::string(".") + m + ".weight")) return true;
  }
  return name == "model.embed_tokens.weight" || name == "lm_head.weight";
}

std::span<const std::byte> bytes_of(const std::vector<uint8_t>& v) {
  return {reinterpret_cast<const std::byte*>(v.data()), v.size()};
}

}  // namespace

size_t quantize_checkpoint(const std::filesystem::path& src, const std::filesystem::path& out,
                           const QuantizeOptions& o) {
  const bool int8 = o.mode == "int8";
  if (!int8 && o.mode != "affine") fail("quantize: mode '{}' is not affine or int8", o.mode);
  if (int8 && o.bits != 8) fail("quantize: int8 mode needs --bits 8, got {}", o.bits);
  if (!int8 && o.bits != 4 && o.bits != 8) fail("quantize: --bits {} is not 4 or 8", o.bits);
  if (int8 && o.interleave) fail("quantize: --interleave is for MLX affine weights, not int8");
  if (o.group_size != 32 && o.group_size != 64 && o.group_size != 128 &&
      !(int8 && o.group_size == 0)) {
    fail("quantize: --group-size {} is not one of 32, 64, 128{}", o.group_size,
         int8 ? " or 0 (per channel)" : "");
  }
  const ModelConfig c = load_model_config(src);
  if (c.quantization) {
    fail("{}: the checkpoint is already quantised", (src / "config.json").string());
  }
  std::error_code ec;
  if (std::filesystem::exists(out) &&
      std::filesystem::equivalent(std::filesystem::absolute(src), std::filesystem::absolute(out),
                                  ec)) {
    fail("quantize: --out {} is the source folder", out.string());
  }
  const WeightStore store = WeightStore::open_dir(src);
  std::deque<QuantizedMatrix> owned;
  std::vector<TensorToWrite> tensors;
  size_t total = 0;
  for (const std::string& name : store.names()) {
    const TensorView& t = store.get(name);
    const bool dense = t.dtype == DType::F32 || t.dtype == DType::BF16 || t.dtype == DType::F16;
    if (quantisable(name) && dense && t.shape.size() == 2) {
      const WeightMatrix w{t.dtype, t.shape[0], t.shape[1], t.data};
      const int64_t G = o.group_size == 0 ? w.cols : o.group_size;
      if (w.cols % G == 0) {
        const std::string module = name.substr(0, name.size() - std::string(".weight").size());
        if (o.interleave && w.rows % 8 != 0) {
          fail("quantize: {} has {} rows, not a multiple of 8: it cannot be interleaved", name,
               w.rows);
        }
        owned.push_back(int8 ? quantize_int8(w, o.group_size)
                             : quantize_affine(w, o.bits, o.group_size, t.dtype));
        if (o.interleave) owned.back() = interleave_rows8(owned.back().view());
        const QuantizedMatrix& q = owned.back();
        // rows8 stores 8 rows per tensor row: [rows / 8, packed cols · 8] and [rows / 8, groups ·
        // 8].
        const int64_t r = o.interleave ? w.rows / 8 : w.rows, k = o.interleave ? 8 : 1;
        const int64_t packed_cols = int8 ? w.cols : w.cols * o.bits / 32;
        tensors.push_back({name, q.dtype, {r, packed_cols * k}, bytes_of(q.data)});
        tensors.push_back(
            {module + ".scales", q.scale_dtype, {r, w.cols / G * k}, bytes_of(q.scales)});
        if (!int8) {
          tensors.push_back(
              {module + ".biases", q.scale_dtype, {r, w.cols / G * k}, bytes_of(q.biases)});
        }
        continue;
      }
    }
    tensors.push_back({name, t.dtype, t.shape, {t.data, t.nbytes}});
  }
  for (const TensorToWrite& t : tensors) total += t.bytes.size();
  std::filesystem::create_directories(out);
  // config.json as it was, plus the quantisation (MLX writes both keys).
  nlohmann::json cfg = read_json_file(src / "config.json");
  nlohmann::json q = {{"group_size", o.group_size}, {"bits", o.bits}};
  if (int8) q["mode"] = "int8";
  if (o.interleave) q["layout"] = "rows8";
  cfg["quantization"] = q;
  cfg["quantization_config"] = q;
  {
    std::ofstream f(out / "config.json");
    f << cfg.dump(2) << "\n";
    if (!f) fail("{}: write failed", (out / "config.json").string());
  }
  for (const auto& e : std::filesystem::directory_iterator(src)) {
    const std::string fn = e.path().filename().string();
    if (!e.is_regular_file() || fn == "config.json" || ends_with(fn, ".safetensors") ||
        fn == "model.safetensors.index.json") {
      continue;
    }
    std::filesystem::copy_file(e.path(), out / fn,
                               std::filesystem::copy_options::overwrite_existing);
  }
  // Remove stale weights of an earlier run so the new ones are the only ones found.
  for (const auto& e : std::filesystem::directory_iterator(out)) {
    const std::string fn = e.path().filename().string();
    if (ends_with(fn, ".safetensors") || fn == "model.safetensors.index.json") {
      std::filesystem::remove(e.path());
    }
  }
  write_safetensors_sharded(out, tensors, o.max_shard_bytes,
                            {{"format", o.interleave ? "molt" : "mlx"}});
  return total;
}

}  // namespace molt
