//===- TpcSplitRules.cpp - split-state rules of the structural ops -*- C++ -*-===//
//
// SplitStateInterface rules of every op that is not plain elementwise: what each op computes locally
// when its operands are split, mirrored or partial, and what it needs of its operands for a given result
// state. The rules state facts about the ops, not policy: which of several legal states a value gets is
// tpc-assign-split-axes' choice. States are in global shapes; sizes travel through reshapes scaled by the
// dimensions merged into or split off the split axis. A `routed` value (expert parallelism: rows held by
// the device owning their expert, zeros elsewhere) passes only ops that map zero to zero.
//===----------------------------------------------------------------------===//

#include "dialects/tpc/IR/TpcOps.h"

#include <numeric>

using namespace mlir;
using namespace mlir::tpc;

namespace {
using States = SmallVector<StateAttr>;

StateAttr mirrored(Operation *op) { return StateAttr::getMirrored(op->getContext()); }
StateAttr partial(Operation *op) { return StateAttr::getPartial(op->getContext()); }
bool isRouted(StateAttr s) { return s && s.isRouted(); }
/// Partial in the wide sense: each device holds an addend (a routed value's addends do not overlap).
bool isAddend(StateAttr s) { return s && (s.isPartial() || s.isRouted()); }

/// `s` moved to another axis (sizes, granule and segments unchanged).
StateAttr onAxis(StateAttr s, int64_t axis) {
  return StateAttr::getSplit(s.getContext(), axis, s.getSizes(), s.getGranule(), s.getSegments());
}

/// `s` with every size multiplied by `num` and divided by `den` (exactly), on `axis`. Null when a size does
/// not divide.
StateAttr rescaled(StateAttr s, int64_t axis, int64_t num, int64_t den, int64_t segments) {
  SmallVector<int64_t> sizes;
  for (int64_t x : s.getSizes()) {
    if ((x * num) % den)
      return {};
    sizes.push_back(x * num / den);
  }
  // Every size is a multiple of granule*segments before; keep that true after, in the new units.
  int64_t g = s.getGranule() * s.getSegments() * num;
  int64_t unit = std::lcm(g, den) / den;
  if (unit % segments)
    unit = std::lcm(unit, segments);
  return StateAttr::getSplit(s.getContext(), axis, sizes, unit / segments, segments);
}

int64_t rankOf(Value v) {
  if (auto t = dyn_cast<RankedTensorType>(v.getType()))
    return t.getRank();
  return 1; // a kv cache: its one splittable axis
}

bool isSplitOn(StateAttr s, int64_t axis) { return s && s.isSplit() && s.getAxis() == axis; }
bool isTrivial(StateAttr s) { return s && (s.isMirrored() || s.isLocal()); }
bool freeOrMirrored(StateAttr s) { return !s || s.isMirrored(); }

/// Ops that work row by row over their last axis: any split of another axis passes through, mirrored stays
/// mirrored, partial and a split of the last axis do not.
FailureOr<States> rowwise(Operation *op, ArrayRef<StateAttr> s, int64_t lastAxis) {
  if (s.empty() || !s[0])
    return failure();
  if (isTrivial(s[0]))
    return States{s[0]};
  if (s[0].isSplit() && s[0].getAxis() != lastAxis && s[0].getAxis() < rankOf(op->getResult(0)))
    return States{s[0]};
  return failure();
}

/// Ops that are linear in their single operand and map axes one to one: any state passes.
FailureOr<States> identity(ArrayRef<StateAttr> s) {
  if (s.size() != 1 || !s[0])
    return failure();
  return States{s[0]};
}
} // namespace

//===----------------------------------------------------------------------===//
// Values that are not computed: weights and caches take whatever their consumers need.
//===----------------------------------------------------------------------===//

FailureOr<States> WeightOp::transfer(ArrayRef<StateAttr>) { return States{mirrored(*this)}; }
FailureOr<States> WeightOp::requirements(ArrayRef<StateAttr> r, ArrayRef<StateAttr>) {
  if (r.size() != 1 || !r[0] || isAddend(r[0]))
    return failure();
  return States{};
}
FailureOr<States> KvCacheOp::transfer(ArrayRef<StateAttr>) { return States{mirrored(*this)}; }
FailureOr<States> KvCacheOp::requirements(ArrayRef<StateAttr> r, ArrayRef<StateAttr>) {
  if (r.size() != 1 || !r[0] || isAddend(r[0]) || (r[0].isSplit() && r[0].getAxis() != 0))
    return failure();
  return States{};
}

//===----------------------------------------------------------------------===//
// Row-wise ops
//===----------------------------------------------------------------------===//

