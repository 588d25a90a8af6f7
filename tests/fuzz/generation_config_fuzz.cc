// Fuzzes generation_config.json through load_model_config (src/formats/hf_config.cc), beside a
// fixed valid config.json.
#include "fuzz_util.h"
#include "molt/formats/hf_config.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static const std::filesystem::path dir = [] {
    const std::filesystem::path d = molt::fuzz::scratch_subdir("checkpoint");
    molt::fuzz::write_file(d / "config.json", R"({"architectures": ["Qwen2ForCausalLM"],
      "hidden_size": 64, "num_hidden_layers": 2, "num_attention_heads": 4,
      "num_key_value_heads": 2, "intermediate_size": 128, "vocab_size": 256,
      "eos_token_id": 3})");
    return d;
  }();
  molt::fuzz::write_file(dir / "generation_config.json", molt::fuzz::as_text(data, size));
  return molt::fuzz::guarded([&] {
    const molt::ModelConfig c = molt::load_model_config(dir);
    for (int64_t id : c.eos_token_ids)
      MOLT_FUZZ_CHECK(id >= 0, "negative eos id %lld", (long long)id);
  });
}
