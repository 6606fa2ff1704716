//===- PlanEmitter.h - partitioned tpc IR -> device plan ----------*- C++ -*-===//
//
// Turns the module the pipeline leaves (split states, collectives, `tpc.offsets` from tpc-plan-memory) into
// the runtime's tpc::rt::Plan: header and model facts, the GGUF's tokenizer, and per device the weight
// slices (strided pieces of the GGUF), KV caches, tensors and steps. The plan is checked with
// validatePlan(); a problem there is a compiler bug and is reported as such. Errors are MLIR diagnostics
// on the offending op (a state the emitter cannot lower, a weight split off quant-block boundaries).
//
// Usage:
//   mlir::FailureOr<tpc::rt::Plan> plan = mlir::tpc::emitPlan(module, **ggufFile, {"tpc 0.1.0"});
//   if (succeeded(plan)) tpc::rt::writePlan(*plan, "plan.bin");
//
// Also the per-op layer attribution the report uses (which `blk.N` an op belongs to).
//===----------------------------------------------------------------------===//
#ifndef TPC_COMPILER_EMIT_PLANEMITTER_H
#define TPC_COMPILER_EMIT_PLANEMITTER_H

#include "compiler/gguf/GGUFFile.h"
#include "runtime/plan/PlanFormat.h"

#include "mlir/IR/BuiltinOps.h"
#include "mlir/Support/LogicalResult.h"

#include <string>

namespace mlir::tpc {

struct EmitOptions {
  std::string compilerVersion; ///< stored in the plan header
};

/// Emits the plan of `module` (the output of the whole pipeline) compiled from `file`.
FailureOr<::tpc::rt::Plan> emitPlan(ModuleOp module, const ::tpc::gguf::GGUFFile &file,
                                    const EmitOptions &options);

/// Layer of an op: the largest `blk.N` among the weights it reads and the layers of its operands' producers
/// (so everything computed from layer N's weights belongs to layer N until layer N+1's weights are read).
/// kLayerNone: before any layer (embedding); kLayerOutput: reads `output*` or `token_embd*` after a layer
/// (the output norm / projection, a tied embedding) and everything computed from it.
inline constexpr int64_t kLayerNone = -1;
inline constexpr int64_t kLayerOutput = 1 << 30;
DenseMap<Operation *, int64_t> attributeLayers(ModuleOp module);

} // namespace mlir::tpc

#endif // TPC_COMPILER_EMIT_PLANEMITTER_H