FailureOr<States> RmsNormOp::transfer(ArrayRef<StateAttr> s) {
  return rowwise(*this, s, getType().getRank() - 1);
}
FailureOr<States> RmsNormOp::requirements(ArrayRef<StateAttr> r, ArrayRef<StateAttr>) {
  return rowwise(*this, r, getType().getRank() - 1);
}
// The weighted norm is the row-wise norm with a mirrored weight over the last axis.
FailureOr<States> WeightedRmsNormOp::transfer(ArrayRef<StateAttr> s) {
  if (s.size() != 2 || !s[1] || !s[1].isMirrored())
    return failure();
  return rowwise(*this, s.take_front(), getType().getRank() - 1);
}
FailureOr<States> WeightedRmsNormOp::requirements(ArrayRef<StateAttr> r, ArrayRef<StateAttr>) {
  FailureOr<States> x = rowwise(*this, r, getType().getRank() - 1);
  if (failed(x))
    return failure();
  return States{x->front(), mirrored(*this)};
}
FailureOr<States> SoftmaxOp::transfer(ArrayRef<StateAttr> s) {
  return rowwise(*this, s, getType().getRank() - 1);
}
FailureOr<States> SoftmaxOp::requirements(ArrayRef<StateAttr> r, ArrayRef<StateAttr>) {
  return rowwise(*this, r, getType().getRank() - 1);
}
FailureOr<States> TopKOp::transfer(ArrayRef<StateAttr> s) { return rowwise(*this, s, getType().getRank() - 1); }
FailureOr<States> TopKOp::requirements(ArrayRef<StateAttr> r, ArrayRef<StateAttr>) {
  return rowwise(*this, r, getType().getRank() - 1);
}

FailureOr<States> TakeAlongOp::transfer(ArrayRef<StateAttr> s) {
  if (s.size() != 2 || !s[0] || !s[1])
    return failure();
  if (sameLayout(s[0], s[1]) && isTrivial(s[0]))
    return States{s[0]};
  // Rows split the same way on both: each device gathers within its rows.
  if (s[0].isSplit() && sameLayout(s[0], s[1]) && s[0].getAxis() != getAxis())
    return States{s[0]};
  return failure();
}
FailureOr<States> TakeAlongOp::requirements(ArrayRef<StateAttr> r, ArrayRef<StateAttr>) {
  if (r.size() != 1 || !r[0] || isAddend(r[0]) || (r[0].isSplit() && r[0].getAxis() == getAxis()))
    return failure();
  return States{r[0], r[0]};
}

// select_rows gathers whole rows (axis 0) by mirrored indices: any state of x that does not split axis 0
// or sum (partial) carries over; the indices are needed everywhere.
FailureOr<States> SelectRowsOp::transfer(ArrayRef<StateAttr> s) {
  if (s.size() != 2 || !s[0] || !isTrivial(s[1]) || s[0].isPartial() || isSplitOn(s[0], 0))
    return failure();
  return States{s[0]};
}
FailureOr<States> SelectRowsOp::requirements(ArrayRef<StateAttr> r, ArrayRef<StateAttr>) {
  if (r.size() != 1 || !r[0] || r[0].isPartial() || isSplitOn(r[0], 0))
    return failure();
  return States{r[0], mirrored(*this)};
}

FailureOr<States> RopeOp::transfer(ArrayRef<StateAttr> s) {
  if (s.size() < 2 || !s[0] || llvm::any_of(s.drop_front(), [](StateAttr t) { return !isTrivial(t); }))
    return failure();
  // Heads (axis 1) may be split; the rotated axis (2) may not.
  if (isTrivial(s[0]) || isSplitOn(s[0], 0) || isSplitOn(s[0], 1))
    return States{s[0]};
  return failure();
}
FailureOr<States> RopeOp::requirements(ArrayRef<StateAttr> r, ArrayRef<StateAttr>) {
  if (r.size() != 1 || !r[0] || isAddend(r[0]) || isSplitOn(r[0], 2))
    return failure();
  States out{r[0]};
  out.append(getNumOperands() - 1, mirrored(*this));
  return out;
}

FailureOr<States> GluOp::transfer(ArrayRef<StateAttr> s) {
  int64_t last = getType().getRank() - 1;
  if (s.empty() || !s[0] || s[0].isPartial())
    return failure();
  if (getUp()) {
    if (s.size() != 2 || !sameLayout(s[0], s[1]))
      return failure();
    return States{s[0]};
  }
  // Routed rows: fn(0) * 0 = 0 on the devices that do not hold a row, whatever fn is.
  if (isTrivial(s[0]) || s[0].isRouted() || (s[0].isSplit() && s[0].getAxis() != last))
    return States{s[0]};
  // A merged [gate | up] operand split per segment: each device holds matching halves.
  if (s[0].getSegments() != 2)
    return failure();
  StateAttr out = rescaled(s[0], last, 1, 2, 1);
  if (!out)
    return failure();
  return States{out};
}
FailureOr<States> GluOp::requirements(ArrayRef<StateAttr> r, ArrayRef<StateAttr>) {
  int64_t last = getType().getRank() - 1;
  if (r.size() != 1 || !r[0] || r[0].isPartial())
    return failure();
  if (getUp())
    return States{r[0], r[0]};
  if (!isSplitOn(r[0], last))
    return States{r[0]};
  if (r[0].getSegments() != 1)
    return failure();
  StateAttr in = rescaled(r[0], last, 2, 1, 2);
  if (!in)
    return failure();
  return States{in};
}

