//===- TpcInterfaces.cpp - SplitStateInterface and its rules ------*- C++ -*-===//
//
// The generated SplitStateInterface code, its default rules and the rules of the ops where they are
// plain elementwise facts: activations keep any non-partial state (a routed one only when they map zero to
// zero), scale is linear (partial stays partial), the broadcasting binary ops follow the table in
// BinaryRules below, and tpc.add_id (an add of a bias row gathered by expert id) follows its mul_mat_id's
// layouts. The structural ops
// (matmul, attention, MoE, views, collectives) have theirs in TpcSplitRules.cpp.
// A null state in the input means "unknown" and makes a rule fail.
//===----------------------------------------------------------------------===//

#include "dialects/tpc/IR/TpcOps.h"

using namespace mlir;
using namespace mlir::tpc;

#include "dialects/tpc/IR/TpcInterfaces.cpp.inc"

/// The state every one of `states` has when they are all mirrored, or all local to one device.
static StateAttr commonTrivialState(ArrayRef<StateAttr> states) {
  if (states.empty() || !states.front())
    return {};
  StateAttr s = states.front();
  if (!s.isMirrored() && !s.isLocal())
    return {};
  if (llvm::any_of(states, [&](StateAttr t) { return t != s; }))
    return {};
  return s;
}

FailureOr<SmallVector<StateAttr>> mlir::tpc::detail::transferAllMirrored(Operation *op,
                                                                         ArrayRef<StateAttr> operandStates) {
  StateAttr s = commonTrivialState(operandStates);
  if (!s || operandStates.size() != op->getNumOperands())
    return failure();
  return SmallVector<StateAttr>(op->getNumResults(), s);
}

FailureOr<SmallVector<StateAttr>> mlir::tpc::detail::requireAllMirrored(Operation *op,
                                                                        ArrayRef<StateAttr> resultStates) {
  StateAttr s = commonTrivialState(resultStates);
  if (!s || resultStates.size() != op->getNumResults())
    return failure();
  return SmallVector<StateAttr>(op->getNumOperands(), s);
}

//===----------------------------------------------------------------------===//
// Elementwise rules
//===----------------------------------------------------------------------===//

/// Nonlinear one-operand ops: any state but partial passes through (f(a) + f(b) != f(a + b)); a routed
/// one (zeros on the devices that do not hold a row) only when f(0) = 0.
static FailureOr<SmallVector<StateAttr>> passNonPartial(ArrayRef<StateAttr> states, bool zeroToZero) {
  if (states.size() != 1 || !states[0] || states[0].isPartial() || (states[0].isRouted() && !zeroToZero))
    return failure();
  return SmallVector<StateAttr>{states[0]};
}

/// True for the functions with f(0) = 0.
static bool mapsZeroToZero(UnaryFn fn) { return fn != UnaryFn::exp && fn != UnaryFn::sigmoid; }

/// Linear one-operand ops: every state passes through.
static FailureOr<SmallVector<StateAttr>> passAny(ArrayRef<StateAttr> states) {
  if (states.size() != 1 || !states[0])
    return failure();
  return SmallVector<StateAttr>{states[0]};
}

FailureOr<SmallVector<StateAttr>> UnaryOp::transfer(ArrayRef<StateAttr> s) {
  return passNonPartial(s, mapsZeroToZero(getFn()));
}
FailureOr<SmallVector<StateAttr>> UnaryOp::requirements(ArrayRef<StateAttr> s, ArrayRef<StateAttr>) {
  return passNonPartial(s, mapsZeroToZero(getFn()));
}
FailureOr<SmallVector<StateAttr>> SoftcapOp::transfer(ArrayRef<StateAttr> s) { return passNonPartial(s, true); }
FailureOr<SmallVector<StateAttr>> SoftcapOp::requirements(ArrayRef<StateAttr> s, ArrayRef<StateAttr>) {
  return passNonPartial(s, true);
}
FailureOr<SmallVector<StateAttr>> ScaleOp::transfer(ArrayRef<StateAttr> s) { return passAny(s); }
FailureOr<SmallVector<StateAttr>> ScaleOp::requirements(ArrayRef<StateAttr> s, ArrayRef<StateAttr>) { return passAny(s); }

namespace {
/// Rules of `lhs op rhs` with rhs broadcast to lhs. `linearInBoth` (add): partial + partial is
/// partial. `linearInLhs` (mul, div): partial op mirrored is partial; routed * mirrored stays routed
/// (0 * m = 0; not div: 0 / 0 is not 0). An add marked `tpc.on_device`
/// runs on that device only (the others pass lhs through), so partial + mirrored stays partial: the
/// residual joins the addends once, on one rank.
struct BinaryRules {
  Operation *op;
  bool linearInBoth;

  bool isMul() const { return isa<MulOp>(op); }

  bool onOneDevice() const { return linearInBoth && op->hasAttr(TpcDialect::kOnDeviceAttrName); }

  /// The state rhs needs when lhs is split as `l`: the same split on the aligned axis, or mirrored when
  /// rhs broadcasts along that axis (size 1 or absent).
  StateAttr rhsFor(StateAttr l) const {
    auto lt = cast<RankedTensorType>(op->getOperand(0).getType());
    auto rt = cast<RankedTensorType>(op->getOperand(1).getType());
    int64_t a = l.getAxis() - (lt.getRank() - rt.getRank());
    if (a < 0 || rt.getDimSize(a) == 1)
      return StateAttr::getMirrored(op->getContext());
    return StateAttr::getSplit(op->getContext(), a, l.getSizes(), l.getGranule(), l.getSegments());
  }

