//===- Passes.h - tpc partitioning passes -------------------------*- C++ -*-===//
//
// Pass declarations (generated from Passes.td) and the registration hook tpc-opt calls.
//===----------------------------------------------------------------------===//
#ifndef TPC_PASSES_PASSES_H
#define TPC_PASSES_PASSES_H

#include "mlir/IR/BuiltinOps.h"
#include "mlir/Pass/Pass.h"

#include <memory>

namespace mlir::tpc {

#define GEN_PASS_DECL
#include "passes/Passes.h.inc"

/// Registers every tpc pass and the `tpc-pipeline` pipeline.
void registerTpcPasses();

#define GEN_PASS_REGISTRATION
#include "passes/Passes.h.inc"

} // namespace mlir::tpc

#endif // TPC_PASSES_PASSES_H
