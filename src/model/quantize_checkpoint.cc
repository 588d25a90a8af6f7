#include <deque>
#include <nlohmann/json.hpp>
#include <set>

#include "molt/common/error.h"
#include "molt/formats/atomic_dir.h"
#include "molt/formats/atomic_file.h"
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

template <class V>
std::span<const std::byte> bytes_of(const V& v) {
  return {reinterpret_cast<const std::byte*>(v.data()), v.size()};
}

// Writes the checkpoint folder `out`: config.json `cfg`, the other files of `src` (tokenizer,
// generation_config.json, ...) copied, and `tensors` as (sharded) safetensors. All of it is
// built beside `out` and swapped in at the end (AtomicDir): a full disk half way leaves no
// checkpoint that looks complete, and an earlier one at `out` as it was.
void write_checkpoint(const std::filesystem::path& src, const std::filesystem::path& out,
                      const nlohmann::json& cfg, const std::vector<TensorToWrite>& tensors,
                      size_t max_shard_bytes, const std::string& format) {
  AtomicDir dir(out);
  write_file_atomically(dir / "config.json", cfg.dump(2) + "\n");
  for (const auto& e : std::filesystem::directory_iterator(src)) {
    const std::string fn = e.path().filename().string();
    if (!e.is_regular_file() || fn == "config.json" || ends_with(fn, ".safetensors") ||
        fn == "model.safetensors.index.json") {
      continue;
    }
    copy_file_atomically(e.path(), dir / fn);
  }
  write_safetensors_sharded(dir.staging(), tensors, max_shard_bytes, {{"format", format}});
  // Other files an earlier checkpoint here held stay, as they did; its weights do not (the new
  // ones must be the only ones found), nor any stale temporary.
  dir.commit([](const std::string& fn) {
    return !ends_with(fn, ".safetensors") && fn != "model.safetensors.index.json" &&
           !ends_with(fn, ".tmp");
  });
}

void check_not_source(const std::filesystem::path& src, const std::filesystem::path& out) {
  std::error_code ec;
  if (std::filesystem::exists(out) &&
      std::filesystem::equivalent(std::filesystem::absolute(src), std::filesystem::absolute(out),
                                  ec)) {
    fail("quantize: --out {} is the source folder", out.string());
  }
}

// An MLX-quantised checkpoint (layout "rows") re-laid out with rows interleaved by 8: the same
// packed words, scales and biases, moved (interleave_rows8), nothing requantised. Modules MLX
// left dense, and everything else, are copied as they are.
size_t interleave_checkpoint(const std::filesystem::path& src, const std::filesystem::path& out,
                             const ModelConfig& c, const QuantizeOptions& o) {
  const QuantSpec& spec = *c.quantization;
  const std::string cfg_file = (src / "config.json").string();
  if (spec.mode != "affine") {
    fail("{}: the checkpoint is {}-quantised; only MLX affine weights can be interleaved", cfg_file,
         spec.mode);
  }
  if (spec.layout == "rows8") fail("{}: the checkpoint is already interleaved (rows8)", cfg_file);
  check_not_source(src, out);
  const WeightStore store = WeightStore::open_dir(src);
  std::deque<QuantizedMatrix> owned;
  std::vector<TensorToWrite> tensors;
  std::set<std::string> replaced;  // scales and biases written with their weight
  for (const std::string& name : store.names()) {
    const TensorView& t = store.get(name);
    if (t.dtype != DType::U32 || !ends_with(name, ".weight")) continue;
    const std::string module = name.substr(0, name.size() - std::string(".weight").size());
    const QuantLayer l = spec.layer(module);
    const TensorView* sc = store.find(module + ".scales");
    const TensorView* bi = store.find(module + ".biases");
    if (sc == nullptr || bi == nullptr) {
      fail("{}: MLX-quantised weight without its {} (tensor '{}.{}' is missing)",
           store.dir().string(), sc == nullptr ? "scales" : "biases", module,
           sc == nullptr ? "scales" : "biases");
    }
    if (t.shape.size() != 2 || (l.bits != 4 && l.bits != 8) || l.group_size <= 0) {
      fail("{}: tensor '{}' shape {} at {} bits, group {} is not an MLX affine weight",
           store.dir().string(), name, t.shape_str(), l.bits, l.group_size);
    }
    WeightMatrix w{DType::U32, t.shape[0], t.shape[1] * 32 / l.bits, t.data};
    w.bits = l.bits;
    w.group_size = l.group_size;
    w.scale_dtype = sc->dtype;
    w.scales = sc->data;
    w.biases = bi->data;
    const std::vector<int64_t> table{w.rows, w.cols % w.group_size == 0 ? w.groups() : -1};
    if (sc->shape != table || bi->shape != table || bi->dtype != sc->dtype) {
      fail("{}: tensors '{}' {} and '{}' {} do not match weight '{}' {} at {} bits, group {}",
           store.dir().string(), sc->name, sc->shape_str(), bi->name, bi->shape_str(), name,
           t.shape_str(), l.bits, l.group_size);
    }
    if (w.rows % 8 != 0) {
      fail("{}: tensor '{}' has {} rows, not a multiple of 8: it cannot be interleaved",
           store.dir().string(), name, w.rows);
    }
    owned.push_back(interleave_rows8(w));
    const QuantizedMatrix& q = owned.back();
    tensors.push_back({name, DType::U32, {w.rows / 8, t.shape[1] * 8}, bytes_of(q.data)});
    tensors.push_back({sc->name, sc->dtype, {w.rows / 8, w.groups() * 8}, bytes_of(q.scales)});
    tensors.push_back({bi->name, bi->dtype, {w.rows / 8, w.groups() * 8}, bytes_of(q.biases)});
    replaced.insert(sc->name);
    replaced.insert(bi->name);
  }
  for (const std::string& name : store.names()) {
    const TensorView& t = store.get(name);
    if ((t.dtype == DType::U32 && ends_with(name, ".weight")) || replaced.count(name) != 0)
      continue;
    tensors.push_back({name, t.dtype, t.shape, {t.data, t.nbytes}});
  }
  size_t total = 0;
  for (const TensorToWrite& t : tensors) total += t.bytes.size();
  nlohmann::json cfg = read_json_file(src / "config.json");
  for (const char* key : {"quantization", "quantization_config"}) {
    if (cfg.contains(key) && cfg[key].is_object()) cfg[key]["layout"] = "rows8";
  }
  write_checkpoint(src, out, cfg, tensors, o.max_shard_bytes, "molt");
  return total;
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
  if (c.quantization && o.interleave && !int8) return interleave_checkpoint(src, out, c, o);
  if (c.quantization) {
    fail(
        "{}: the checkpoint is already quantised (only --interleave, which re-lays out MLX "
        "weights without requantising, takes a quantised checkpoint)",
        (src / "config.json").string());
  }
  check_not_source(src, out);
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
  // config.json as it was, plus the quantisation (MLX writes both keys).
  nlohmann::json cfg = read_json_file(src / "config.json");
  nlohmann::json q = {{"group_size", o.group_size}, {"bits", o.bits}};
  if (int8) q["mode"] = "int8";
  if (o.interleave) q["layout"] = "rows8";
  cfg["quantization"] = q;
  cfg["quantization_config"] = q;
  write_checkpoint(src, out, cfg, tensors, o.max_shard_bytes, o.interleave ? "molt" : "mlx");
  return total;
}

}  // namespace molt
