//===- FuseMoeScaleChain.cpp - tpc-fuse-moe-scale-chain -----------------------===//
//
// Matches, from each expert sum backwards: sum(mul(...mul(mul_mat_id(...), m1)..., mk), axis = 1) (the
// mul_mat_id possibly followed by its tpc.add_id per-expert bias, which stays the combine's input) where
// every multiplier broadcasts a per-(token, expert) factor over the hidden dimension ([T,k,1]) and every
// link has no other consumer. The chain becomes one tpc.expert_combine at the sum's place: every
// multiplier is defined before the sum, so ops computing them between the links in program order (the
// per-expert scale's get_rows and reshape in gemma4) do not stop the match. A multiplier that is a
// reshape of a [T,k] value is used unreshaped.
//===----------------------------------------------------------------------===//
#include "passes/DecisionLog.h"
#include "passes/Passes.h"
#include "passes/StateUtils.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "llvm/ADT/SetVector.h"

#define DEBUG_TYPE "tpc-fuse-moe-scale-chain"

namespace mlir::tpc {
#define GEN_PASS_DEF_TPCFUSEMOESCALECHAIN
#include "passes/Passes.h.inc"

namespace {

/// True for a [T,k,1] (or [T,k]) factor matching x [T,k,N].
bool isPerExpertFactor(Value m, RankedTensorType x) {
  auto t = dyn_cast<RankedTensorType>(m.getType());
  if (!t || t.getRank() != 3 || t.getDimSize(2) != 1)
    return false;
  return t.getDimSize(1) == x.getDimSize(1);
}

/// Fuses the chain ending at `sum`. True if it did.
bool fuse(SumOp sum, bool remarks) {
  auto xt = dyn_cast<RankedTensorType>(sum.getX().getType());
  if (!xt || xt.getRank() != 3 || sum.getAxis() != 1 || sum.getKeepDim())
    return false; // not a sum over selected experts
  SmallVector<Value> factors;
  SmallVector<Operation *> links;
  Value v = sum.getX();
  while (auto mul = v.getDefiningOp<MulOp>()) {
    if (!v.hasOneUse() || mul.getLhs().getType() != xt || !isPerExpertFactor(mul.getRhs(), xt))
      break;
    factors.push_back(mul.getRhs());
    links.push_back(mul);
    v = mul.getLhs();
  }
  // The chain starts at the expert projection, or at its per-expert bias (gpt-oss's down bias, added
  // before the router weighting).
  Value root = v;
  if (auto bias = root.getDefiningOp<AddIdOp>())
    root = bias.getX();
  if (factors.empty() || !root.getDefiningOp<MulMatIdOp>()) {
    TPC_DECISION(remarks, sum,
                 "sum over experts not fused: "
                     << (factors.empty() ? "no per-(token, expert) multiply feeds it only"
                                         : "the multiplies do not start at a mul_mat_id"));
    return false;
  }
  // Program order of the factors as written (innermost multiply first).
  std::reverse(factors.begin(), factors.end());
  llvm::SetVector<Operation *> peeled; // a reshape may feed two links
  for (Value &f : factors)
    if (auto r = f.getDefiningOp<ReshapeOp>(); r && r.getX().getType().getRank() == 2) {
      f = r.getX();
      peeled.insert(r);
    }
  OpBuilder b(sum);
  auto combine = b.create<ExpertCombineOp>(sum.getLoc(), v, factors);
  TPC_DECISION(remarks, combine, "mul_mat_id, " << factors.size() << " multiplies and the sum over experts fused");
  if (Attribute layer = sum->getAttr(TpcDialect::kLayerAttrName))
    combine->setAttr(TpcDialect::kLayerAttrName, layer);
  sum.getResult().replaceAllUsesWith(combine.getResult());
  sum.erase();
  for (Operation *link : links)
    link->erase();
  // The reshapes that only fed a fused multiply are dead now.
  for (Operation *r : peeled)
    if (r->use_empty())
      r->erase();
  return true;
}

struct FuseMoeScaleChainPass : impl::TpcFuseMoeScaleChainBase<FuseMoeScaleChainPass> {
  using TpcFuseMoeScaleChainBase::TpcFuseMoeScaleChainBase;

  void runOnOperation() override {
    SmallVector<SumOp> sums;
    getOperation().walk([&](SumOp s) { sums.push_back(s); });
    for (SumOp s : sums)
      fuse(s, remarks);
  }
};

} // namespace
} // namespace mlir::tpc
