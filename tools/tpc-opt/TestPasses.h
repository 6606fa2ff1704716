//===- TestPasses.h - test-only passes of tpc-opt -----------------*- C++ -*-===//
//
// Passes that exist only to make dialect behaviour observable from lit (remarks checked with
// --verify-diagnostics). They are registered by tpc-opt and linked into nothing else.
//===----------------------------------------------------------------------===//
#ifndef TPC_TOOLS_TPC_OPT_TESTPASSES_H
#define TPC_TOOLS_TPC_OPT_TESTPASSES_H

namespace mlir::tpc {

/// Registers `--tpc-test-split-rules` (TestSplitRules.cpp).
void registerTestPasses();

} // namespace mlir::tpc

#endif // TPC_TOOLS_TPC_OPT_TESTPASSES_H
