//===- StateUtils.h - reading and writing split states in passes --*- C++ -*-===//
//
// Small helpers the partitioning passes share: a value's state with the defaults the passes agree on
// (function arguments and unannotated values are mirrored), writing the per-result `tpc.state` array, and
// the quant block a weight's rows are made of.
//===----------------------------------------------------------------------===//
#ifndef TPC_PASSES_STATEUTILS_H
#define TPC_PASSES_STATEUTILS_H

#include "dialects/tpc/IR/TpcOps.h"

#include "mlir/IR/Builders.h"

namespace mlir::tpc {

/// The annotated state of `v`, or mirrored when there is none.
inline StateAttr stateOrMirrored(Value v) {
  if (StateAttr s = getValueState(v))
    return s;
  return StateAttr::getMirrored(v.getContext());
}

/// True when a value in state `have` serves a consumer that needs `need` as it is: the same layout, or a
/// routed value where a partial one is needed (its addends merely do not overlap).
inline bool satisfies(StateAttr have, StateAttr need) {
  return sameLayout(have, need) || (have && need && have.isRouted() && need.isPartial());
}

/// Writes `tpc.state` on `op` (one entry per result).
inline void setStates(Operation *op, ArrayRef<StateAttr> states) {
  SmallVector<Attribute> attrs(states.begin(), states.end());
  op->setAttr(TpcDialect::kStateAttrName, ArrayAttr::get(op->getContext(), attrs));
}

/// The states of every operand of `op` (mirrored where unannotated).
inline SmallVector<StateAttr> operandStates(Operation *op) {
  SmallVector<StateAttr> s;
  for (Value v : op->getOperands())
    s.push_back(stateOrMirrored(v));
  return s;
}

/// The states of every result of `op` (mirrored where unannotated).
inline SmallVector<StateAttr> resultStates(Operation *op) {
  SmallVector<StateAttr> s;
  for (Value v : op->getResults())
    s.push_back(stateOrMirrored(v));
  return s;
}

/// Elements per quant block of a weight's rows (1 for plain types and unknown names).
int64_t weightBlockElems(WeightOp w);

/// Elements of one token's slice of `v` (all dims but a leading dynamic one); for collective sizes.
int64_t elementsPerToken(Value v);

} // namespace mlir::tpc

#endif // TPC_PASSES_STATEUTILS_H