//===----------------------------------------------------------------------===//
// Matmuls
//===----------------------------------------------------------------------===//

FailureOr<States> MatmulOp::transfer(ArrayRef<StateAttr> s) {
  if (s.size() != 2 || !s[0])
    return failure();
  StateAttr x = s[0], w = s[1];
  int64_t k = getX().getType().getRank() - 1;
  if (isTrivial(x) && (!w || sameLayout(w, x)))
    return States{x};
  // Column parallel: rows of w split, x whole: the result's N axis is split the same way.
  if (x.isMirrored() && isSplitOn(w, 0))
    return States{onAxis(w, getType().getRank() - 1)};
  // Row parallel: the reduction axis split on both sides: each device holds an addend.
  if (isSplitOn(x, k) && (!w || sameLayout(w, onAxis(x, 1))))
    return States{partial(*this)};
  // Token (or other batch) axes split with a whole weight.
  if (x.isSplit() && x.getAxis() < k && freeOrMirrored(w))
    return States{x};
  // Linear in x: partial x times a whole weight (a routed x keeps its zero rows).
  if (isAddend(x) && freeOrMirrored(w))
    return States{x};
  return failure();
}
FailureOr<States> MatmulOp::requirements(ArrayRef<StateAttr> r, ArrayRef<StateAttr> ops) {
  if (r.size() != 1 || !r[0])
    return failure();
  int64_t n = getType().getRank() - 1, k = getX().getType().getRank() - 1;
  StateAttr res = r[0];
  if (isTrivial(res))
    return States{res, res};
  if (isSplitOn(res, n))
    return States{mirrored(*this), onAxis(res, 0)};
  if (res.isSplit())
    return States{res, mirrored(*this)};
  // Partial: the reduction split is whatever x has (a row-parallel matmul), or x itself is partial.
  StateAttr x = ops.empty() ? StateAttr() : ops[0];
  if (isSplitOn(x, k))
    return States{x, onAxis(x, 1)};
  return States{res, mirrored(*this)};
}

FailureOr<States> MulMatIdOp::transfer(ArrayRef<StateAttr> s) {
  if (s.size() != 3 || !s[0] || !isTrivial(s[2]))
    return failure();
  StateAttr x = s[0], w = s[1];
  int64_t k = getX().getType().getRank() - 1;
  if (isTrivial(x) && (!w || sameLayout(w, x)) && sameLayout(x, s[2]))
    return States{x};
  // Experts split over devices (expert parallel): each device runs the experts it holds for the rows
  // routed to them and writes zeros for the rest. A routed per-slot x (the down projection's) must be
  // routed over the same experts; its foreign rows are zeros and are skipped.
  if (isSplitOn(w, 0) && (x.isMirrored() || (x.isRouted() && x.getSizes() == w.getSizes())))
    return States{StateAttr::getRouted(getContext(), w.getSizes())};
  if (x.isRouted() && !w)
    return States{x};
  // Every expert's rows split the same way (tensor parallel inside each expert).
  if (x.isMirrored() && isSplitOn(w, 1))
    return States{onAxis(w, 2)};
  if (isSplitOn(x, k) && (!w || sameLayout(w, onAxis(x, 2))))
    return States{partial(*this)};
  return failure();
}
FailureOr<States> MulMatIdOp::requirements(ArrayRef<StateAttr> r, ArrayRef<StateAttr> ops) {
  if (r.size() != 1 || !r[0])
    return failure();
  StateAttr res = r[0], m = mirrored(*this);
  int64_t k = getX().getType().getRank() - 1;
  if (isTrivial(res))
    return States{res, res, res};
  if (isSplitOn(res, 2))
    return States{m, onAxis(res, 1), m};
  if (res.isRouted()) {
    // The experts' weights split by whole experts; a shared x is whole, a per-slot x routed alike (or
    // whole, when it already is: a device reads only the rows of its experts).
    StateAttr w = StateAttr::getSplit(getContext(), 0, res.getSizes());
    bool perSlot = getX().getType().getRank() == 3 && !(!ops.empty() && ops[0] && ops[0].isMirrored());
    return States{perSlot ? res : m, w, m};
  }
  StateAttr x = ops.empty() ? StateAttr() : ops[0];
  if (res.isPartial() && isSplitOn(x, k))
    return States{x, onAxis(x, 2), m};
  return failure();
}

