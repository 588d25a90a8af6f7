// molt synth: a Hugging Face checkpoint with random weights at a real Qwen2.5 geometry.
#include <fmt/core.h>

#include "command.h"
#include "molt/common/error.h"
#include "molt/model/synth.h"

namespace molt::cli {
namespace {

struct SynthArgs {
  std::string geometry = "qwen2.5-0.5b";
  int64_t hidden = 0, layers = 0, heads = 0, kv_heads = 0, intermediate = 0, vocab = 0;
  double rope_theta = 0;
  bool untied = false;
  std::string dtype = "bf16";
  uint64_t seed = 0;
  double shard_mib = 4096;
  std::string out;
};

void run(const SynthArgs& a) {
  ModelConfig c = qwen25_geometry(a.geometry);
  if (a.hidden) c.hidden_size = a.hidden;
  if (a.layers) c.num_hidden_layers = a.layers;
  if (a.heads) c.num_attention_heads = a.heads;
  if (a.kv_heads) c.num_key_value_heads = a.kv_heads;
  if (a.intermediate) c.intermediate_size = a.intermediate;
  if (a.vocab) c.vocab_size = a.vocab;
  if (a.rope_theta > 0) c.rope_theta = a.rope_theta;
  if (a.untied) c.tie_word_embeddings = false;
  if (c.num_attention_heads <= 0 || c.hidden_size % c.num_attention_heads != 0) {
    fail("--heads {} must divide --hidden {}", c.num_attention_heads, c.hidden_size);
  }
  if (c.num_key_value_heads <= 0 || c.num_attention_heads % c.num_key_value_heads != 0) {
    fail("--kv-heads {} must divide --heads {}", c.num_key_value_heads, c.num_attention_heads);
  }
  c.head_dim = c.hidden_size / c.num_attention_heads;
  if (c.vocab_size <= 151645)
    c.eos_token_ids = {c.vocab_size - 1}, c.bos_token_id = c.vocab_size - 1;
  SynthOptions o;
  if (a.dtype == "bf16") {
    o.dtype = DType::BF16;
  } else if (a.dtype == "f16") {
    o.dtype = DType::F16;
  } else if (a.dtype == "f32") {
    o.dtype = DType::F32;
  } else {
    fail("--dtype: '{}' is not one of bf16, f16, f32", a.dtype);
  }
  o.seed = a.seed;
  o.max_shard_bytes = static_cast<size_t>(a.shard_mib * 1024 * 1024);
  o.show_progress = stderr_is_tty();
  write_synthetic_checkpoint(c, o, a.out);
  fmt::print("wrote {} ({} layers, hidden {}, {} heads × {}, {} kv heads, {})\n", a.out,
             c.num_hidden_layers, c.hidden_size, c.num_attention_heads, c.head_dim,
             c.num_key_value_heads, a.dtype);
}

const bool registered = register_command([](CLI::App& root) {
  auto a = std::make_shared<SynthArgs>();
  CLI::App* s =
      root.add_subcommand("synth", "Write a random-weight checkpoint at a Qwen2.5 geometry");
  s->add_option("--geometry", a->geometry, "qwen2.5-0.5b | qwen2.5-1.5b | qwen2.5-3b")
      ->check(CLI::IsMember({"qwen2.5-0.5b", "qwen2.5-1.5b", "qwen2.5-3b"}));
  s->add_option("--hidden", a->hidden, "override hidden_size")->check(CLI::PositiveNumber);
  s->add_option("--layers", a->layers, "override num_hidden_layers")->check(CLI::PositiveNumber);
  s->add_option("--heads", a->heads, "override num_attention_heads")->check(CLI::PositiveNumber);
  s->add_option("--kv-heads", a->kv_heads, "override num_key_value_heads")
      ->check(CLI::PositiveNumber);
  s->add_option("--intermediate", a->intermediate, "override intermediate_size")
      ->check(CLI::PositiveNumber);
  s->add_option("--vocab", a->vocab, "override vocab_size")->check(CLI::PositiveNumber);
  s->add_option("--rope-theta", a->rope_theta, "override rope_theta")->check(CLI::PositiveNumber);
  s->add_flag("--untied", a->untied, "write a separate lm_head.weight");
  s->add_option("--dtype", a->dtype, "bf16 | f16 | f32")
      ->check(CLI::IsMember({"bf16", "f16", "f32"}));
  s->add_option("--seed", a->seed, "random seed");
  s->add_option("--shard-mib", a->shard_mib, "largest shard in MiB")->check(CLI::PositiveNumber);
  s->add_option("--out", a->out, "output directory")->required();
  s->callback([a] { run(*a); });
});

}  // namespace
}  // namespace molt::cli
