//===- InsertCollectives.cpp - tpc-insert-collectives ------------------------===//
//
// Three steps over the forward function, each a fixed point:
//
//  1. Convert. For every op, `requirements(its result states, its operand states)` says what it needs;
//     where an operand's state differs, insert the conversion right after the producer (shared by every
//     consumer needing the same state): partial (or routed) -> mirrored all_reduce, -> split reduce_scatter,
//     split -> mirrored all_gather, mirrored -> split slice (no traffic), split -> other split via a
//     gather and a slice. The function's results must be mirrored.
//  2. Sink. An all-reduce whose only consumer is linear in it (with mirrored other operands) moves after
//     that consumer: scale, reshape, permute, sum, mul/div by a mirrored value, expert_combine, a matmul
//     that does not grow the tensor, AR(a) + AR(b) -> AR(a + b), and the residual add AR(x) + r ->
//     AR(x + r on device 0 only), which also places a bias (a mirrored addend: attn_output's, and
//     tpc.add_id's per-expert down bias) on device 0 before the reduce, so it is added once. The reduce
//     then happens once, at the smallest and latest point.
//  3. Bucket. Two all-reduces where the first's consumers all come after the second become one
//     collective at the second's place (gemma4's dense and MoE branches).
//===----------------------------------------------------------------------===//
#include "passes/DecisionLog.h"
#include "passes/Passes.h"
#include "passes/StateUtils.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"

#include <map>

#define DEBUG_TYPE "tpc-insert-collectives"

namespace mlir::tpc {
#define GEN_PASS_DEF_TPCINSERTCOLLECTIVES
#include "passes/Passes.h.inc"

namespace {

class Inserter {
public:
  Inserter(func::FuncOp fn, bool remarks) : fn_(fn), ctx_(fn.getContext()), remarks_(remarks) {}

  LogicalResult convert() {
    SmallVector<Operation *> ops;
    fn_.getBody().walk([&](Operation *op) { ops.push_back(op); });
    StateAttr m = StateAttr::getMirrored(ctx_);
    for (Operation *op : ops) {
      if (auto ret = dyn_cast<func::ReturnOp>(op)) {
        for (OpOperand &o : ret->getOpOperands())
          if (failed(make(o, m)))
            return failure();
        continue;
      }
      auto iface = dyn_cast<SplitStateInterface>(op);
      if (!iface || isa<AllReduceOp, AllGatherOp, ReduceScatterOp, SliceOp>(op))
        continue;
      SmallVector<StateAttr> have = operandStates(op);
      FailureOr<SmallVector<StateAttr>> need = iface.requirements(resultStates(op), have);
      if (failed(need))
        return op->emitOpError() << "tpc-insert-collectives: no operand states produce the assigned result "
                                    "states (run tpc-assign-split-axes first)";
      for (auto [o, n] : llvm::zip(op->getOpOperands(), *need))
        if (failed(make(o, n)))
          return failure();
    }
    return success();
  }

  /// Sinks every all-reduce as far as its consumers allow. Returns how many moves were made.
  /// The residual rule waits until nothing else moves: an all-reduce that has not yet sunk to an add (a
  /// shared expert's, behind its per-token gate) would otherwise look like a mirrored residual there, and
  /// two reductions would stay where AR(a) + AR(b) -> AR(a + b) makes one.
  int sink() {
    int moves = 0;
    for (bool residual : {false, true}) {
      allowResidual_ = residual;
      for (bool changed = true; changed;) {
        changed = false;
        SmallVector<AllReduceOp> ars;
        fn_.walk([&](AllReduceOp ar) { ars.push_back(ar); });
        for (AllReduceOp ar : ars)
          if (sinkOne(ar)) {
            changed = true;
            ++moves;
            break;
          }
      }
    }
    return moves;
  }
  bool allowResidual_ = true;

