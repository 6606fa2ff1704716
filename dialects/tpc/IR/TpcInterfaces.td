//===- TpcInterfaces.td - tpc op interfaces ----------------*- tablegen -*-===//
//
// SplitStateInterface: the per-op rules that tpc-assign-split-axes propagates to a fixed point. `transfer`
// runs forward (result states from operand states), `requirements` backward (operand states an op needs
// to produce the given result states). Both return failure when the op has no rule for the given states;
// the pass then resolves the conflict with a collective. The defaults only cover what is trivially true
// of every op (all operands and results mirrored); ops add their own rules.
//
//===----------------------------------------------------------------------===//
#ifndef TPC_DIALECTS_TPC_IR_TPCINTERFACES_TD
#define TPC_DIALECTS_TPC_IR_TPCINTERFACES_TD

include "mlir/IR/OpBase.td"

def Tpc_SplitStateInterface : OpInterface<"SplitStateInterface"> {
  let cppNamespace = "::mlir::tpc";
  let description = [{
    Split-state propagation rules of an op. States are `#tpc.state<...>` attributes, one per operand
    (`transfer`) or per result (`requirements`), in global shapes. A rule that cannot be computed returns
    failure; a null entry in the input means "unknown".
  }];
  let methods = [
    InterfaceMethod<
      /*desc=*/[{Forward rule: the state of every result given the operands' states, or failure when
        the op has no rule for this combination.}],
      /*retTy=*/"::mlir::FailureOr<::llvm::SmallVector<::mlir::tpc::StateAttr>>",
      /*methodName=*/"transfer",
      /*args=*/(ins "::llvm::ArrayRef<::mlir::tpc::StateAttr>":$operandStates),
      /*methodBody=*/"",
      /*defaultImplementation=*/[{
        return ::mlir::tpc::detail::transferAllMirrored($_op.getOperation(), operandStates);
      }]>,
    InterfaceMethod<
      /*desc=*/[{Backward rule: the state every operand must have for the results to have
        `resultStates`, or failure when the op cannot produce them.}],
      /*retTy=*/"::mlir::FailureOr<::llvm::SmallVector<::mlir::tpc::StateAttr>>",
      /*methodName=*/"requirements",
      /*args=*/(ins "::llvm::ArrayRef<::mlir::tpc::StateAttr>":$resultStates),
      /*methodBody=*/"",
      /*defaultImplementation=*/[{
        return ::mlir::tpc::detail::requireAllMirrored($_op.getOperation(), resultStates);
      }]>,
  ];
}

#endif // TPC_DIALECTS_TPC_IR_TPCINTERFACES_TD
