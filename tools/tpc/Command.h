//===- Command.h - tpc subcommand registry ------------------------*- C++ -*-===//
//
// Each subcommand lives in its own <Name>Command.cpp and registers itself with TPC_REGISTER_COMMAND, so
// adding a command never touches main.cpp. Commands that need the MLIR compiler live in compiler/ and are
// only built with TPC_ENABLE_COMPILER=ON.
//
// A command's callback reports failure by throwing tpc::cli::Failure (the message is printed as one line
// prefixed "tpc <command>: error: " and tpc exits 1) or CLI::Error for usage mistakes.
//===----------------------------------------------------------------------===//
#ifndef TPC_TOOLS_TPC_COMMAND_H
#define TPC_TOOLS_TPC_COMMAND_H

#include <CLI/CLI.hpp>

#include <stdexcept>
#include <string>

namespace tpc::cli {

/// A user-facing error: one line, naming the file, tensor or flag and what to do.
struct Failure : std::runtime_error {
  using std::runtime_error::runtime_error;
};

using RegisterFn = void (*)(CLI::App &app);

/// Adds `fn` to the commands main() installs; `order` sorts them in --help.
struct CommandRegistration {
  CommandRegistration(int order, RegisterFn fn);
};

} // namespace tpc::cli

#define TPC_CLI_CONCAT2(a, b) a##b
#define TPC_CLI_CONCAT(a, b) TPC_CLI_CONCAT2(a, b)
/// Registers a command; `order` places it in --help (compile 10, run 20, inspect 30, tokenize 40, synth 50).
#define TPC_REGISTER_COMMAND(order, fn)                                                                   \
  static ::tpc::cli::CommandRegistration TPC_CLI_CONCAT(tpcCommandRegistration, __LINE__)(order, fn)

#endif // TPC_TOOLS_TPC_COMMAND_H
