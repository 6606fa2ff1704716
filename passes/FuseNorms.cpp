//===- FuseNorms.cpp - tpc-fuse-norms -----------------------------------------===//
//
// Two peepholes that turn several ops into one plan step (one kernel less per norm on every backend):
//  - rms_norm(x) whose only use is mul(., w), w a mirrored f32 norm weight of x's last dimension:
//    tpc.weighted_rms_norm(x, w) at the norm's place, taking over the mul's result;
//  - a layer boundary [add{tpc.on_device = 0}(p, r) ->] all_reduce -> rms_norm [-> mul by w]:
//    tpc.all_reduce_rms_norm(p [residual r] [weight w]) at the all-reduce's place, whose results take
//    over the all-reduce's and the norm's (or the mul's).
// It runs after tpc-plan-memory and keeps the offsets planned for the separate ops, which stay valid
// because: the norm (and mul) must follow the all-reduce directly (weights aside: they have no step),
// so no other buffer is live in between; the add folds in only when it directly precedes the all-reduce
// and the residual's bytes are the sum's own or overlap them on no device (the fused op is a collective,
// so whether the residual folds in must be the same on every device); and a plain weighted norm writes
// the mul's slot early, which is safe because it must be the norm's own (the mul wrote in place).
// Decisions are collected over the unchanged module first, then applied.
//
// Assumes a module after tpc-plan-memory (states, local shapes, offsets and tpc.max_batch present);
// without offsets no residual folds in.
//===----------------------------------------------------------------------===//
#include "passes/DecisionLog.h"
#include "passes/LocalShapes.h"
#include "passes/Passes.h"

#include "mlir/IR/Builders.h"

#define DEBUG_TYPE "tpc-fuse-norms"

namespace mlir::tpc {
#define GEN_PASS_DEF_TPCFUSENORMS
#include "passes/Passes.h.inc"

namespace {

/// One layer boundary to fuse: the all-reduce, the folded residual add (or null), the norm and its
/// weight mul (or null).
struct Boundary {
  AllReduceOp ar;
  AddOp add;
  RmsNormOp norm;
  MulOp mul;
};

/// The next op after `op` that is a plan step (weights are not), or null.
Operation *nextStep(Operation *op) {
  for (Operation *n = op->getNextNode(); n; n = n->getNextNode())
    if (!isa<WeightOp>(n))
      return n;
  return nullptr;
}

/// Entry `i` of a per-result array attribute `name` of `op`, or null.
Attribute resultEntry(Operation *op, StringRef name, unsigned i) {
  auto a = op->getAttrOfType<ArrayAttr>(name);
  return a && i < a.size() ? a[i] : Attribute();
}

/// Makes `w` (which has no operands) dominate `before`.
void hoistWeight(Value w, Operation *before) {
  Operation *def = w.getDefiningOp();
  if (def && def->getBlock() == before->getBlock() && before->isBeforeInBlock(def))
    def->moveBefore(before);
}

struct FuseNormsPass : impl::TpcFuseNormsBase<FuseNormsPass> {
  using TpcFuseNormsBase::TpcFuseNormsBase;

  void runOnOperation() override {
    ModuleOp m = getOperation();
    auto fn = m.lookupSymbol<func::FuncOp>("forward");
    if (!fn || !fn.getBody().hasOneBlock())
      return; // nothing the plan would emit
    SmallVector<Boundary> boundaries;
    llvm::DenseSet<Operation *> taken;
    for (Operation &op : fn.getBody().front())
      if (auto ar = dyn_cast<AllReduceOp>(op))
        if (std::optional<Boundary> b = boundary(ar)) {
          boundaries.push_back(*b);
          taken.insert(b->norm);
        }
    SmallVector<std::pair<RmsNormOp, MulOp>> norms;
    fn.walk([&](RmsNormOp norm) {
      if (!taken.contains(norm))
        if (MulOp mul = weightMul(norm))
          norms.push_back({norm, mul});
    });
    for (Boundary b : boundaries)
      fuseBoundary(b);
    for (auto [norm, mul] : norms)
      fuseNorm(norm, mul);
  }

  /// The mul by a norm weight that is the only use of `norm`, when the pair can be one step; else null
  /// (with the reason logged).
  MulOp weightMul(RmsNormOp norm) {
    if (!norm->hasOneUse())
      return {};
    auto mul = dyn_cast<MulOp>(*norm->user_begin());
    if (!mul || mul.getLhs() != norm.getResult())
      return {};
    auto w = mul.getRhs().getDefiningOp<WeightOp>();
    auto decline = [&](const char *why) {
      TPC_DECISION(remarks, norm, "rms_norm + mul stay two steps: " << why);
      return MulOp();
    };
    if (!w || w.getGgmlType() != "f32" || w.getType().getRank() != 1)
      return decline("the multiplier is not an f32 vector weight");
    if (onDevice(norm) >= 0 || onDevice(mul) >= 0 || mul->getBlock() != norm->getBlock())
      return decline("one of them is pinned to a device");
    if (resultOnHost(norm, 0) != resultOnHost(mul, 0))
      return decline("they are placed on different sides");
    if (StateAttr ws = getValueState(w.getResult()); ws && !ws.isMirrored())
      return decline("the weight is not mirrored");
    if (!sameLayout(getValueState(norm.getResult()), getValueState(mul.getResult())))
      return decline("the norm and the product have different states");
    if (resultEntry(norm, "tpc.offsets", 0) != resultEntry(mul, "tpc.offsets", 0))
      return decline("the product does not reuse the norm's bytes");
    for (int64_t d = 0, n = numDevices(getOperation()); d < n; ++d) {
      SmallVector<int64_t> xs = localShape(norm.getX(), d);
      if (xs.empty() || xs.back() != w.getType().getDimSize(0))
        return decline("the rows are split");
    }
    return mul;
  }

