// molt — one binary, many subcommands (see `molt --help`).
#include <signal.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <exception>
#include <vector>

#include "command.h"
#include "crash_report.h"
#include "molt/common/error.h"

namespace molt::cli {
namespace {
std::vector<CommandSetup>& registry() {
  static std::vector<CommandSetup> r;
  return r;
}
int g_exit_code = 0;
}  // namespace

bool register_command(CommandSetup setup) {
  registry().push_back(std::move(setup));
  return true;
}

CLI::App* group(CLI::App& root, const std::string& name, const std::string& description) {
  for (CLI::App* sub : root.get_subcommands([](CLI::App*) { return true; })) {
    if (sub->get_name() == name) return sub;
  }
  CLI::App* g = root.add_subcommand(name, description);
  g->require_subcommand(1);
  return g;
}

void set_exit_code(int code) {
  g_exit_code = code;
}
bool stderr_is_tty() {
  return isatty(STDERR_FILENO) == 1;
}
int exit_code() {
  return g_exit_code;
}

}  // namespace molt::cli

namespace {

// libgomp reads its wait policy when it loads, before main(). Decode opens ~120 parallel
// regions per token, so how an idle worker waits decides the speed. Its default spins ~300k
// rounds at every barrier, which with other busy processes (a phone, a CI box, a training
// run) turns each region into a fight for the cores (0.5B bf16 decode measured 1.0 tok/s
// instead of 19). Passive waiting sleeps at once, and every wake-up then costs ~60 us on this
// VM (0.5B 4-bit decode 47 tok/s against 78 spinning). A short spin of 10k rounds (~0.1 ms)
// covers the serial gaps between regions and was the fastest measured both quiet (93 tok/s)
// and beside two busy processes (34 against 19 passive). Unless the user chose a policy,
// run ourselves once more with it.
void choose_omp_wait_policy(char** argv) {
  if (std::getenv("OMP_WAIT_POLICY") != nullptr || std::getenv("GOMP_SPINCOUNT") != nullptr) return;
  setenv("GOMP_SPINCOUNT", "10000", 1);
  execv("/proc/self/exe", argv);  // if that fails, carry on with the default policy
}

}  // namespace

int main(int argc, char** argv) {
  choose_omp_wait_policy(argv);
  // Past a file-size limit (ulimit -f) a write then fails with EFBIG, which the writers report
  // naming the file, and the half-built output is removed; the default action would kill the
  // process mid-write instead.
  signal(SIGXFSZ, SIG_IGN);
  molt::cli::install_crash_report();
  try {
    CLI::App app{"molt — an on-device LLM runtime that changes model between two tokens"};
    app.require_subcommand(1);
    app.set_version_flag("--version", "molt 0.1.0");
    for (auto& setup : molt::cli::registry()) setup(app);
    try {
      app.parse(argc, argv);
    } catch (const CLI::ParseError& e) {
      return app.exit(e);
    }
  } catch (const molt::Error& e) {
    std::fprintf(stderr, "molt: error: %s\n", e.what());
    return 1;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "molt: internal error: %s\n", e.what());
    return 2;
  } catch (...) {
    std::fprintf(stderr, "molt: internal error: unknown exception\n");
    return 2;
  }
  return molt::cli::exit_code();
}
