//===- tpc-opt.cpp - mlir-opt for the tpc dialect -----------------*- C++ -*-===//
//
// Parses, verifies, transforms and prints IR in the tpc, func and arith dialects; the driver of the lit
// tests (`tpc-opt %s --tpc-... | FileCheck %s`), with the test-only passes of TestPasses.h. The tpc
// passes and pipeline are registered when the build has passes/ (TPC_HAVE_PASSES), so the dialect
// tests run before the passes exist.
//===----------------------------------------------------------------------===//

#include "dialects/tpc/IR/TpcOps.h"
#include "tools/tpc-opt/TestPasses.h"

#include "mlir/Dialect/Arith/IR/Arith.h"
#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/IR/DialectRegistry.h"
#include "mlir/Tools/mlir-opt/MlirOptMain.h"
#include "mlir/Transforms/Passes.h"

#ifdef TPC_HAVE_PASSES
#include "passes/Passes.h"
#endif

int main(int argc, char **argv) {
  mlir::DialectRegistry registry;
  registry.insert<mlir::tpc::TpcDialect, mlir::func::FuncDialect, mlir::arith::ArithDialect>();
  // Generic cleanups (canonicalize, cse) are useful around the tpc passes in tests.
  mlir::registerTransformsPasses();
  mlir::tpc::registerTestPasses();
#ifdef TPC_HAVE_PASSES
  mlir::tpc::registerTpcPasses();
#endif
  return mlir::asMainReturnCode(mlir::MlirOptMain(argc, argv, "tpc optimizer driver\n", registry));
}