FailureOr<States> ExpertCombineOp::transfer(ArrayRef<StateAttr> s) {
  if (s.empty() || !s[0] || llvm::any_of(s.drop_front(), [](StateAttr t) { return !t || !t.isMirrored(); }))
    return failure();
  StateAttr x = s[0];
  if (x.isMirrored() || x.isPartial())
    return States{x};
  if (isSplitOn(x, 2))
    return States{onAxis(x, 1)};
  // Selected slots split over devices, or rows routed to the devices' experts: each device holds the sum
  // over its rows, an addend.
  if (isSplitOn(x, 1) || x.isRouted())
    return States{partial(*this)};
  return failure();
}
FailureOr<States> ExpertCombineOp::requirements(ArrayRef<StateAttr> r, ArrayRef<StateAttr> ops) {
  if (r.size() != 1 || !r[0] || r[0].isLocal() || r[0].isRouted())
    return failure();
  StateAttr res = r[0], x = res;
  if (isSplitOn(res, 1))
    x = onAxis(res, 2);
  else if (res.isPartial() && !ops.empty() && (isSplitOn(ops[0], 1) || isRouted(ops[0])))
    x = ops[0];
  States out{x};
  out.append(getNumOperands() - 1, mirrored(*this));
  return out;
}

FailureOr<States> GetRowsOp::transfer(ArrayRef<StateAttr> s) {
  if (s.size() != 2 || !isTrivial(s[1]))
    return failure();
  StateAttr table = s[0];
  if (!table || sameLayout(table, s[1]))
    return States{s[1]};
  // Columns of a 2-D table split: each device gathers its columns.
  if (getTable().getType().getRank() == 2 && isSplitOn(table, 1))
    return States{onAxis(table, getType().getRank() - 1)};
  // Rows split (a vocabulary-parallel embedding): each device looks up the ids it holds and zeros for the
  // rest, an addend of the full lookup.
  if (getTable().getType().getRank() == 2 && isSplitOn(table, 0))
    return States{partial(*this)};
  return failure();
}
FailureOr<States> GetRowsOp::requirements(ArrayRef<StateAttr> r, ArrayRef<StateAttr> ops) {
  if (r.size() != 1 || !r[0])
    return failure();
  if (r[0].isPartial()) {
    if (getTable().getType().getRank() == 2 && !ops.empty() && isSplitOn(ops[0], 0))
      return States{ops[0], mirrored(*this)};
    return failure();
  }
  if (isTrivial(r[0]))
    return States{r[0], r[0]};
  if (getTable().getType().getRank() == 2 && isSplitOn(r[0], getType().getRank() - 1))
    return States{onAxis(r[0], 1), mirrored(*this)};
  return failure();
}

//===----------------------------------------------------------------------===//
// Reductions and shape ops
//===----------------------------------------------------------------------===//

FailureOr<States> SumOp::transfer(ArrayRef<StateAttr> s) {
  if (s.size() != 1 || !s[0])
    return failure();
  StateAttr x = s[0];
  int64_t axis = getAxis();
  if (x.isRouted())
    return States{partial(*this)}; // rows of several devices meet in one sum (a partial is the safe claim)
  if (!x.isSplit())
    return States{x};
  if (x.getAxis() == axis)
    return States{partial(*this)}; // each device sums its part: an addend
  int64_t out = x.getAxis() > axis && !getKeepDim() ? x.getAxis() - 1 : x.getAxis();
  return States{onAxis(x, out)};
}
FailureOr<States> SumOp::requirements(ArrayRef<StateAttr> r, ArrayRef<StateAttr> ops) {
  if (r.size() != 1 || !r[0])
    return failure();
  StateAttr res = r[0];
  if (res.isRouted())
    return failure();
  if (!res.isSplit()) {
    if (res.isPartial() && !ops.empty() && (isSplitOn(ops[0], getAxis()) || isRouted(ops[0])))
      return States{ops[0]};
    return States{res};
  }
  int64_t in = res.getAxis() >= getAxis() && !getKeepDim() ? res.getAxis() + 1 : res.getAxis();
  if (getKeepDim() && in == getAxis())
    return failure();
  return States{onAxis(res, in)};
}