  /// [begin, end) bytes of `v` in its arena on `device` (following aliases), or nullopt when `v` is not an
  /// arena value.
  std::optional<std::pair<int64_t, int64_t>> arenaRange(Value v, int64_t device) {
    for (int guard = 0; guard < 64; ++guard) {
      Operation *op = v.getDefiningOp();
      if (!op)
        return std::nullopt;
      Storage st = valueStorage(v, device);
      if (st == Storage::Alias) {
        v = op->getOperand(0);
        continue;
      }
      auto per = dyn_cast_or_null<DenseI64ArrayAttr>(
          resultEntry(op, "tpc.offsets", cast<OpResult>(v).getResultNumber()));
      if (st != Storage::Buffer || !per || int64_t(per.size()) <= device || per[device] < 0)
        return std::nullopt;
      auto maxBatch = getOperation()->getAttrOfType<IntegerAttr>("tpc.max_batch");
      int64_t bytes = localBytes(localShape(v, device), maxBatch ? maxBatch.getInt() : 1);
      return std::make_pair(per[device], per[device] + bytes);
    }
    return std::nullopt;
  }

  /// True when the residual `r` may be added into the collective writing `sum`: on every device its bytes
  /// are the sum's own or do not overlap them.
  bool residualFolds(Value r, Value sum) {
    for (int64_t d = 0, n = numDevices(getOperation()); d < n; ++d) {
      auto ra = arenaRange(r, d), sa = arenaRange(sum, d);
      if (!ra || !sa || !(ra->second <= sa->first || sa->second <= ra->first || *ra == *sa)) {
        TPC_DECISION(remarks, sum.getDefiningOp(),
                     "the residual add stays a step: its bytes overlap the sum's on device " << d);
        return false;
      }
    }
    return true;
  }

  /// The layer boundary starting at `ar`, when it has one.
  std::optional<Boundary> boundary(AllReduceOp ar) {
    if (ar.getNumOperands() != 1)
      return std::nullopt;
    auto norm = dyn_cast_or_null<RmsNormOp>(nextStep(ar));
    if (!norm || norm.getX() != ar.getResult(0) || resultOnHost(norm, 0) || onDevice(norm) >= 0)
      return std::nullopt;
    Boundary b{ar, {}, norm, weightMul(norm)};
    if (b.mul && nextStep(norm) != b.mul.getOperation())
      b.mul = {};
    Value x = ar.getInputs()[0];
    if (auto add = x.getDefiningOp<AddOp>(); add && x.hasOneUse() && onDevice(add) == 0 &&
                                             nextStep(add) == ar.getOperation() && !resultOnHost(add, 0) &&
                                             add.getLhs().getType() == add.getRhs().getType() &&
                                             residualFolds(add.getRhs(), ar.getResult(0)))
      b.add = add;
    return b;
  }

  void fuseBoundary(Boundary b) {
    Value x = b.add ? b.add.getLhs() : b.ar.getInputs()[0];
    Value residual = b.add ? b.add.getRhs() : Value();
    Value weight = b.mul ? b.mul.getRhs() : Value();
    Operation *normOut = b.mul ? b.mul.getOperation() : b.norm.getOperation();
    if (weight)
      hoistWeight(weight, b.ar);
    OpBuilder builder(b.ar);
    Type t = x.getType();
    auto fused = builder.create<AllReduceRmsNormOp>(b.ar.getLoc(), t, t, x, residual, weight, b.norm.getEpsAttr());
    // Per-result annotations: the all-reduce's for the sum, the norm's (or mul's) for the result.
    for (StringRef name : {StringRef(TpcDialect::kStateAttrName), StringRef(TpcDialect::kLocalShapesAttrName),
                           StringRef("tpc.offsets")})
      if (Attribute s = resultEntry(b.ar, name, 0), n = resultEntry(normOut, name, 0); s && n)
        fused->setAttr(name, builder.getArrayAttr({s, n}));
    if (Attribute p = b.ar->getAttr(TpcDialect::kPlacementAttrName))
      fused->setAttr(TpcDialect::kPlacementAttrName, p);
    b.ar.getResult(0).replaceAllUsesWith(fused.getSum());
    normOut->getResult(0).replaceAllUsesWith(fused.getResult());
    TPC_DECISION(remarks, fused, "layer boundary fused: " << (b.add ? "residual add + " : "") << "all_reduce + rms_norm"
                                                           << (b.mul ? " + weight mul" : ""));
    for (Operation *op : {b.mul.getOperation(), b.norm.getOperation(), b.ar.getOperation(), b.add.getOperation()})
      if (op)
        op->erase();
  }

  void fuseNorm(RmsNormOp norm, MulOp mul) {
    hoistWeight(mul.getRhs(), norm);
    OpBuilder builder(norm);
    auto fused = builder.create<WeightedRmsNormOp>(norm.getLoc(), mul.getType(), norm.getX(), mul.getRhs(),
                                                   norm.getEpsAttr());
    fused->setDiscardableAttrs(mul->getDiscardableAttrDictionary()); // state, shapes, offsets, placement
    mul.getResult().replaceAllUsesWith(fused.getResult());
    TPC_DECISION(remarks, fused, "rms_norm + mul by its weight fused");
    mul.erase();
    norm.erase();
  }
};

} // namespace
} // namespace mlir::tpc