  /// Merges all-reduces that can wait for each other.
  void bucket() {
    for (bool changed = true; changed;) {
      changed = false;
      SmallVector<AllReduceOp> ars;
      fn_.walk([&](AllReduceOp ar) { ars.push_back(ar); });
      for (size_t i = 0; i + 1 < ars.size() && !changed; ++i) {
        AllReduceOp a = ars[i], b = ars[i + 1];
        if (a->getBlock() != b->getBlock())
          continue;
        bool waits = llvm::all_of(a->getUsers(), [&](Operation *u) {
          return u->getBlock() == b->getBlock() && b->isBeforeInBlock(u);
        });
        if (!waits)
          continue;
        SmallVector<Value> inputs(a.getInputs());
        inputs.append(b.getInputs().begin(), b.getInputs().end());
        OpBuilder builder(b);
        auto merged = builder.create<AllReduceOp>(b.getLoc(), inputs);
        setStates(merged, SmallVector<StateAttr>(inputs.size(), StateAttr::getMirrored(ctx_)));
        for (auto [i, r] : llvm::enumerate(a.getResults()))
          r.replaceAllUsesWith(merged.getResult(i));
        for (auto [i, r] : llvm::enumerate(b.getResults()))
          r.replaceAllUsesWith(merged.getResult(a.getNumResults() + i));
        TPC_DECISION(remarks_, merged,
                     "bucketed two all-reduces that can wait for each other: " << inputs.size()
                                                                                 << " tensors in one collective");
        a.erase();
        b.erase();
        changed = true;
      }
    }
  }

private:
  /// Makes operand `o` have state `need`, through a (shared) conversion of its value.
  LogicalResult make(OpOperand &o, StateAttr need) {
    Value v = o.get();
    StateAttr have = stateOrMirrored(v);
    if (!need || satisfies(have, need) || have.isLocal() || need.isLocal())
      return success();
    auto key = std::make_pair(v.getAsOpaquePointer(), need.getAsOpaquePointer());
    if (auto it = cache_.find(key); it != cache_.end()) {
      o.set(it->second);
      return success();
    }
    OpBuilder b(ctx_);
    if (Operation *def = v.getDefiningOp())
      b.setInsertionPointAfter(def);
    else
      b.setInsertionPointToStart(&fn_.getBody().front());
    Location loc = v.getLoc();
    Value out;
    StateAttr m = StateAttr::getMirrored(ctx_);
    auto emitted = [&](Operation *op, StateAttr s) {
      setStates(op, {s});
      return op->getResult(0);
    };
    // A routed value is summed like a partial one (its addends do not overlap).
    bool addend = have.isPartial() || have.isRouted();
    if (addend && need.isMirrored()) {
      out = emitted(b.create<AllReduceOp>(loc, ValueRange{v}), m);
    } else if (addend && need.isSplit()) {
      out = emitted(b.create<ReduceScatterOp>(loc, v.getType(), v, b.getI64IntegerAttr(need.getAxis())), need);
    } else if (have.isSplit() && need.isMirrored()) {
      out = emitted(b.create<AllGatherOp>(loc, v.getType(), v, b.getI64IntegerAttr(have.getAxis())), m);
    } else if (have.isMirrored() && need.isSplit()) {
      out = emitted(b.create<SliceOp>(loc, v.getType(), v, b.getI64IntegerAttr(need.getAxis())), need);
    } else if (have.isSplit() && need.isSplit()) {
      Value whole = emitted(b.create<AllGatherOp>(loc, v.getType(), v, b.getI64IntegerAttr(have.getAxis())), m);
      out = emitted(b.create<SliceOp>(loc, v.getType(), whole, b.getI64IntegerAttr(need.getAxis())), need);
    } else {
      return o.getOwner()->emitOpError() << "tpc-insert-collectives: cannot turn " << have << " into " << need
                                         << " for operand " << o.getOperandNumber();
    }
    cache_[key] = out;
    o.set(out);
    TPC_DECISION(remarks_, o.getOwner(),
                 "operand " << o.getOperandNumber() << " is " << have << ", needs " << need << ": "
                            << "inserted " << out.getDefiningOp()->getName().getStringRef());
    return success();
  }

