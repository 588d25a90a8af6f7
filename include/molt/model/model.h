// A Qwen2 causal LM: weights bound zero-copy to a checkpoint's safetensors, a batched
// prefill (GEMM) and a one-token decode over a KV cache. Compute is f32 whatever the stored
// dtype (f32, bf16, f16).
#pragma once

#include <cstdint>
#include <filesystem>
#include <memory>
#include <span>
#include <vector>

#include "molt/formats/hf_config.h"
#include "molt/formats/safetensors.h"
#include "molt/kernels/linear.h"
#include "molt/kernels/ops.h"
#include "molt/kernels/quant.h"
#include "molt/model/kv_cache.h"

namespace molt {

struct LayerWeights {
  WeightMatrix q, k, v, o, gate, up, down;
  std::vector<float> q_bias, k_bias, v_bias;           // empty when the model has none
  std::vector<float> input_norm, post_attention_norm;  // RMSNorm weights, widened to f32
};

struct ModelWeights {
  WeightMatrix embed;    // [vocab, hidden]
  WeightMatrix lm_head;  // [vocab, hidden]; the embedding when tied
  std::vector<float> final_norm;
  std::vector<LayerWeights> layers;
  size_t bytes = 0;  // bytes of stored weights referenced
};

// Weights as stored (dense or quantised in the file), or quantised at load time:
// int8 = symmetric int8 per output channel, q4 / q8 = MLX affine 4 / 8 bits, group 64.
enum class Precision { Native, Int8, Q4, Q8 };
// "native", "int8", "q4", "q8"; throws naming the accepted values otherwise.
Precision parse_precision(const std::string& name);
const char* precision_name(Precision p);

// How MLX affine weights are laid out in memory, where this CPU's decode kernel is faster with
// their rows interleaved by 8 (rows8_preferred(); elsewhere every choice keeps the file's layout).
enum class WeightLayout {
  // The fastest layout that keeps weights parkable, for 4-bit weights (8-bit decodes alike in
  // both): a checkpoint as MLX writes it is opened through its rows8 copy (rows8_layout_cache:
  // made once beside it, mapped like any file); weights quantised to q4 at load (already on the
  // heap) are interleaved in memory.
  Auto,
  Stored,  // as the file has them
  Memory,  // interleaved into a heap copy at load (parking cannot give a heap copy back)
};
// "auto", "stored", "memory"; throws naming the accepted values otherwise.
WeightLayout parse_weight_layout(const std::string& name);

struct LoadOptions {
  Precision precision = Precision::Native;
  int64_t group_size = 64;  // q4 / q8 (int8 is per channel)
  WeightLayout layout = WeightLayout::Auto;
};

class Model {
 public:
  // Loads config.json (+ generation_config.json) and the safetensors of `dir`. A checkpoint
  // whose config has "quantization" binds MLX affine (U32 weight + scales + biases) or molt
  // int8 (I8 weight + scales) linears; LoadOptions quantises a dense checkpoint in memory.
  static std::unique_ptr<Model> load(const std::filesystem::path& dir,
                                     const LoadOptions& options = {});

  const ModelConfig& config() const { return config_; }
  const ModelWeights& weights() const { return weights_; }
  const WeightStore& store() const { return store_; }
  // How the weights came to their layout (e.g. "weights: rows8 copy DIR"); empty when they are
  // as the checkpoint stores them and nothing else was tried.
  const std::string& layout_note() const { return layout_note_; }
  CacheGeometry cache_geometry() const;
  RopeSpec rope() const { return {config_.head_dim, config_.rope_theta}; }
  // A cache sized for this model, its K and V rows of type kv.
  KVCache new_cache(int64_t capacity, bool keep_hidden = false, KvDType kv = KvDType::kF32) const;

  // Runs `tokens` at positions cache.size() .. cache.size()+n-1, appending their K/V (and
  // hidden states when the cache keeps them). When `logits` is not empty it receives the
  // logits of every new position, [n × vocab]; when `last_logits` is not empty it receives
  // only the last position's. n = 1 takes the matvec (decode) path, n > 1 the GEMM path.
  void forward(std::span<const int32_t> tokens, KVCache& cache, std::span<float> logits,
               std::span<float> last_logits = {}) const;

  // One decode step into the caller's buffer (vocab_size floats). Working memory lives in the
  // cache (KVCache::scratch), so steady-state decoding allocates nothing and any number of
  // caches may be decoded on one Model, interleaved or from different threads.
  void decode(int32_t token, KVCache& cache, std::span<float> logits) const;
  // One decode step of B = tokens.size() independent sequences in one pass over the weights:
  // token i runs at position caches[i]->size() of its own cache (lengths may differ), and
  // logits[i × vocab ..] receives its logits ([B × vocab]). Each row equals decode() of that
  // sequence alone bit for bit (the linears read each weight once for all B rows; attention,
  // RoPE and norms run per sequence). Working memory is caches[0]'s scratch, so steady-state
  // batches allocate nothing. B = 1 is decode(). Throws, changing no cache, when the spans'
  // sizes disagree, a cache is null, repeated, full, or of another geometry, or a token is out
  // of range.
  void decode_batch(std::span<const int32_t> tokens, std::span<KVCache* const> caches,
                    std::span<float> logits) const;
  // Convenience: returns the last position's logits (allocates the vector).
  std::vector<float> prefill(std::span<const int32_t> tokens, KVCache& cache) const;
  std::vector<float> decode(int32_t token, KVCache& cache) const;

  // Runs layers [first, last) (last < 0: to the end) for positions [p0, p0 + n) given the
  // hidden states that enter layer `first` (hidden: [n × hidden_size]), writing their K/V into
  // the cache rows; hidden is left holding the states entering layer `last`. Used by selective
  // recompute and by healing (one layer at a time); equal bit for bit to a full forward.
  void forward_layers(int64_t first, int64_t p0, int64_t n, std::span<float> hidden, KVCache& cache,
                      int64_t last = -1) const;
  // The embedding rows of `tokens`, f32: out is [n × hidden_size] (the input of layer 0).
  void embed(std::span<const int32_t> tokens, std::span<float> out) const;

 private:
  Model() = default;
  struct Rows;  // which cache and position each row of a pass belongs to (model.cc)
  // The layer loop of forward, forward_layers and decode_batch over n rows of x;
  // `work` holds layer_scratch_floats(n) floats.
  void run_layers(int64_t first, int64_t last, const Rows& rows, int64_t n, float* x,
                  float* work) const;
  int64_t layer_scratch_floats(int64_t n) const;
  // Reads config.json and binds every weight of `dir` as stored (shapes checked).
  void bind(const std::filesystem::path& dir);
  void quantize_weights(const LoadOptions& o);
  void interleave_weights();
  ModelConfig config_;
  WeightStore store_;
  ModelWeights weights_;
  std::vector<std::unique_ptr<QuantizedMatrix>> owned_;  // load-time quantised weights
  std::string layout_note_;
};

}  // namespace molt
