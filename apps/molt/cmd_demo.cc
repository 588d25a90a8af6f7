// molt demo: molt's main job on the bundled tiny ladder. One answer under spike_mid_answer with
// the molt policy, printed as it streams, then the same prompt and trace under each condition
// (A hold, B small, C reprefill, D molt, heal, auto): killed?, stall at the seam, seam
// divergence; auto's notes say what it chose at each seam and why.
#include <fmt/format.h>

#include <filesystem>

#include "command.h"
#include "ladder_cli.h"
#include "molt/common/error.h"
#include "molt/kernels/linear.h"
#include "molt/kernels/threads.h"
#include "molt/ladder/synthetic.h"
#include "molt/runtime/metrics.h"

namespace molt::cli {
namespace {

namespace fs = std::filesystem;

struct DemoArgs {
  std::string ladder = "models/tiny-ladder/ladder.json";
  std::string trace = "traces/spike_mid_answer.json";
  std::string synthetic;
  std::string prompt = "initrd provides the capability to load a RAM disk by the boot loader.";
  int max_tokens = 56;
  bool stop_at_eos = false;  // keep going past end-of-text so the spike always lands mid-answer
  int threads = 0;
};

std::string list(const std::vector<double>& v, const char* f) {
  std::vector<std::string> s;
  s.reserve(v.size());
  for (double x : v) s.push_back(fmt::format(fmt::runtime(f), x));
  return fmt::format("{}", fmt::join(s, ", "));
}

// One condition line: killed?, stall at each seam, seam divergence.
void condition_line(const std::string& label, const std::string& policy, const EventLog& log) {
  const ConditionSummary c = summarize_condition(log.migrations, log.done, policy);
  std::string stall_s = "—", kl_s = "—", peak_s = "—";
  if (c.killed) {
    stall_s = fmt::format("— (killed after token {})", c.tokens - 1);
  } else if (c.seams.empty()) {
    stall_s = fmt::format("— (no seam: {} throughout)", fmt::join(c.rungs_used, ", "));
  } else {
    std::vector<std::string> seams;
    for (const auto& s : c.seams) seams.push_back(fmt::format("{}→{} {:.1f}", s.from, s.to, s.ms));
    stall_s = fmt::format("max {:.1f} ({})", c.max_stall_ms, fmt::join(seams, ", "));
    peak_s = c.worst_overshoot_mib > 0 ? fmt::format("+{:.1f} MiB over", c.worst_overshoot_mib)
                                       : "within budget";
  }
  if (!c.seam_kl.empty()) {
    kl_s = fmt::format("mean {:.3f} ({})", c.mean_seam_kl, list(c.seam_kl, "{:.3f}"));
  }
  fmt::print("{:<13} killed={:<5}  tokens {:>3}  stall ms {:<46}  seam KL {:<30}  seam peak {}{}\n",
             label, c.killed, c.tokens, stall_s, kl_s, peak_s,
             c.fallbacks.empty() ? "" : fmt::format("  [ran {}]", fmt::join(c.fallbacks, ", ")));
}

void run(const DemoArgs& a) {
  set_num_threads(a.threads);
  fs::path manifest = a.ladder;
  if (!a.synthetic.empty()) {
    manifest = fs::path(a.synthetic) / "ladder.json";
    if (!fs::exists(manifest)) {
      fmt::print("writing a synthetic ladder (random weights, tiny-ladder sizes) to {}\n",
                 a.synthetic);
      write_synthetic_ladder(a.synthetic);
      fit_missing_maps(*Ladder::open(manifest), stdout);
    }
  } else if (!fs::exists(manifest)) {
    fail(
        "{}: the tiny ladder is not here (build it with `make tiny-ladder`, pass --ladder FILE, or "
        "run on random weights with --synthetic DIR)",
        manifest.string());
  }
  auto ladder = Ladder::open(manifest);
  const PressureTrace trace = PressureTrace::load(a.trace);
  SessionOptions base;
  base.max_tokens = a.max_tokens;
  base.stop_at_eos = a.stop_at_eos;
  // auto's stall estimate comes from this machine's measured prefill speed; the demo's contexts
  // (under 100 tokens) are re-read on any machine, so that its transcript is the same everywhere
  // (README.md quotes it; tests/cli/readme_demo_test.cc compares).
  base.auto_reprefill_below = 100;
  // For the same reason its prefill runs the f32 GEMM: bf16 activations (kernels/linear.h,
  // taken on CPUs with bf16 dot products) move logits by ~1e-3 and could flip a near tie.
  set_gemm_precision(GemmPrecision::kF32);
  const std::vector<int32_t> prompt = encode_prompt(*ladder, a.prompt, false, "", nullptr);
  const int64_t context = static_cast<int64_t>(prompt.size()) + base.max_tokens;
  ladder->reshape(FootprintShape{base.prefill_chunk, context, num_threads()});

  fmt::print("molt demo · ladder {} · trace {} · {}\n", ladder->name(), trace.name,
             ladder->tokenizer_note());
  print_ladder(stdout, *ladder, context);
  for (const ManifestRoute& r : ladder->manifest().routes) {
    if (r.method == "maps" && !r.maps_present()) {
      fmt::print("  route {} → {}: no maps yet ({}): molt and heal re-prefill on it\n", r.from,
                 r.to, r.maps.string());
    }
  }
  fmt::print("prompt ({} tokens): {}\n\n", prompt.size(), a.prompt);

  {
    TraceBudget budget(trace);
    StreamPrinter out(stdout);
    SessionOptions o = base;
    o.policy = Policy::kMolt;
    Session(*ladder, budget, out, o).run(prompt);
  }

  fmt::print(
      "\nsame prompt and trace, each condition (seam KL = KL(p_sender ‖ p_receiver) at the "
      "seam):\n");
  const std::vector<std::pair<std::string, Policy>> conditions = {
      {"A hold", Policy::kHold}, {"B small", Policy::kSmall}, {"C reprefill", Policy::kReprefill},
      {"D molt", Policy::kMolt}, {"  heal", Policy::kHeal},   {"  auto", Policy::kAuto}};
  for (const auto& [label, policy] : conditions) {
    TraceBudget budget(trace);
    EventLog log;
    SessionOptions o = base;
    o.policy = policy;
    o.measure_seams = true;
    Session(*ladder, budget, log, o).run(prompt);
    condition_line(label, policy_name(policy), log);
    if (policy != Policy::kAuto) continue;
    for (const MigrationEvent& m : log.migrations) {
      fmt::print("    {}→{} {}\n", m.from, m.to, m.note);
    }
  }
}

const bool registered = register_command([](CLI::App& root) {
  auto a = std::make_shared<DemoArgs>();
  CLI::App* s = root.add_subcommand(
      "demo", "The tiny ladder under a mid-answer memory spike, condition by condition");
  s->add_option("--ladder", a->ladder, "ladder manifest");
  s->add_option("--trace", a->trace, "pressure trace");
  s->add_option("--synthetic", a->synthetic,
                "use (or write) a random-weight ladder in this folder");
  s->add_option("--prompt", a->prompt, "prompt text");
  s->add_option("--max-tokens", a->max_tokens, "answer length")->check(CLI::PositiveNumber);
  s->add_flag("--stop-at-eos", a->stop_at_eos,
              "end the answer at end-of-text (the spike may then miss it)");
  s->add_option("--threads", a->threads, "threads (0 = all cores)")->check(CLI::NonNegativeNumber);
  s->callback([a] { run(*a); });
});

}  // namespace
}  // namespace molt::cli
