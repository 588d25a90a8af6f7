// Fuzzes WeightStore::open_dir with a fuzzed model.safetensors.index.json
// (src/formats/weight_store.cc) over two small real shards written once.
#include <vector>

#include "fuzz_util.h"
#include "molt/formats/safetensors.h"

namespace {

const std::filesystem::path& checkpoint() {
  static const std::filesystem::path dir = [] {
    const std::filesystem::path d = molt::fuzz::scratch_subdir("checkpoint");
    const std::vector<float> f32(8, 1.5f);
    const std::vector<int8_t> i8(4, -3);
    auto bytes = [](const auto& v) {
      return std::span<const std::byte>(reinterpret_cast<const std::byte*>(v.data()),
                                        v.size() * sizeof(v[0]));
    };
    molt::write_safetensors(
        d / "model-00001-of-00002.safetensors",
        {{"model.embed_tokens.weight", molt::DType::F32, {2, 2}, bytes(f32).first(16)},
         {"model.norm.weight", molt::DType::F32, {4}, bytes(f32).subspan(16)}},
        {{"format", "pt"}});
    molt::write_safetensors(d / "model-00002-of-00002.safetensors",
                            {{"lm_head.weight", molt::DType::I8, {2, 2}, bytes(i8)}});
    return d;
  }();
  return dir;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::filesystem::path& dir = checkpoint();
  molt::fuzz::write_file(dir / "model.safetensors.index.json", molt::fuzz::as_text(data, size));
  return molt::fuzz::guarded([&] {
    const molt::WeightStore s = molt::WeightStore::open_dir(dir);
    size_t total = 0;
    for (const std::string& name : s.names()) total += s.get(name).nbytes;
    MOLT_FUZZ_CHECK(total == s.total_bytes(), "total_bytes %zu != %zu", s.total_bytes(), total);
  });
}
