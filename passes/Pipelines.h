//===- Pipelines.h - the one tpc compilation pipeline -------------*- C++ -*-===//
//
// `tpc compile` and `tpc-opt --tpc-pipeline` build the same pass list from the same options, so a lit test
// of the pipeline is a test of the CLI.
//===----------------------------------------------------------------------===//
#ifndef TPC_PASSES_PIPELINES_H
#define TPC_PASSES_PIPELINES_H

#include "mlir/Pass/PassManager.h"
#include "mlir/Pass/PassOptions.h"

#include <string>
#include <vector>

namespace mlir::tpc {

/// Everything the pipeline needs from the user.
struct PipelineOptions {
  int64_t devices = 1;
  std::vector<double> tensorSplit;         ///< empty: equal shares
  std::vector<std::string> overrideTensor; ///< REGEX=cpu
  bool noKvOffload = false;
  int64_t maxBatch = 512;
  int64_t maxOutputRows = 64; ///< logits rows per call (tpc-plan-memory's max-output-rows)
  std::string moeSplit = "auto"; ///< auto, intermediate or expert (whole experts per device)
  std::string routingProfile;    ///< for auto: per-layer tokens per expert (empty: uniform routing)
  int64_t stages = 1;               ///< pipeline stages; `devices` is then the devices of one stage
  std::vector<int64_t> stageLayers; ///< layers per stage (empty: balanced by weight bytes)
};

/// The pass names in pipeline order (for `--emit=mlir --stop-after NAME`-style stage selection). The whole
/// pipeline ends with one more pass, tpc-fuse-norms, which prepares the planned module for emission.
const std::vector<std::string> &pipelineStages();

/// Appends the pipeline up to and including `lastStage` (empty: all, tpc-fuse-norms included) to `pm`.
/// Unknown stage: failure.
LogicalResult buildTpcPipeline(OpPassManager &pm, const PipelineOptions &opts,
                               const std::string &lastStage = {});

/// Registers `tpc-pipeline` with the options above as a pass pipeline (for tpc-opt).
void registerTpcPipeline();

} // namespace mlir::tpc

#endif // TPC_PASSES_PIPELINES_H
