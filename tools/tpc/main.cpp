//===- main.cpp - the tpc command-line driver -------------------------------===//
//
// `tpc <command> ...`: installs every registered subcommand (see Command.h), parses, and turns failures
// into one clear line on stderr and a non-zero exit status.
//===----------------------------------------------------------------------===//
#include "tools/tpc/Command.h"

#include "runtime/support/Progress.h"

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
  app.footer(
      "Any command takes --no-progress: no progress bars or lines on stderr (also under --log-disable).");
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
                                                                  // llama-server's (tpc serve, ServeFlags.h):
                                                                  // as one-letter clusters they would read as
                                                                  // -n gl, -c tk, -m d, -s ps, -h f...
                                                                  {"-ngl", "--n-gpu-layers"},
                                                                  {"-fa", "--flash-attn"},
                                                                  {"-ub", "--ubatch-size"},
                                                                  {"-ctk", "--cache-type-k"},
                                                                  {"-ctv", "--cache-type-v"},
                                                                  {"-md", "--model-draft"},
                                                                  {"-sps", "--slot-prompt-similarity"},
                                                                  {"-hf", "--hf-repo"},
                                                                  {"-cb", "--cont-batching"},
                                                                  {"-nocb", "--no-cont-batching"},
                                                                  {"-to", "--timeout"}};
    std::vector<std::string> args(argv + 1, argv + argc);
    for (std::string &a : args)
      if (auto it = kLlamaFlags.find(a); it != kLlamaFlags.end())
        a = it->second;
    // --no-progress, on any command, turns off every progress display (runtime/support/Progress.h); so does
    // llama.cpp's quiet flag --log-disable, which stays for the command that declares it.
    for (const std::string &a : args)
      if (a == "--no-progress" || a == "--log-disable")
        tpc::progressAllowed() = false;
    args.erase(std::remove(args.begin(), args.end(), "--no-progress"), args.end());
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
