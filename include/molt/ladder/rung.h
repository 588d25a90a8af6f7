// One rung's lifecycle: released (nothing mapped) → loaded (weights resident) ⇄ parked (weights'
// pages released, the Model object and its small f32 tensors stay) → released.
#pragma once

#include <filesystem>
#include <memory>
#include <string>

#include "molt/formats/hf_config.h"
#include "molt/ladder/footprint.h"
#include "molt/ladder/manifest.h"
#include "molt/model/model.h"

namespace molt {

enum class RungState { kReleased, kLoaded, kParked };

class Rung {
 public:
  // Reads config.json and the safetensors headers (for the stored size); loads nothing.
  Rung(const ManifestRung& spec, const FootprintShape& shape, const LoadOptions& load = {});

  const std::string& name() const { return spec_.name; }
  const std::string& precision() const { return spec_.precision; }
  const std::filesystem::path& path() const { return spec_.path; }
  const ModelConfig& config() const { return config_; }
  const Footprint& footprint() const { return footprint_; }
  DType dtype() const { return dtype_; }
  RungState state() const { return state_; }

  // The model; valid while loaded or parked (a parked model's weights fault back in from the
  // file when touched, so only its config and caches should be used).
  const Model& model() const;

  // Maps the checkpoint and touches every page so the weights are resident (a cold load reads
  // the file; a warm one the page cache). Unparks a parked rung. Returns the wall ms it took.
  double load();
  // Maps the checkpoint without touching the weights: the model (config, geometry) is usable,
  // its weights are not resident yet: the state is parked. No-op unless released.
  void open_parked();
  // madvise(MADV_DONTNEED) over the weights: RSS falls by weight_bytes; the file stays mapped.
  void park();
  // Touches the pages again. Returns the wall ms it took.
  double unpark();
  // Unmaps the checkpoint and frees the model.
  void release();

  // Recomputes the footprint for another session shape (the scratch depends on it).
  void reshape(const FootprintShape& shape);
  // The footprint for a shape, leaving this rung's own as it is (each generation has its own).
  Footprint footprint_for(const FootprintShape& shape) const;

  // Bytes of this rung now resident by the accounting (weights by state; caches are the
  // session's).
  size_t resident_bytes() const;

 private:
  void touch_pages() const;
  ManifestRung spec_;
  LoadOptions load_;
  ModelConfig config_;
  DType dtype_ = DType::BF16;
  size_t stored_bytes_ = 0;
  Footprint footprint_;
  RungState state_ = RungState::kReleased;
  std::unique_ptr<Model> model_;
};

}  // namespace molt
