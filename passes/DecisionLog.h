//===- DecisionLog.h - where a pass's decisions can be read -------*- C++ -*-===//
//
// Every tpc pass logs what it decided and why (a split chosen, a collective inserted, a fusion done or
// declined) with TPC_DECISION, which writes each entry twice:
//  - with LLVM_DEBUG to llvm::dbgs() under `-debug-only=<DEBUG_TYPE>`, for an LLVM built with
//    assertions (and a tpc built without NDEBUG);
//  - as an MLIR remark on the op it concerns when the pass option `remarks` is on
//    (`tpc-opt --tpc-fuse-norms=remarks=true`), which works with any LLVM. Debian's LLVM 19 is built
//    without assertions: its libLLVMSupport registers no `-debug`/`-debug-only` option, and a release
//    build compiles LLVM_DEBUG out, so the remarks are the log a lit test can check.
//
//   #define DEBUG_TYPE "tpc-fuse-norms"
//   TPC_DECISION(remarks, op, "fused rms_norm + mul into weighted_rms_norm");
//===----------------------------------------------------------------------===//
#ifndef TPC_PASSES_DECISIONLOG_H
#define TPC_PASSES_DECISIONLOG_H

#include "mlir/IR/Diagnostics.h"
#include "mlir/IR/Operation.h"
#include "llvm/Support/Debug.h"
#include "llvm/Support/raw_ostream.h"

#include <string>

namespace mlir::tpc {
/// "[a, b, c]": a list of sizes for a log message.
inline std::string listString(ArrayRef<int64_t> values) {
  std::string s = "[";
  for (auto [i, v] : llvm::enumerate(values))
    s += (i ? ", " : "") + std::to_string(v);
  return s + "]";
}
} // namespace mlir::tpc

/// Logs `message` (a `<<` chain) about `op`; `remarks` is the pass's option. Needs DEBUG_TYPE.
#define TPC_DECISION(remarks, op, message)                                                                   \
  do {                                                                                                       \
    LLVM_DEBUG(::llvm::dbgs() << "[" DEBUG_TYPE "] " << message << "\n");                                    \
    if (remarks)                                                                                             \
      (op)->emitRemark() << DEBUG_TYPE ": " << message;                                                      \
  } while (false)

#endif // TPC_PASSES_DECISIONLOG_H
