//===- TestSplitRules.cpp - print SplitStateInterface results -----*- C++ -*-===//
//
// `--tpc-test-split-rules`: a test-only pass for lit. For every op with SplitStateInterface whose
// operands all carry a split state (tpc.state of the producer, or of a function argument) it emits a
// remark with `transfer`'s answer; for every op whose results carry `tpc.state` it emits a remark with
// `requirements`' answer (given the operands' annotated states). "none" means the rule failed (no rule for those states). The IR is unchanged.
//===----------------------------------------------------------------------===//

#include "tools/tpc-opt/TestPasses.h"

#include "dialects/tpc/IR/TpcOps.h"

#include "mlir/IR/BuiltinOps.h"
#include "mlir/Pass/Pass.h"

using namespace mlir;

namespace mlir::tpc {
namespace {

/// Formats `states` as `[#tpc.state<...>, ...]`, or "none" for a failed rule.
std::string describe(FailureOr<SmallVector<StateAttr>> states) {
  if (failed(states))
    return "none";
  std::string s;
  llvm::raw_string_ostream os(s);
  os << '[';
  llvm::interleaveComma(*states, os, [&](StateAttr a) { os << a; });
  os << ']';
  return s;
}

/// See the file comment.
struct TestSplitRulesPass : PassWrapper<TestSplitRulesPass, OperationPass<ModuleOp>> {
  MLIR_DEFINE_EXPLICIT_INTERNAL_INLINE_TYPE_ID(TestSplitRulesPass)

  StringRef getArgument() const final { return "tpc-test-split-rules"; }
  StringRef getDescription() const final {
    return "Emit remarks with the SplitStateInterface transfer/requirements of annotated ops";
  }

  void runOnOperation() override {
    getOperation().walk([](SplitStateInterface op) {
      SmallVector<StateAttr> in;
      for (Value v : op->getOperands())
        in.push_back(getValueState(v));
      if (!in.empty() && llvm::all_of(in, [](StateAttr s) { return bool(s); }))
        op->emitRemark() << "transfer: " << describe(op.transfer(in));
      auto results = op->getAttrOfType<ArrayAttr>(TpcDialect::kStateAttrName);
      if (!results)
        return;
      SmallVector<StateAttr> out;
      for (Attribute a : results)
        out.push_back(cast<StateAttr>(a));
      op->emitRemark() << "requirements: " << describe(op.requirements(out, in));
    });
  }
};

} // namespace

void registerTestPasses() { PassRegistration<TestSplitRulesPass>(); }

} // namespace mlir::tpc