namespace {
/// How a reshape maps the dims of one shape onto another: groups of consecutive dims with equal products
/// (the dynamic token dim is a group of its own). Maps a split of one side to the other side when the
/// split dim is the first of its group: the rest of the group is the `inner` factor that scales sizes.
StateAttr mapReshape(StateAttr s, ArrayRef<int64_t> from, ArrayRef<int64_t> to) {
  if (!s || !s.isSplit())
    return s;
  size_t i = 0, j = 0;
  while (i < from.size() && j < to.size()) {
    size_t i0 = i, j0 = j;
    if (ShapedType::isDynamic(from[i]) || ShapedType::isDynamic(to[j])) {
      if (!ShapedType::isDynamic(from[i]) || !ShapedType::isDynamic(to[j]))
        return {};
      ++i, ++j;
    } else {
      int64_t pa = from[i++], pb = to[j++];
      while (pa != pb) {
        if (pa < pb && i < from.size() && !ShapedType::isDynamic(from[i]))
          pa *= from[i++];
        else if (pb < pa && j < to.size() && !ShapedType::isDynamic(to[j]))
          pb *= to[j++];
        else
          return {};
      }
      // Trailing size-1 dims belong to this group too.
      while (i < from.size() && from[i] == 1 && (j >= to.size() || to[j] != 1))
        ++i;
      while (j < to.size() && to[j] == 1 && (i >= from.size() || from[i] != 1))
        ++j;
    }
    int64_t a = s.getAxis();
    if (a < static_cast<int64_t>(i0) || a >= static_cast<int64_t>(i))
      continue;
    // The split dim must lead its group on the source side (inner dims whole on every device).
    int64_t innerFrom = 1;
    for (size_t t = a + 1; t < i; ++t)
      innerFrom *= from[t];
    if (static_cast<size_t>(a) != i0) {
      for (size_t t = i0; t < static_cast<size_t>(a); ++t)
        if (from[t] != 1)
          return {};
    }
    // Target: the first non-1 dim of the group.
    size_t b = j0;
    while (b + 1 < j && to[b] == 1)
      ++b;
    int64_t innerTo = 1;
    for (size_t t = b + 1; t < j; ++t)
      innerTo *= to[t];
    if (s.getSegments() != 1 && innerFrom != innerTo) {
      // Segments survive a merge or split of whole elements inside them (value heads [Hv, Dv] <->
      // Hv*Dv channels): every segment's share on each device must stay whole in the new units.
      const int64_t segs = s.getSegments();
      if ((from[a] * innerFrom / innerTo) % segs || (from[a] / segs * innerFrom) % innerTo)
        return {};
      for (int64_t x : s.getSizes())
        if ((x / segs * innerFrom) % innerTo)
          return {};
    }
    return rescaled(s, static_cast<int64_t>(b), innerFrom, innerTo, s.getSegments());
  }
  return {};
}
} // namespace

FailureOr<States> ReshapeOp::transfer(ArrayRef<StateAttr> s) {
  if (s.size() != 1 || !s[0])
    return failure();
  StateAttr out = mapReshape(s[0], getX().getType().getShape(), getType().getShape());
  if (!out)
    return failure();
  return States{out};
}
FailureOr<States> ReshapeOp::requirements(ArrayRef<StateAttr> r, ArrayRef<StateAttr>) {
  if (r.size() != 1 || !r[0])
    return failure();
  StateAttr in = mapReshape(r[0], getType().getShape(), getX().getType().getShape());
  if (!in)
    return failure();
  return States{in};
}

FailureOr<States> PermuteOp::transfer(ArrayRef<StateAttr> s) {
  if (s.size() != 1 || !s[0])
    return failure();
  if (!s[0].isSplit())
    return States{s[0]};
  auto perm = getPerm();
  for (auto [b, a] : llvm::enumerate(perm))
    if (a == s[0].getAxis())
      return States{onAxis(s[0], b)};
  return failure();
}
FailureOr<States> PermuteOp::requirements(ArrayRef<StateAttr> r, ArrayRef<StateAttr>) {
  if (r.size() != 1 || !r[0])
    return failure();
  if (!r[0].isSplit())
    return States{r[0]};
  return States{onAxis(r[0], getPerm()[r[0].getAxis()])};
}

// A view of whole segments of a segmented split keeps each device's part of those segments (q, k and v
// out of a fused projection whose every segment is split by heads); any other view needs its axis whole.
FailureOr<States> ViewOp::transfer(ArrayRef<StateAttr> s) {
  if (s.size() != 1 || !s[0])
    return failure();
  if (!isSplitOn(s[0], getAxis()))
    return States{s[0]};
  const int64_t dim = getX().getType().getDimSize(getAxis()), segs = s[0].getSegments();
  const int64_t segLen = dim / segs, off = getOffset(), size = getSize();
  if (segs == 1 || off % segLen || size % segLen)
    return failure();
  const int64_t m = size / segLen;
  SmallVector<int64_t> sizes;
  for (int64_t x : s[0].getSizes())
    sizes.push_back(x / segs * m);
  return States{StateAttr::getSplit(getContext(), getAxis(), sizes, s[0].getGranule(), m)};
}
FailureOr<States> ViewOp::requirements(ArrayRef<StateAttr> r, ArrayRef<StateAttr>) {
  if (r.size() != 1 || !r[0])
    return failure();
  if (!isSplitOn(r[0], getAxis()))
    return States{r[0]};
  const int64_t dim = getX().getType().getDimSize(getAxis()), m = r[0].getSegments();
  const int64_t off = getOffset(), size = getSize();
  if (size % m || dim % (size / m) || off % (size / m))
    return failure();
  const int64_t segs = dim / (size / m);
  if (segs == 1)
    return failure(); // the view is the whole axis: no view at all
  SmallVector<int64_t> sizes;
  for (int64_t x : r[0].getSizes())
    sizes.push_back(x / m * segs);
  return States{StateAttr::getSplit(getContext(), getAxis(), sizes, r[0].getGranule(), segs)};
}

