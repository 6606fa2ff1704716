//===- StageFlags.cpp - --stages and --stage-layers ---------------------------===//
//
// Pipeline stages as the compile flags give them: `--devices N --stages S` means S stages of N / S devices
// each; `--stage-layers a,b,...` the layers of each stage (their sum is checked against the model by the
// compiler, which knows the layer count). Every error names the flag and says what would work.
//===----------------------------------------------------------------------===//
#include "tools/tpc/ModelSource.h"

#include "tools/tpc/Command.h"

#include <fmt/core.h>

#include <sstream>

namespace tpc::cli {

void checkStageFlags(const CompileFlags &f, CompileRequest &r) {
  if (f.stages < 1 || f.stages > 64)
    throw Failure(fmt::format("--stages {}: must be 1 to 64 (1: no pipeline)", f.stages));
  if (r.devices % f.stages != 0)
    throw Failure(
        fmt::format("--stages {} does not divide --devices {}: every stage gets --devices / --stages "
                    "devices (e.g. --devices {} --stages {})",
                    f.stages, r.devices, r.devices - r.devices % f.stages + f.stages, f.stages));
  if (f.stages > 1 && !r.tensorSplit.empty())
    throw Failure("--tensor-split with --stages is not supported yet: every stage splits its layers evenly");
  r.stages = f.stages;
  if (f.stageLayers.empty())
    return;
  if (f.stages < 2)
    throw Failure(fmt::format("--stage-layers {}: give --stages too (one count per stage)", f.stageLayers));
  std::istringstream in(f.stageLayers);
  for (std::string item; std::getline(in, item, ',');) {
    size_t used = 0;
    long long n = 0;
    try {
      n = std::stoll(item, &used);
    } catch (...) {
      used = 0;
    }
    if (used == 0 || used != item.size() || n < 1)
      throw Failure(
          fmt::format("--stage-layers: '{}' is not a positive layer count (expected e.g. 20,28)", item));
    r.stageLayers.push_back(n);
  }
  if (int64_t(r.stageLayers.size()) != f.stages)
    throw Failure(fmt::format("--stage-layers {}: {} counts for --stages {} (one per stage)", f.stageLayers,
                              r.stageLayers.size(), f.stages));
}

} // namespace tpc::cli
