//===- CompileReport.h - `tpc compile --report` -------------------*- C++ -*-===//
//
// The report `tpc compile --report [--json]` prints for a compiled module and its plan: memory per device
// split by side, the weight bytes each device holds whole (mirrored: norms, MQA K/V, routers), the
// collectives per layer, and per MoE layer how its experts are split and the expert load each device is
// predicted to carry.
//===----------------------------------------------------------------------===//
#ifndef TPC_TOOLS_TPC_COMPILER_COMPILEREPORT_H
#define TPC_TOOLS_TPC_COMPILER_COMPILEREPORT_H

#include "runtime/plan/PlanFormat.h"

#include "mlir/IR/BuiltinOps.h"

#include <string>

namespace tpc::cli {

/// Prints the report of `plan`, compiled from `model` into `m`: markdown tables, or one JSON object.
void printReport(const std::string &model, bool json, mlir::ModuleOp m, const rt::Plan &plan);

} // namespace tpc::cli

#endif // TPC_TOOLS_TPC_COMPILER_COMPILEREPORT_H
