//===- Pipelines.cpp - the one tpc compilation pipeline ---------------------===//
//
// The order matters: the MoE chain is fused before states are assigned (the combine has its own transfer
// rule, linear in the expert outputs), collectives are inserted once every state is known, stage transfers
// after them (so nothing inside a stage differs from a one-stage plan), backend copies
// after them (a copy carries its source's state, collectives included), localize/plan-memory after them
// because they read the final states, and the norm fusions last because they keep the planned offsets.
//===----------------------------------------------------------------------===//
#include "passes/Pipelines.h"
#include "passes/Passes.h"

#include "mlir/Pass/PassRegistry.h"

namespace mlir::tpc {

const std::vector<std::string> &pipelineStages() {
  static const std::vector<std::string> stages = {
      "tpc-fuse-moe-scale-chain",  "tpc-assign-split-axes", "tpc-insert-collectives",
      "tpc-insert-stage-transfers", "tpc-insert-backend-copies", "tpc-localize", "tpc-plan-memory"};
  return stages;
}

LogicalResult buildTpcPipeline(OpPassManager &pm, const PipelineOptions &opts, const std::string &lastStage) {
  if (!lastStage.empty() && llvm::find(pipelineStages(), lastStage) == pipelineStages().end())
    return failure();
  for (const std::string &stage : pipelineStages()) {
    if (stage == "tpc-fuse-moe-scale-chain") {
      pm.addPass(createTpcFuseMoeScaleChain());
    } else if (stage == "tpc-assign-split-axes") {
      TpcAssignSplitAxesOptions o;
      o.devices = opts.devices;
      o.tensorSplit = opts.tensorSplit;
      o.moeSplit = opts.moeSplit;
      o.routingProfile = opts.routingProfile;
      pm.addPass(createTpcAssignSplitAxes(o));
    } else if (stage == "tpc-insert-collectives") {
      pm.addPass(createTpcInsertCollectives());
    } else if (stage == "tpc-insert-stage-transfers") {
      TpcInsertStageTransfersOptions o;
      o.stages = opts.stages;
      o.stageLayers = opts.stageLayers;
      pm.addPass(createTpcInsertStageTransfers(o));
    } else if (stage == "tpc-insert-backend-copies") {
      TpcInsertBackendCopiesOptions o;
      o.overrideTensor = opts.overrideTensor;
      o.noKvOffload = opts.noKvOffload;
      pm.addPass(createTpcInsertBackendCopies(o));
    } else if (stage == "tpc-localize") {
      pm.addPass(createTpcLocalize());
    } else if (stage == "tpc-plan-memory") {
      TpcPlanMemoryOptions o;
      o.maxBatch = opts.maxBatch;
      o.maxOutputRows = opts.maxOutputRows;
      pm.addPass(createTpcPlanMemory(o));
    }
    if (stage == lastStage)
      return success();
  }
  // Not a --stop-after stage: it only prepares the planned module for emission (plan steps that span
  // several ops), so stopping after it is the whole pipeline.
  pm.addPass(createTpcFuseNorms());
  return success();
}

namespace {
/// `tpc-pipeline` options as a textual pipeline sees them.
struct PipelineCliOptions : PassPipelineOptions<PipelineCliOptions> {
  Option<int64_t> devices{*this, "devices", llvm::cl::desc("Number of devices"), llvm::cl::init(1)};
  ListOption<double> tensorSplit{*this, "tensor-split", llvm::cl::desc("Relative share of each device")};
  ListOption<std::string> overrideTensor{*this, "override-tensor", llvm::cl::desc("REGEX=cpu")};
  Option<bool> noKvOffload{*this, "no-kv-offload", llvm::cl::desc("KV cache on the host"),
                           llvm::cl::init(false)};
  Option<int64_t> maxBatch{*this, "max-batch", llvm::cl::desc("Tokens per call"), llvm::cl::init(512)};
  Option<int64_t> maxOutputRows{*this, "max-output-rows", llvm::cl::desc("Logits rows per call"),
                                llvm::cl::init(64)};
  Option<std::string> moeSplit{*this, "moe-split", llvm::cl::desc("auto, intermediate or expert"),
                               llvm::cl::init("auto")};
  Option<int64_t> stages{*this, "stages", llvm::cl::desc("Pipeline stages"), llvm::cl::init(1)};
  ListOption<int64_t> stageLayers{*this, "stage-layers", llvm::cl::desc("Layers per pipeline stage")};
};
} // namespace

void registerTpcPipeline() {
  PassPipelineRegistration<PipelineCliOptions>(
      "tpc-pipeline", "The whole tpc partitioning pipeline (what tpc compile runs)",
      [](OpPassManager &pm, const PipelineCliOptions &cli) {
        PipelineOptions o;
        o.devices = cli.devices;
        o.tensorSplit.assign(cli.tensorSplit.begin(), cli.tensorSplit.end());
        o.overrideTensor.assign(cli.overrideTensor.begin(), cli.overrideTensor.end());
        o.noKvOffload = cli.noKvOffload;
        o.maxBatch = cli.maxBatch;
        o.maxOutputRows = cli.maxOutputRows;
        o.moeSplit = cli.moeSplit;
        o.stages = cli.stages;
        o.stageLayers.assign(cli.stageLayers.begin(), cli.stageLayers.end());
        (void)buildTpcPipeline(pm, o);
      });
}

void registerTpcPasses() {
  registerTpcPartitionPasses();
  registerTpcPipeline();
}

} // namespace mlir::tpc
