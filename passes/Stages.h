//===- Stages.h - which pipeline stage each op runs on ------------*- C++ -*-===//
//
// A pipeline plan (`tpc compile --stages S`) gives each stage a contiguous range of layers; the module
// says which in `tpc.stage_layers` (layers per stage, summing to the model's layers), written by
// tpc-insert-stage-transfers. The stage of an op follows from its layer stamp (the embedding, with no
// layer, on stage 0; the output head on the last stage), never from a tensor name:
//   - a stamped op: the stage holding its layer; kv_cache / recurrent_state: their `layer`;
//   - tpc.stage_transfer: its `to` stage (its result lives there);
//   - func.return: stage 0 (device 0 of stage 0 hands the logits to the caller);
//   - any other op (made by a pass): the latest stage among the producers of its non-weight operands
//     (weights are loaded by whichever stage reads them), stage 0 with none.
// The pass, the plan emitter and the report share this one rule.
//===----------------------------------------------------------------------===//
#ifndef TPC_PASSES_STAGES_H
#define TPC_PASSES_STAGES_H

#include "mlir/IR/BuiltinOps.h"
#include "llvm/ADT/DenseMap.h"

#include <cstdint>
#include <vector>

namespace mlir::tpc {

/// Module attribute: layers per stage (absent: one stage).
inline constexpr llvm::StringLiteral kStageLayersAttrName = "tpc.stage_layers";

/// Layers per stage from the module (one entry: a one-stage plan, or no attribute: empty).
std::vector<int64_t> moduleStageLayers(ModuleOp module);

/// Layers in @forward: one more than the highest block index stamped on an op (0 with none).
int64_t countLayers(ModuleOp module);

/// The stage of every op in the module under `stageLayers` (layers per stage; empty: every op stage 0).
DenseMap<Operation *, int64_t> assignStages(ModuleOp module, const std::vector<int64_t> &stageLayers);

} // namespace mlir::tpc

#endif // TPC_PASSES_STAGES_H
