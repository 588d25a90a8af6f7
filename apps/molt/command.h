// Subcommands register themselves: each apps/molt/cmd_*.cc adds its own CLI11 subcommand from a
// static initialiser, so adding a command never edits main.cc.
#pragma once

#include <CLI/CLI.hpp>
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

namespace molt::cli {

using CommandSetup = std::function<void(CLI::App& root)>;

// Called from a static initialiser; returns true so the result can initialise a constant.
bool register_command(CommandSetup setup);

// The shared parent of grouped commands ("bench", "eval", "fit", ...), created on first use.
CLI::App* group(CLI::App& root, const std::string& name, const std::string& description);

// Commands set the process exit status here (CLI11 callbacks return void). molt::Error thrown
// from a callback is printed as "molt: error: ..." and exits 1.
void set_exit_code(int code);
int exit_code();

// True when stderr is a terminal: progress bars show there and stay quiet when piped.
bool stderr_is_tty();

}  // namespace molt::cli

namespace molt::cli {

// Parses "i j k" (spaces or commas) into token ids; errors name the flag and the bad item.
std::vector<int32_t> parse_ids(const std::string& text, const std::string& flag);

// --layout auto|stored|memory: how MLX weights are laid out at load (LoadOptions::layout).
CLI::Option* add_layout_option(CLI::App* s, std::string& layout);

}  // namespace molt::cli