FailureOr<States> ConcatOp::transfer(ArrayRef<StateAttr> s) {
  if (s.empty() || !s[0] || isSplitOn(s[0], getAxis()) || llvm::any_of(s, [&](StateAttr t) { return !sameLayout(t, s[0]); }))
    return failure();
  return States{s[0]};
}
FailureOr<States> ConcatOp::requirements(ArrayRef<StateAttr> r, ArrayRef<StateAttr>) {
  if (r.size() != 1 || !r[0] || isSplitOn(r[0], getAxis()))
    return failure();
  return States(getNumOperands(), r[0]);
}

//===----------------------------------------------------------------------===//
// Attention
//===----------------------------------------------------------------------===//

FailureOr<States> AttentionOp::transfer(ArrayRef<StateAttr> s) {
  if (s.size() < 5 || !s[0] || !s[1] || !s[2] || !isTrivial(s[4]))
    return failure();
  StateAttr q = s[0], k = s[1], v = s[2], cache = s[3];
  // The output gate has the result's layout, which is q's.
  if (getGate() && (s.size() <= gateIndex() || !s[gateIndex()] || !sameLayout(s[gateIndex()], q)))
    return failure();
  if (isTrivial(q) && sameLayout(k, q) && sameLayout(v, q) && (!cache || sameLayout(cache, q)))
    return States{q};
  if (!isSplitOn(q, 1) || !sameLayout(k, v) || (cache && !sameLayout(cache, k.isSplit() ? onAxis(k, 0) : k)))
    return failure();
  if (getSinks() && s.size() > 5 && s[5] && !sameLayout(s[5], onAxis(q, 0)))
    return failure(); // per-head sinks follow the Q heads
  int64_t hq = getQ().getType().getDimSize(1), hkv = getK().getType().getDimSize(1);
  if (k.isMirrored()) {
    // K/V whole on every device (MQA, or devices outnumbering the KV heads): each device's Q heads read
    // their own KV heads, the first head's global index coming from the split (the plan emitter's).
    return States{q};
  }
  if (!isSplitOn(k, 1) || hq % hkv)
    return failure();
  int64_t group = hq / hkv;
  for (auto [a, b] : llvm::zip(q.getSizes(), k.getSizes()))
    if (a != b * group)
      return failure();
  return States{q};
}
FailureOr<States> AttentionOp::requirements(ArrayRef<StateAttr> r, ArrayRef<StateAttr> ops) {
  if (r.size() != 1 || !r[0] || r[0].isPartial())
    return failure();
  StateAttr res = r[0], m = mirrored(*this);
  auto withSinks = [&](States st) {
    if (getSinks())
      st.push_back(res.isSplit() ? onAxis(res, 0) : res);
    if (getGate())
      st.push_back(res);
    return st;
  };
  if (isTrivial(res))
    return withSinks(States{res, res, res, res, res});
  if (!isSplitOn(res, 1))
    return failure();
  int64_t hq = getQ().getType().getDimSize(1), hkv = getK().getType().getDimSize(1);
  // K/V mirrored: MQA, or K already whole (the devices outnumber the KV heads: assign-split-axes' choice).
  bool known = ops.size() >= 2 && ops[1];
  bool mqa = known ? ops[1].isMirrored() : hkv == 1;
  if (mqa)
    return withSinks(States{res, m, m, m, m});
  if (hq % hkv)
    return failure();
  StateAttr kv = rescaled(res, 1, 1, hq / hkv, 1);
  if (!kv)
    return failure();
  return withSinks(States{res, kv, kv, onAxis(kv, 0), m});
}

//===----------------------------------------------------------------------===//
// Linear attention (Gated DeltaNet). The unit of a split is a key head with the value heads tiled onto
// it: a device holding key heads [a, b) holds value heads {j Hk + g : g in [a, b), j < r}, r = Hv / Hk,
// i.e. its part of each of r segments of Hk value heads; the conv channels [q | k | v] are 2 + r
// segments of Hk heads each (equal segments need Dk == Dv; otherwise the layer stays whole).
//===----------------------------------------------------------------------===//

