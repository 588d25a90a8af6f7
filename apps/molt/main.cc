// molt — one binary, many subcommands (see `molt --help`).
#include <unistd.h>

#include <cstdio>
#include <exception>
#include <vector>

#include "command.h"
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

int main(int argc, char** argv) {
  CLI::App app{"molt — an on-device LLM runtime that changes model between two tokens"};
  app.require_subcommand(1);
  app.set_version_flag("--version", "molt 0.1.0");
  for (auto& setup : molt::cli::registry()) setup(app);
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return app.exit(e);
  } catch (const molt::Error& e) {
    std::fprintf(stderr, "molt: error: %s\n", e.what());
    return 1;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "molt: internal error: %s\n", e.what());
    return 2;
  }
  return molt::cli::exit_code();
}
