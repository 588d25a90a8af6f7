// Fuzzes SafetensorsFile::open (src/formats/safetensors_file.cc): the input is a whole
// .safetensors file (u64 header length, JSON header, data block).
#include <cstring>

#include "fuzz_util.h"
#include "molt/formats/safetensors.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static const std::filesystem::path file = molt::fuzz::scratch_dir() / "input.safetensors";
  molt::fuzz::write_file(file, molt::fuzz::as_text(data, size));
  return molt::fuzz::guarded([&] {
    const auto f = molt::SafetensorsFile::open(file);
    MOLT_FUZZ_CHECK(f->file_size() == size, "file_size %zu != %zu", f->file_size(), size);
    unsigned sum = 0;
    for (const molt::TensorView& t : f->tensors()) {
      // Every view lies inside the file: touch its first and last byte.
      const auto* base = reinterpret_cast<const std::byte*>(t.data);
      if (t.nbytes > 0)
        sum += static_cast<unsigned>(base[0]) + static_cast<unsigned>(base[t.nbytes - 1]);
      MOLT_FUZZ_CHECK(t.nbytes == static_cast<size_t>(t.numel()) * molt::dtype_size(t.dtype),
                      "tensor '%s': nbytes %zu", t.name.c_str(), t.nbytes);
      MOLT_FUZZ_CHECK(t.nbytes <= size, "tensor '%s' is larger than the file", t.name.c_str());
      MOLT_FUZZ_CHECK(f->find(t.name) == &t, "find('%s') misses", t.name.c_str());
      (void)t.shape_str();
    }
    // Whole-page release inside the mapping is harmless; the views stay valid.
    if (!f->tensors().empty()) {
      const molt::TensorView& t = f->tensors().front();
      f->release_range(t.data, t.nbytes);
    }
    (void)sum;
  });
}
