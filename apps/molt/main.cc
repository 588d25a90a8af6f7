// molt — one binary, many subcommands (see `molt --help`).
#include <omp.h>
#include <sched.h>
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
//
// With binding asked for (OMP_PROC_BIND, OMP_PLACES), libgomp pins this thread to the first place
// as it loads, and the new image would take that one place for all the CPUs it has: every thread
// then ran on one core (0.5B 4-bit decode with OMP_PROC_BIND=close: 71 tok/s, 152 once fixed). The
// union of the places is the set the process started with (or the places the user named): that goes
// first.
void choose_omp_wait_policy(char** argv) {
  if (std::getenv("OMP_WAIT_POLICY") != nullptr || std::getenv("GOMP_SPINCOUNT") != nullptr) return;
  if (omp_get_proc_bind() != omp_proc_bind_false) {
    cpu_set_t cpus;
    CPU_ZERO(&cpus);
    for (int p = 0; p < omp_get_num_places(); ++p) {
      std::vector<int> ids(static_cast<size_t>(omp_get_place_num_procs(p)));
      omp_get_place_proc_ids(p, ids.data());
      for (const int id : ids) {
        if (id >= 0 && id < CPU_SETSIZE) CPU_SET(id, &cpus);
      }
    }
    if (CPU_COUNT(&cpus) > 0) sched_setaffinity(0, sizeof cpus, &cpus);
  }
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
