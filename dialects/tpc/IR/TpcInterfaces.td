//===- TpcInterfaces.td - tpc op interfaces ----------------*- tablegen -*-===//
//
// SplitStateInterface: the per-op rules that tpc-assign-split-axes propagates to a fixed point. `transfer`
// runs forward (result states from operand states), `requirements` backward (operand states an op needs
// to produce the given result states, given what is known of the operands: a row-parallel matmul's weight
// takes the split of its activation's reduction axis). Both return failure when the op has no rule for
// the given states; the passes then resolve the conflict with a collective. Every op states its rules.
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
        `resultStates`, or failure when the op cannot produce them. `operandStates` is what is known of
        the operands (null entries: unknown or free); rules use it only where the results alone do not
        determine the operands (the reduction split behind a partial matmul result, MQA attention).}],
      /*retTy=*/"::mlir::FailureOr<::llvm::SmallVector<::mlir::tpc::StateAttr>>",
      /*methodName=*/"requirements",
      /*args=*/(ins "::llvm::ArrayRef<::mlir::tpc::StateAttr>":$resultStates,
                    "::llvm::ArrayRef<::mlir::tpc::StateAttr>":$operandStates),
      /*methodBody=*/"",
      /*defaultImplementation=*/[{
        return ::mlir::tpc::detail::requireAllMirrored($_op.getOperation(), resultStates);
      }]>,
  ];
}

#endif // TPC_DIALECTS_TPC_IR_TPCINTERFACES_TD