namespace {
/// A split on `axis` with `sizes` in `segments` segments (granule 1: the rules carry no block sizes).
StateAttr splitState(MLIRContext *ctx, int64_t axis, ArrayRef<int64_t> sizes, int64_t segments = 1) {
  return StateAttr::getSplit(ctx, axis, sizes, 1, segments);
}
/// Key heads per device of a split whose every size is `perHead` elements per key head, or empty.
SmallVector<int64_t> keyHeads(StateAttr s, int64_t perHead) {
  SmallVector<int64_t> out;
  for (int64_t x : s.getSizes()) {
    if (perHead <= 0 || x % perHead)
      return {};
    out.push_back(x / perHead);
  }
  return out;
}
/// `heads` scaled by `f`.
SmallVector<int64_t> times(ArrayRef<int64_t> heads, int64_t f) {
  SmallVector<int64_t> out;
  for (int64_t h : heads)
    out.push_back(h * f);
  return out;
}
/// The key-head split of the conv channels of `t` that `s` (a split of them) is, or empty.
SmallVector<int64_t> convKeyHeads(RecurrentStateType t, StateAttr s) {
  const int64_t hk = t.getNKeyHeads(), r = t.getNValueHeads() / hk;
  if (!isSplitOn(s, 1) || t.getHeadDimK() != t.getHeadDimV() || s.getSegments() != 2 + r)
    return {};
  return keyHeads(s, (2 + r) * t.getHeadDimK());
}
} // namespace

FailureOr<States> RecurrentStateOp::transfer(ArrayRef<StateAttr>) { return States{mirrored(*this)}; }
FailureOr<States> RecurrentStateOp::requirements(ArrayRef<StateAttr> r, ArrayRef<StateAttr>) {
  if (r.size() != 1 || !r[0] || isAddend(r[0]) || (r[0].isSplit() && r[0].getAxis() != 0))
    return failure();
  return States{};
}

FailureOr<States> SsmConvOp::transfer(ArrayRef<StateAttr> s) {
  if (s.size() != 4 || !s[0] || !isTrivial(s[3]))
    return failure();
  StateAttr x = s[0], w = s[1], st = s[2];
  if (isTrivial(x) && (!w || sameLayout(w, x)) && (!st || sameLayout(st, x)))
    return States{x};
  SmallVector<int64_t> kh = convKeyHeads(getState().getType(), x);
  if (kh.empty() || (w && !sameLayout(w, onAxis(x, 0))) ||
      (st && !sameLayout(st, splitState(getContext(), 0, kh))))
    return failure();
  return States{x};
}
FailureOr<States> SsmConvOp::requirements(ArrayRef<StateAttr> r, ArrayRef<StateAttr>) {
  if (r.size() != 1 || !r[0] || isAddend(r[0]))
    return failure();
  StateAttr m = mirrored(*this);
  if (isTrivial(r[0]))
    return States{r[0], r[0], r[0], m};
  SmallVector<int64_t> kh = convKeyHeads(getState().getType(), r[0]);
  if (kh.empty())
    return failure();
  return States{r[0], onAxis(r[0], 0), splitState(getContext(), 0, kh), m};
}

FailureOr<States> DeltaNetOp::transfer(ArrayRef<StateAttr> s) {
  if (s.size() != 7 || !s[0] || !s[1] || !s[2] || !s[3] || !s[4] || !isTrivial(s[6]))
    return failure();
  StateAttr q = s[0], st = s[5];
  if (isTrivial(q)) {
    for (int i = 1; i < 5; ++i)
      if (!sameLayout(s[i], q))
        return failure();
    if (st && !sameLayout(st, q))
      return failure();
    return States{q};
  }
  RecurrentStateType t = getState().getType();
  const int64_t r = t.getNValueHeads() / t.getNKeyHeads();
  if (!isSplitOn(q, 1) || q.getSegments() != 1 || !sameLayout(s[1], q))
    return failure();
  StateAttr heads = splitState(getContext(), 1, times(q.getSizes(), r), r);
  for (int i = 2; i < 5; ++i)
    if (!sameLayout(s[i], heads))
      return failure();
  if (st && !sameLayout(st, onAxis(q, 0)))
    return failure();
  return States{heads};
}
FailureOr<States> DeltaNetOp::requirements(ArrayRef<StateAttr> r, ArrayRef<StateAttr>) {
  if (r.size() != 1 || !r[0] || isAddend(r[0]))
    return failure();
  StateAttr res = r[0], m = mirrored(*this);
  if (isTrivial(res))
    return States{res, res, res, res, res, res, m};
  RecurrentStateType t = getState().getType();
  const int64_t rr = t.getNValueHeads() / t.getNKeyHeads();
  if (!isSplitOn(res, 1) || res.getSegments() != rr)
    return failure();
  SmallVector<int64_t> kh = keyHeads(res, rr);
  if (kh.empty())
    return failure();
  StateAttr qk = splitState(getContext(), 1, kh);
  return States{qk, qk, res, res, res, splitState(getContext(), 0, kh), m};
}

