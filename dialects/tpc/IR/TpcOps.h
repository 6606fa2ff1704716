//===- TpcOps.h - tpc dialect ops, types, attributes --------------*- C++ -*-===//
//
// The one header users of the tpc dialect include: the dialect, its enums, the split-state attribute,
// the kv_cache type, the SplitStateInterface and the ops, plus the helpers passes use to read and check
// split states. Generated declarations come from TpcOps.td and friends.
//
// Usage:
//   registry.insert<mlir::tpc::TpcDialect>();
//   auto w = b.create<mlir::tpc::WeightOp>(loc, type, "blk.0.attn_q.weight", "q4_K");
//   auto y = b.create<mlir::tpc::MatmulOp>(loc, x, w);          // result type inferred
//   mlir::tpc::StateAttr s = mlir::tpc::getValueState(y);        // null when not annotated
//===----------------------------------------------------------------------===//
#ifndef TPC_DIALECTS_TPC_IR_TPCOPS_H
#define TPC_DIALECTS_TPC_IR_TPCOPS_H

#include "mlir/Bytecode/BytecodeOpInterface.h"
#include "mlir/IR/BuiltinTypes.h"
#include "mlir/IR/Dialect.h"
#include "mlir/IR/OpDefinition.h"
#include "mlir/IR/OpImplementation.h"
#include "mlir/Interfaces/InferTypeOpInterface.h"
#include "mlir/Interfaces/SideEffectInterfaces.h"

#include <optional>

#include "dialects/tpc/IR/TpcOpsDialect.h.inc"

#include "dialects/tpc/IR/TpcEnums.h.inc"

#define GET_ATTRDEF_CLASSES
#include "dialects/tpc/IR/TpcAttrs.h.inc"

#define GET_TYPEDEF_CLASSES
#include "dialects/tpc/IR/TpcOpsTypes.h.inc"

namespace mlir::tpc::detail {
/// Default SplitStateInterface::transfer: all operands mirrored (or all local on one device) gives the
/// same state for every result; anything else has no generic rule.
FailureOr<SmallVector<StateAttr>> transferAllMirrored(Operation *op, ArrayRef<StateAttr> operandStates);
/// Default SplitStateInterface::requirements: the inverse of transferAllMirrored.
FailureOr<SmallVector<StateAttr>> requireAllMirrored(Operation *op, ArrayRef<StateAttr> resultStates);
} // namespace mlir::tpc::detail

#include "dialects/tpc/IR/TpcInterfaces.h.inc"

namespace mlir::tpc::OpTrait {
/// Verifies an op by running its inferReturnTypes with the op's location, so shape errors get the
/// inference's precise message, and a wrong result type gets one clear error (it runs before
/// InferTypeOpInterface's own check, which adds "failed to infer returned types").
template <typename ConcreteType>
class VerifyByInference : public ::mlir::OpTrait::TraitBase<ConcreteType, VerifyByInference> {
public:
  static LogicalResult verifyTrait(Operation *op) {
    SmallVector<Type, 2> types;
    if (failed(ConcreteType::inferReturnTypes(op->getContext(), op->getLoc(), op->getOperands(),
                                              op->getRawDictionaryAttrs(), op->getPropertiesStorage(),
                                              op->getRegions(), types)))
      return failure();
    if (!ConcreteType::isCompatibleReturnTypes(types, op->getResultTypes()))
      return op->emitOpError() << "result type(s) " << op->getResultTypes()
                               << " differ from the inferred type(s) " << TypeRange(types);
    return success();
  }
};
} // namespace mlir::tpc::OpTrait

#define GET_OP_CLASSES
#include "dialects/tpc/IR/TpcOps.h.inc"

namespace mlir::tpc {

/// The split state annotated on `value` (`tpc.state` of its defining op, or of the function argument),
/// or null when there is none.
StateAttr getValueState(Value value);

/// True when `a` and `b` put the same elements on the same devices: equal kinds, and for splits equal
/// axis, sizes and segments (the granule is a constraint on sizes, not part of the layout). Nulls equal
/// only each other.
bool sameLayout(StateAttr a, StateAttr b);

/// The shape `value` has on `device`: its global shape with the split axis (if any) at that device's size;
/// a kv_cache is [n_head_kv]. Dynamic dims stay ShapedType::kDynamic.
SmallVector<int64_t> getLocalShape(Value value, int64_t device);

/// The number of devices (`tpc.devices`) of the closest enclosing op that declares it, or nullopt.
std::optional<int64_t> getNumDevices(Operation *op);

/// Checks `state` against a value of type `type`: axis < rank, sum(sizes) == dim(axis) for a static
/// dimension, only axis 0 (KV heads) of a kv_cache, and sizes/device consistent with `numDevices`.
LogicalResult verifyStateForType(function_ref<InFlightDiagnostic()> emitError, StateAttr state, Type type,
                                 std::optional<int64_t> numDevices);

/// The ops that name per-sequence state living across calls (a KV cache, a recurrent state): leaves of
/// the graph like weights, placed with the caches, held by the runtime rather than the arenas.
inline bool isCacheOp(Operation *op) { return op && isa<KvCacheOp, RecurrentStateOp>(op); }

} // namespace mlir::tpc

#endif // TPC_DIALECTS_TPC_IR_TPCOPS_H