  FailureOr<SmallVector<StateAttr>> transfer(ArrayRef<StateAttr> s) const {
    if (s.size() != 2 || !s[0] || !s[1])
      return failure();
    StateAttr l = s[0], r = s[1];
    if (StateAttr t = commonTrivialState(s))
      return SmallVector<StateAttr>{t};
    // A device holding all of rhs (or its matching part) combines it with its part of lhs.
    if (l.isSplit() && (r.isMirrored() || sameLayout(r, rhsFor(l))))
      return SmallVector<StateAttr>{l};
    if (l.isPartial() && r.isPartial() && linearInBoth)
      return SmallVector<StateAttr>{l};
    if (l.isPartial() && r.isMirrored() && (!linearInBoth || onOneDevice()))
      return SmallVector<StateAttr>{l};
    if (l.isRouted() && r.isMirrored() && isMul())
      return SmallVector<StateAttr>{l};
    return failure();
  }

  FailureOr<SmallVector<StateAttr>> requirements(ArrayRef<StateAttr> s) const {
    if (s.size() != 1 || !s[0])
      return failure();
    StateAttr res = s[0];
    MLIRContext *ctx = op->getContext();
    if (res.isMirrored() || res.isLocal())
      return SmallVector<StateAttr>{res, res};
    if (res.isSplit())
      return SmallVector<StateAttr>{res, rhsFor(res)};
    if (res.isRouted()) {
      if (!isMul())
        return failure();
      return SmallVector<StateAttr>{res, StateAttr::getMirrored(ctx)};
    }
    // Partial result.
    return SmallVector<StateAttr>{res, linearInBoth && !onOneDevice() ? res : StateAttr::getMirrored(ctx)};
  }
};
} // namespace

FailureOr<SmallVector<StateAttr>> AddOp::transfer(ArrayRef<StateAttr> s) {
  return BinaryRules{*this, true}.transfer(s);
}
FailureOr<SmallVector<StateAttr>> AddOp::requirements(ArrayRef<StateAttr> s, ArrayRef<StateAttr>) {
  return BinaryRules{*this, true}.requirements(s);
}
FailureOr<SmallVector<StateAttr>> MulOp::transfer(ArrayRef<StateAttr> s) {
  return BinaryRules{*this, false}.transfer(s);
}
FailureOr<SmallVector<StateAttr>> MulOp::requirements(ArrayRef<StateAttr> s, ArrayRef<StateAttr>) {
  return BinaryRules{*this, false}.requirements(s);
}
FailureOr<SmallVector<StateAttr>> DivOp::transfer(ArrayRef<StateAttr> s) {
  return BinaryRules{*this, false}.transfer(s);
}
FailureOr<SmallVector<StateAttr>> DivOp::requirements(ArrayRef<StateAttr> s, ArrayRef<StateAttr>) {
  return BinaryRules{*this, false}.requirements(s);
}

//===----------------------------------------------------------------------===//
// Per-expert bias (tpc.add_id): an add whose right operand is gathered by expert id
//===----------------------------------------------------------------------===//

/// x + bias[ids] with x [T,k,N] and bias [E,N]: x's columns split with the bias's columns; token or slot
/// axes split with the whole bias; whole experts (routed x) with the bias's rows of the same experts (a
/// device adds the rows of its experts, the others are zero rows there and stay zero, as the bias is not
/// added to them); a partial x only when the op runs on one device (`tpc.on_device`: the bias is added
/// once, the other devices forward their addend).
FailureOr<SmallVector<StateAttr>> AddIdOp::transfer(ArrayRef<StateAttr> s) {
  if (s.size() != 3 || !s[0] || !s[1] || !s[2] || !(s[2].isMirrored() || s[2].isLocal()))
    return failure();
  StateAttr x = s[0], b = s[1];
  MLIRContext *ctx = getContext();
  if (StateAttr t = commonTrivialState(s))
    return SmallVector<StateAttr>{t};
  if (x.isSplit() && x.getAxis() == 2 &&
      sameLayout(b, StateAttr::getSplit(ctx, 1, x.getSizes(), x.getGranule(), x.getSegments())))
    return SmallVector<StateAttr>{x};
  if (x.isSplit() && x.getAxis() < 2 && b.isMirrored())
    return SmallVector<StateAttr>{x};
  if (x.isRouted() && b.isSplit() && b.getAxis() == 0 && b.getSizes() == x.getSizes())
    return SmallVector<StateAttr>{x};
  if (x.isPartial() && b.isMirrored() && (*this)->hasAttr(TpcDialect::kOnDeviceAttrName))
    return SmallVector<StateAttr>{x};
  return failure();
}
FailureOr<SmallVector<StateAttr>> AddIdOp::requirements(ArrayRef<StateAttr> r, ArrayRef<StateAttr>) {
  if (r.size() != 1 || !r[0])
    return failure();
  StateAttr res = r[0];
  MLIRContext *ctx = getContext();
  StateAttr m = StateAttr::getMirrored(ctx);
  if (res.isMirrored() || res.isLocal())
    return SmallVector<StateAttr>{res, res, res};
  if (res.isSplit() && res.getAxis() == 2)
    return SmallVector<StateAttr>{
        res, StateAttr::getSplit(ctx, 1, res.getSizes(), res.getGranule(), res.getSegments()), m};
  if (res.isSplit())
    return SmallVector<StateAttr>{res, m, m};
  if (res.isRouted())
    return SmallVector<StateAttr>{res, StateAttr::getSplit(ctx, 0, res.getSizes()), m};
  if ((*this)->hasAttr(TpcDialect::kOnDeviceAttrName))
    return SmallVector<StateAttr>{res, m, m}; // partial: the bias once, on that device
  return failure();
}