  /// Moves `ar` after its only consumer when that consumer is linear in it. True if it moved.
  bool sinkOne(AllReduceOp ar) {
    if (ar.getNumOperands() != 1 || !ar.getResult(0).hasOneUse())
      return false;
    OpOperand &use = *ar.getResult(0).use_begin();
    Operation *u = use.getOwner();
    unsigned idx = use.getOperandNumber();
    Value x = ar.getInputs()[0];
    if (u->getNumResults() != 1 || u->getBlock() != ar->getBlock())
      return false;
    auto mirroredElsewhere = [&] {
      for (auto [i, v] : llvm::enumerate(u->getOperands()))
        if (i != idx && !stateOrMirrored(v).isMirrored())
          return false;
      return true;
    };
    Value result = u->getResult(0);
    AllReduceOp other;
    bool onDevice0 = false;
    if (isa<ScaleOp, ReshapeOp, PermuteOp, SumOp>(u) && idx == 0) {
      // linear in its only tensor operand
    } else if (isa<MulOp, DivOp, ExpertCombineOp>(u) && idx == 0 && mirroredElsewhere()) {
      // scaled by whole factors
    } else if (isa<MulOp>(u) && idx == 1 && mirroredElsewhere() && u->getOperand(0).getType() == x.getType()) {
      // commutative with matching shapes: the partial operand moves first
    } else if (auto mm = dyn_cast<MatmulOp>(u); mm && idx == 0 && mirroredElsewhere() &&
                                                 elementsPerToken(result) <= elementsPerToken(x)) {
      // a projection that does not grow what is reduced
    } else if (isa<AddOp>(u)) {
      Value rest = u->getOperand(1 - idx);
      if (auto o = rest.getDefiningOp<AllReduceOp>();
          o && o.getNumOperands() == 1 && rest.hasOneUse() && o->getBlock() == u->getBlock()) {
        other = o; // AR(a) + AR(b) -> AR(a + b)
      } else if (allowResidual_ && stateOrMirrored(rest).isMirrored() && (idx == 0 || x.getType() == result.getType()) &&
                 !u->hasAttr(TpcDialect::kOnDeviceAttrName)) {
        onDevice0 = true; // residual: added once, on device 0
      } else {
        return false;
      }
    } else if (isa<AddIdOp>(u) && idx == 0 && allowResidual_ && mirroredElsewhere() &&
               !u->hasAttr(TpcDialect::kOnDeviceAttrName)) {
      onDevice0 = true; // a per-expert bias (gpt-oss's down bias): added once, on device 0, like a residual
    } else {
      return false;
    }

    OpBuilder b(u);
    Operation *moved = b.clone(*u);
    moved->setOperand(idx, x);
    if (other)
      moved->setOperand(1 - idx, other.getInputs()[0]);
    if ((isa<MulOp>(u) || onDevice0) && idx == 1) {
      // Put the partial operand first: on_device ops forward operand 0, and mul's partial rule is on lhs.
      Value a = moved->getOperand(0), c = moved->getOperand(1);
      moved->setOperand(0, c);
      moved->setOperand(1, a);
    }
    if (onDevice0)
      moved->setAttr(TpcDialect::kOnDeviceAttrName, b.getI64IntegerAttr(0));
    setStates(moved, {StateAttr::getPartial(ctx_)});
    b.setInsertionPointAfter(moved);
    auto reduced = b.create<AllReduceOp>(ar.getLoc(), ValueRange{moved->getResult(0)});
    setStates(reduced, {StateAttr::getMirrored(ctx_)});
    result.replaceAllUsesWith(reduced.getResult(0));
    TPC_DECISION(remarks_, moved,
                 "all_reduce sunk past " << moved->getName().getStringRef()
                                         << (other ? ", merged with the other operand's all_reduce"
                                                   : onDevice0 ? ", the residual added on device 0 only"
                                                               : ""));
    u->erase();
    ar.erase();
    if (other)
      other.erase();
    return true;
  }

  func::FuncOp fn_;
  MLIRContext *ctx_;
  bool remarks_;
  std::map<std::pair<const void *, const void *>, Value> cache_;
};

struct InsertCollectivesPass : impl::TpcInsertCollectivesBase<InsertCollectivesPass> {
  using TpcInsertCollectivesBase::TpcInsertCollectivesBase;

  void runOnOperation() override {
    for (auto fn : getOperation().getOps<func::FuncOp>()) {
      if (fn.isExternal())
        continue;
      Inserter ins(fn, remarks);
      if (failed(ins.convert()))
        return signalPassFailure();
      ins.sink();
      ins.bucket();
    }
  }
};

} // namespace
} // namespace mlir::tpc
