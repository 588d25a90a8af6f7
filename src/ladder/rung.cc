// Rung lifecycle. The weights are mmapped read-only (formats/), so parking is one madvise per
// file and re-loading reads the page cache, not the disk, while the file stays cached.
#include "molt/ladder/rung.h"

#include <unistd.h>

#include <chrono>

#include "molt/common/error.h"
#include "molt/formats/safetensors.h"
#include "molt/ladder/process_memory.h"

namespace molt {
namespace {

double ms_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
}

}  // namespace

Rung::Rung(const ManifestRung& spec, const FootprintShape& shape, const LoadOptions& load)
    : spec_(spec), load_(load) {
  config_ = load_model_config(spec.path);
  // Opening the store maps the files and reads their headers only.
  const WeightStore store = WeightStore::open_dir(spec.path);
  const TensorView* embed = store.find("model.embed_tokens.weight");
  if (embed == nullptr) {
    fail("{}: checkpoint has no tensor 'model.embed_tokens.weight'", spec.path.string());
  }
  dtype_ = embed->dtype;
  stored_bytes_ = store.total_bytes();
  reshape(shape);
}

void Rung::reshape(const FootprintShape& shape) {
  footprint_ = compute_footprint(config_, stored_bytes_, dtype_, shape);
}

Footprint Rung::footprint_for(const FootprintShape& shape) const {
  return compute_footprint(config_, stored_bytes_, dtype_, shape);
}

const Model& Rung::model() const {
  if (!model_) fail("rung '{}' is released: load it before use", spec_.name);
  return *model_;
}

void Rung::touch_pages() const {
  const size_t page = static_cast<size_t>(sysconf(_SC_PAGESIZE));
  volatile unsigned char sink = 0;
  for (const auto& file : model_->store().files()) {
    for (const TensorView& t : file->tensors()) {
      const auto* p = reinterpret_cast<const unsigned char*>(t.data);
      for (size_t i = 0; i < t.nbytes; i += page) sink = sink + p[i];
      if (t.nbytes > 0) sink = sink + p[t.nbytes - 1];
    }
  }
  (void)sink;
}

double Rung::load() {
  if (state_ == RungState::kParked) return unpark();
  const auto t0 = std::chrono::steady_clock::now();
  if (state_ == RungState::kReleased) {
    model_ = Model::load(spec_.path, load_);
    touch_pages();
    state_ = RungState::kLoaded;
  }
  return ms_since(t0);
}

void Rung::open_parked() {
  if (state_ != RungState::kReleased) return;
  model_ = Model::load(spec_.path, load_);
  state_ = RungState::kParked;
}

void Rung::park() {
  if (state_ != RungState::kLoaded) return;
  model_->store().release_pages();
  state_ = RungState::kParked;
}

double Rung::unpark() {
  const auto t0 = std::chrono::steady_clock::now();
  if (state_ == RungState::kParked) {
    touch_pages();
    state_ = RungState::kLoaded;
  } else if (state_ == RungState::kReleased) {
    return load();
  }
  return ms_since(t0);
}

void Rung::release() {
  if (!model_) return;
  model_.reset();
  state_ = RungState::kReleased;
  return_free_memory();  // the f32 norms and biases
}

size_t Rung::resident_bytes() const {
  switch (state_) {
    case RungState::kReleased:
      return 0;
    case RungState::kParked:
      return footprint_.heap_weight_bytes;
    case RungState::kLoaded:
      return footprint_.heap_weight_bytes + footprint_.weight_bytes;
  }
  return 0;
}

}  // namespace molt
