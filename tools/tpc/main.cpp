//===- main.cpp - the tpc command-line driver -------------------------------===//
//
// `tpc <command> ...`: installs every registered subcommand (see Command.h), parses, and turns failures
// into one clear line on stderr and a non-zero exit status.
//===----------------------------------------------------------------------===//
#include "tools/tpc/Command.h"

#include <fmt/core.h>

#include <algorithm>
#include <map>
#include <string>
#include <utility>
#include <vector>

namespace tpc::cli {
namespace {
std::vector<std::pair<int, RegisterFn>> &registry() {
  static std::vector<std::pair<int, RegisterFn>> commands;
  return commands;
}
} // namespace

CommandRegistration::CommandRegistration(int order, RegisterFn fn) { registry().emplace_back(order, fn); }
} // namespace tpc::cli

int main(int argc, char **argv) {
  CLI::App app{"tpc: ahead-of-time tensor-parallel compiler and runtime for GGUF models"};
  app.require_subcommand(1);
  app.set_version_flag("--version", std::string("tpc ") + TPC_VERSION);
  auto &commands = tpc::cli::registry();
  std::stable_sort(commands.begin(), commands.end(),
                   [](const auto &a, const auto &b) { return a.first < b.first; });
  for (auto &[order, fn] : commands)
    fn(app);
  try {
    // llama.cpp's multi-letter flags (`tpc run --bench -pp 512 -tg 128`, `tpc compile -ot X=CPU -nkvo
    // -ts 3,1 -ctk q8_0`): CLI11 only declares one-letter short names, so these spellings become the long
    // options.
    static const std::map<std::string, std::string> kLlamaFlags = {{"-pp", "--pp"},
                                                                  {"-tg", "--tg"},
                                                                  {"-ot", "--override-tensor"},
                                                                  {"-nkvo", "--no-kv-offload"},
                                                                  {"-ts", "--tensor-split"},
                                                                  {"-np", "--parallel"},
                                                                  {"-ctk", "--cache-type-k"},
                                                                  {"-ctv", "--cache-type-v"}};
    std::vector<std::string> args(argv + 1, argv + argc);
    for (std::string &a : args)
      if (auto it = kLlamaFlags.find(a); it != kLlamaFlags.end())
        a = it->second;
    std::reverse(args.begin(), args.end()); // CLI11 parses a reversed vector
    app.parse(args);
  } catch (const CLI::ParseError &e) {
    return app.exit(e);
  } catch (const tpc::cli::Failure &e) {
    std::string cmd = app.get_subcommands().empty() ? "" : " " + app.get_subcommands().front()->get_name();
    fmt::print(stderr, "tpc{}: error: {}\n", cmd, e.what());
    return 1;
  } catch (const std::exception &e) {
    fmt::print(stderr, "tpc: error: {}\n", e.what());
    return 1;
  }
  return 0;
}
