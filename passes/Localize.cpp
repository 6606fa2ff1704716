//===- Localize.cpp - tpc-localize -------------------------------------------===//
//
// The last consistency gate before memory planning and emission: every op's operands must already have
// the states its rules require for its results (tpc-insert-collectives made them so), every state must
// fit its value, and then each result gets its per-device local shapes (`tpc.local_shapes`: per result an
// array of one DenseI64ArrayAttr per device, -1 for the token dimension). Uneven splits give different
// shapes per device in the one IR.
//===----------------------------------------------------------------------===//
#include "passes/DecisionLog.h"
#include "passes/Passes.h"
#include "passes/StateUtils.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"

#define DEBUG_TYPE "tpc-localize"

namespace mlir::tpc {
#define GEN_PASS_DEF_TPCLOCALIZE
#include "passes/Passes.h.inc"

namespace {

struct LocalizePass : impl::TpcLocalizeBase<LocalizePass> {
  using TpcLocalizeBase::TpcLocalizeBase;

  void runOnOperation() override {
    ModuleOp module = getOperation();
    int64_t n = getNumDevices(module).value_or(1);
    Builder b(module.getContext());
    WalkResult r = module.walk([&](Operation *op) -> WalkResult {
      if (auto iface = dyn_cast<SplitStateInterface>(op); iface && op->getNumOperands() > 0) {
        SmallVector<StateAttr> have = operandStates(op);
        FailureOr<SmallVector<StateAttr>> need = iface.requirements(resultStates(op), have);
        if (failed(need))
          return op->emitOpError() << "tpc-localize: its operands cannot produce its result states";
        for (auto [i, pair] : llvm::enumerate(llvm::zip(have, *need))) {
          auto [h, w] = pair;
          if (w && !satisfies(h, w) && !h.isLocal())
            return op->emitOpError() << "tpc-localize: operand " << i << " is " << h << " but the op needs " << w
                                     << " (a collective is missing)";
        }
      }
      if (isa<func::ReturnOp>(op))
        for (Value v : op->getOperands())
          if (!stateOrMirrored(v).isMirrored())
            return op->emitOpError() << "tpc-localize: the function returns a value that is "
                                     << stateOrMirrored(v) << ", not mirrored";
      if (op->getNumResults() == 0 || isa<func::FuncOp, ModuleOp>(op))
        return WalkResult::advance();
      SmallVector<Attribute> perResult;
      for (Value v : op->getResults()) {
        StateAttr s = stateOrMirrored(v);
        auto emit = [&] { return op->emitOpError() << "tpc-localize: "; };
        if (failed(verifyStateForType(emit, s, v.getType(), n)))
          return WalkResult::interrupt();
        SmallVector<Attribute> perDevice;
        for (int64_t d = 0; d < n; ++d) {
          SmallVector<int64_t> shape = getLocalShape(v, d);
          for (int64_t &x : shape)
            if (ShapedType::isDynamic(x))
              x = -1;
          perDevice.push_back(b.getDenseI64ArrayAttr(shape));
        }
        // Uneven shares (MPMD in shapes) are worth a line: the rest is a plain split.
        if (llvm::any_of(perDevice, [&](Attribute a) { return a != perDevice.front(); }))
          TPC_DECISION(remarks, op, "result " << cast<OpResult>(v).getResultNumber()
                                              << " has different local shapes per device: "
                                              << b.getArrayAttr(perDevice));
        perResult.push_back(b.getArrayAttr(perDevice));
      }
      op->setAttr(TpcDialect::kLocalShapesAttrName, b.getArrayAttr(perResult));
      return WalkResult::advance();
    });
    if (r.wasInterrupted())
      signalPassFailure();
  }
};

} // namespace
} // namespace mlir::tpc
