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
// Also the per-op layer attribution the step names and the report use (from the importer's tpc.layer).
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
  /// Storage of every attention cache's K and V halves (`--cache-type-k/-v`): F16, F32, Q8_0 or Q4_0. A
  /// quantized half needs the layer's head dim to be a multiple of 32 (an error names the flag and the
  /// layer). Recurrent states are F32 whatever these say.
  ::tpc::GGMLType cacheTypeK = ::tpc::GGMLType::F16;
  ::tpc::GGMLType cacheTypeV = ::tpc::GGMLType::F16;
};

/// Emits the plan of `module` (the output of the whole pipeline) compiled from `file`.
FailureOr<::tpc::rt::Plan> emitPlan(ModuleOp module, const ::tpc::gguf::GGUFFile &file,
                                    const EmitOptions &options);

/// Layer of every op: the importer's stamp (`tpc.layer`: block N, or kLayerOutput for "output", the output
/// head), else, for ops the passes created, the latest layer among the producers of its non-weight
/// operands. kLayerNone: no layer (the embedding and what is computed from it alone).
inline constexpr int64_t kLayerNone = -1;
inline constexpr int64_t kLayerOutput = 1 << 30;
DenseMap<Operation *, int64_t> attributeLayers(ModuleOp module);

/// The plan's source (compiler version, the GGUF's absolute path, size and fingerprint), the model facts the
/// importer stamped on the module (arch, vocabulary, training context; the default context) and, where the
/// GGUF has a vocabulary, its tokenizer (fillTokenizer).
LogicalResult fillPlanSource(ModuleOp module, const ::tpc::gguf::GGUFFile &file, const EmitOptions &options,
                             ::tpc::rt::Plan &plan);

/// The GGUF's tokenizer in plan form (every field the runtime's TokenizerData needs), its chat template and
/// the tool_use variant; an error on the module names what the GGUF lacks.
LogicalResult fillTokenizer(ModuleOp module, const ::tpc::gguf::GGUFFile &file, ::tpc::rt::PlanTokenizer &pt);

} // namespace mlir::tpc

#endif // TPC_COMPILER_EMIT_PLANEMITTER_H