FailureOr<States> L2NormOp::transfer(ArrayRef<StateAttr> s) { return rowwise(*this, s, getType().getRank() - 1); }
FailureOr<States> L2NormOp::requirements(ArrayRef<StateAttr> r, ArrayRef<StateAttr>) {
  return rowwise(*this, r, getType().getRank() - 1);
}
// Row-wise in x and z (same layout), with the weight over the last axis mirrored.
FailureOr<States> GatedRmsNormOp::transfer(ArrayRef<StateAttr> s) {
  if (s.size() != 3 || !s[1] || !s[1].isMirrored() || !s[2] || !sameLayout(s[0], s[2]))
    return failure();
  return rowwise(*this, s.take_front(), getType().getRank() - 1);
}
FailureOr<States> GatedRmsNormOp::requirements(ArrayRef<StateAttr> r, ArrayRef<StateAttr>) {
  FailureOr<States> x = rowwise(*this, r, getType().getRank() - 1);
  if (failed(x))
    return failure();
  return States{x->front(), mirrored(*this), x->front()};
}

//===----------------------------------------------------------------------===//
// Communication and placement: what each collective converts.
//===----------------------------------------------------------------------===//

FailureOr<States> AllReduceOp::transfer(ArrayRef<StateAttr> s) {
  if (s.size() != getNumOperands() || llvm::any_of(s, [](StateAttr t) { return !isAddend(t); }))
    return failure();
  return States(getNumResults(), mirrored(*this));
}
FailureOr<States> AllReduceOp::requirements(ArrayRef<StateAttr> r, ArrayRef<StateAttr> ops) {
  if (r.size() != getNumResults() || llvm::any_of(r, [](StateAttr t) { return !t || !t.isMirrored(); }))
    return failure();
  States out(getNumOperands(), partial(*this));
  for (auto [i, o] : llvm::enumerate(ops))
    if (i < out.size() && isRouted(o))
      out[i] = o; // a routed addend is summed the same way
  return out;
}

// The fused layer boundary converts like an all-reduce; the residual and the norm weight are mirrored.
FailureOr<States> AllReduceRmsNormOp::transfer(ArrayRef<StateAttr> s) {
  if (s.size() != getNumOperands() || !s[0] || !s[0].isPartial() ||
      llvm::any_of(s.drop_front(), [](StateAttr t) { return !t || !t.isMirrored(); }))
    return failure();
  return States(2, mirrored(*this));
}
FailureOr<States> AllReduceRmsNormOp::requirements(ArrayRef<StateAttr> r, ArrayRef<StateAttr>) {
  if (r.size() != 2 || llvm::any_of(r, [](StateAttr t) { return !t || !t.isMirrored(); }))
    return failure();
  States need(getNumOperands(), mirrored(*this));
  need[0] = partial(*this);
  return need;
}

// The split sizes of a reduce-scatter, gather or slice are the result's (or operand's) own: the forward
// rules that would need to invent sizes fail, and the passes create these ops with explicit states.
FailureOr<States> ReduceScatterOp::transfer(ArrayRef<StateAttr>) { return failure(); }
FailureOr<States> ReduceScatterOp::requirements(ArrayRef<StateAttr> r, ArrayRef<StateAttr> ops) {
  if (r.size() != 1 || !isSplitOn(r[0], getAxis()))
    return failure();
  return States{!ops.empty() && isRouted(ops[0]) ? ops[0] : partial(*this)};
}
FailureOr<States> AllGatherOp::transfer(ArrayRef<StateAttr> s) {
  if (s.size() != 1 || !isSplitOn(s[0], getAxis()))
    return failure();
  return States{mirrored(*this)};
}
FailureOr<States> AllGatherOp::requirements(ArrayRef<StateAttr> r, ArrayRef<StateAttr> ops) {
  if (r.size() != 1 || !r[0] || !r[0].isMirrored() || ops.empty() || !isSplitOn(ops[0], getAxis()))
    return failure();
  return States{ops[0]};
}
FailureOr<States> SliceOp::transfer(ArrayRef<StateAttr>) { return failure(); }
FailureOr<States> SliceOp::requirements(ArrayRef<StateAttr> r, ArrayRef<StateAttr>) {
  if (r.size() != 1 || !isSplitOn(r[0], getAxis()))
    return failure();
  return States{mirrored(*this)};
}
FailureOr<States> BackendCopyOp::transfer(ArrayRef<StateAttr> s) { return identity(s); }
FailureOr<States> BackendCopyOp::requirements(ArrayRef<StateAttr> r, ArrayRef<StateAttr>) { return identity(r); }
// A stage transfer moves each device's whole part to its peer of the other stage: mirrored or split in,
// the same out. A partial value has no rule, so the collectives pass reduces it before the boundary.
FailureOr<States> StageTransferOp::transfer(ArrayRef<StateAttr> s) {
  if (s.size() != 1 || !s[0] || s[0].isPartial() || s[0].isRouted())
    return failure();
  return identity(s);
}
FailureOr<States> StageTransferOp::requirements(ArrayRef<StateAttr> r, ArrayRef<StateAttr>) {
  if (r.size() != 1 || !r[0] || r[0].isPartial() || r[0].isRouted())
    return failure();
  return identity(r);
}
