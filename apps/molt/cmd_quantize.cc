// molt quantize: writes a quantised copy of a checkpoint (MLX affine layout, or int8).
#include <fmt/core.h>

#include "command.h"
#include "molt/common/error.h"
#include "molt/formats/hf_config.h"
#include "molt/kernels/threads.h"
#include "molt/model/quantize.h"

namespace molt::cli {
namespace {

struct QuantizeArgs {
  std::string model, out;
  int bits = 4;
  int64_t group_size = 64;
  bool int8 = false;
  bool interleave = false;
  int threads = 0;
};

const bool registered = register_command([](CLI::App& root) {
  auto a = std::make_shared<QuantizeArgs>();
  CLI::App* s = root.add_subcommand(
      "quantize",
      "Write a quantised copy of a checkpoint: MLX affine (uint32-packed weight, scales, "
      "biases per group) or, with --int8, symmetric int8 (I8 weight + f32 scales)");
  s->add_option("--model", a->model,
                "dense checkpoint directory (with --interleave also an MLX-quantised one: its "
                "weights are re-laid out, not requantised)")
      ->required();
  s->add_option("--out", a->out, "output directory")->required();
  CLI::Option* bits = s->add_option("--bits", a->bits, "4 or 8")->capture_default_str();
  CLI::Option* group =
      s->add_option("--group-size", a->group_size,
                    "inputs per scale: 32, 64, 128 (int8 also 0 = per output channel)")
          ->capture_default_str();
  CLI::Option* int8 =
      s->add_flag("--int8", a->int8, "symmetric int8 (molt's own layout) instead of MLX affine");
  s->add_flag("--interleave", a->interleave,
              "affine weights with rows interleaved by 8 (molt's layout \"rows8\": the x86 "
              "decode kernel's fastest; MLX cannot read it)");
  s->add_option("--threads", a->threads, "threads (0 = all cores)");
  s->callback([a, bits, group, int8] {
    set_num_threads(a->threads);
    const ModelConfig source = load_model_config(a->model);
    if (source.quantization && a->interleave) {
      // Re-laying out keeps the checkpoint's own bits and groups.
      for (const CLI::Option* opt : {bits, group, int8}) {
        if (opt->count() > 0) {
          fail(
              "quantize: {} is already quantised; --interleave re-lays out its weights as they "
              "are, so {} does not apply",
              a->model, opt->get_name());
        }
      }
    }
    QuantizeOptions o;
    o.mode = a->int8 ? "int8" : "affine";
    o.bits = a->int8 ? 8 : a->bits;
    o.group_size = a->group_size;
    o.interleave = a->interleave;
    const size_t bytes = quantize_checkpoint(a->model, a->out, o);
    if (source.quantization) {
      fmt::print(
          "wrote {} (the MLX weights of {} with rows interleaved by 8, {:.1f} MB of "
          "tensors)\n",
          a->out, a->model, static_cast<double>(bytes) / 1e6);
      return;
    }
    fmt::print("wrote {} ({} {}-bit, group {}{}, {:.1f} MB of tensors)\n", a->out, o.mode, o.bits,
               o.group_size, o.interleave ? ", rows interleaved by 8" : "",
               static_cast<double>(bytes) / 1e6);
  });
});

}  // namespace
}  // namespace molt::cli
