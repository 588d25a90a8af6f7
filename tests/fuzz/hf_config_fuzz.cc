// Fuzzes config.json: read_json_file + parse_model_config (src/formats/hf_config.cc), then
// checks that what it accepted survives model_config_to_json and parsing again.
#include <nlohmann/json.hpp>

#include "fuzz_util.h"
#include "molt/formats/hf_config.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static const std::filesystem::path file = molt::fuzz::scratch_dir() / "config.json";
  molt::fuzz::write_file(file, molt::fuzz::as_text(data, size));
  return molt::fuzz::guarded([&] {
    const molt::ModelConfig c = molt::parse_model_config(molt::read_json_file(file), file.string());
    (void)c.q_dim();
    (void)c.kv_dim();
    const nlohmann::json j = molt::model_config_to_json(c);
    (void)molt::generation_config_to_json(c);
    molt::ModelConfig again;
    try {
      again = molt::parse_model_config(j, "round trip");
    } catch (const molt::Error& e) {
      MOLT_FUZZ_CHECK(false, "an accepted config does not parse after writing: %s", e.what());
    }
    MOLT_FUZZ_CHECK(again.hidden_size == c.hidden_size && again.head_dim == c.head_dim &&
                        again.num_hidden_layers == c.num_hidden_layers &&
                        again.num_key_value_heads == c.num_key_value_heads &&
                        again.eos_token_ids == c.eos_token_ids &&
                        again.quantization.has_value() == c.quantization.has_value(),
                    "round trip changed the config: %s", j.dump().c_str());
  });
}
