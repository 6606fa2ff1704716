//===- InsertStageTransfers.cpp - tpc-insert-stage-transfers ------------------===//
//
// Pipeline stages: the stage of every op comes from passes/Stages.h (layer stamps, never names); an operand
// computed on another stage than its reader's is routed through one tpc.stage_transfer per (value, from,
// to), placed right after its producer and carrying the producer's split state, so every device of the
// reading stage gets its part from its peer (same device index) of the computing stage. Nothing else in the
// module changes: inside a stage the collectives are the ones tpc-insert-collectives placed.
//===----------------------------------------------------------------------===//
#include "passes/DecisionLog.h"
#include "passes/Passes.h"
#include "passes/Stages.h"
#include "passes/StateUtils.h"

#include "runtime/ggml/GGMLTypes.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"

#include <map>
#include <numeric>

#define DEBUG_TYPE "tpc-insert-stage-transfers"

namespace mlir::tpc {
#define GEN_PASS_DEF_TPCINSERTSTAGETRANSFERS
#include "passes/Passes.h.inc"

namespace {

/// Values that never move between stages: each stage loads its own weights and caches.
bool stays(Value v) {
  return !isa<RankedTensorType>(v.getType()) || !v.getDefiningOp() || isa<WeightOp>(v.getDefiningOp());
}

/// Bytes of weight `w` in the GGUF (its ggml type's blocks).
int64_t weightBytes(WeightOp w) {
  auto t = ::tpc::ggmlTypeFromName(w.getGgmlType().str());
  const ::tpc::GGMLTypeInfo *info = t ? &::tpc::ggmlTypeInfo(*t) : nullptr;
  int64_t elems = 1;
  for (int64_t d : cast<RankedTensorType>(w.getType()).getShape())
    elems *= d;
  return info ? elems / info->blockElems * info->blockBytes : elems * 4;
}

/// Layers per stage: the contiguous cut of `total` layers into `stages` non-empty ranges whose heaviest
/// stage (weight bytes; the output head counts on the last one, the embedding's table is only looked up)
/// is lightest. Binary search on the bound, greedy fill.
std::vector<int64_t> balanceStages(ModuleOp module, int64_t total, int64_t stages) {
  std::vector<int64_t> bytes(size_t(total), 0);
  int64_t head = 0;
  module.walk([&](WeightOp w) {
    Attribute stamp = w->getAttr(TpcDialect::kLayerAttrName);
    if (auto n = dyn_cast_or_null<IntegerAttr>(stamp))
      bytes[size_t(n.getInt())] += weightBytes(w);
    else if (stamp)
      head += weightBytes(w);
  });
  // Greedy: as many layers per stage as fit under `bound`, leaving at least one layer per later stage.
  auto cut = [&](int64_t bound) -> std::vector<int64_t> {
    std::vector<int64_t> out;
    int64_t l = 0;
    for (int64_t s = 0; s < stages; ++s) {
      const int64_t left = stages - s - 1;
      int64_t n = 0, sum = s == stages - 1 ? head : 0;
      while (l + n < total - left && (n == 0 || sum + bytes[size_t(l + n)] <= bound || s == stages - 1)) {
        sum += bytes[size_t(l + n)];
        ++n;
      }
      if (sum > bound)
        return {};
      out.push_back(n);
      l += n;
    }
    return l == total ? out : std::vector<int64_t>{};
  };
  int64_t lo = 0, hi = head;
  for (int64_t b : bytes)
    hi += b;
  std::vector<int64_t> best = cut(hi);
  while (lo < hi) {
    const int64_t mid = lo + (hi - lo) / 2;
    if (std::vector<int64_t> c = cut(mid); !c.empty()) {
      best = std::move(c);
      hi = mid;
    } else {
      lo = mid + 1;
    }
  }
  return best;
}

struct InsertStageTransfersPass : impl::TpcInsertStageTransfersBase<InsertStageTransfersPass> {
  using TpcInsertStageTransfersBase::TpcInsertStageTransfersBase;

  void runOnOperation() override {
    ModuleOp module = getOperation();
    std::vector<int64_t> layers(stageLayers.begin(), stageLayers.end());
    const int64_t total = countLayers(module);
    if (!layers.empty() && stages > 1 && int64_t(layers.size()) != stages) {
      module.emitError() << "tpc-insert-stage-transfers: stage-layers " << listString(layers) << " has "
                         << layers.size() << " entries for " << int64_t(stages) << " stages (one per stage)";
      return signalPassFailure();
    }
    if (layers.empty() && stages > 1) {
      if (stages > total) {
        module.emitError() << "tpc-insert-stage-transfers: " << int64_t(stages)
                           << " stages, but the model has " << total << " layer(s) (at least one per stage)";
        return signalPassFailure();
      }
      layers = balanceStages(module, total, stages);
      TPC_DECISION(remarks, module, "stage layers " << listString(layers) << " (balanced by weight bytes)");
    }
    if (layers.size() < 2)
      return;
    for (int64_t n : layers)
      if (n < 1) {
        module.emitError() << "tpc-insert-stage-transfers: every stage needs at least one layer, got "
                           << listString(layers);
        return signalPassFailure();
      }
    if (std::accumulate(layers.begin(), layers.end(), int64_t(0)) != total) {
      module.emitError() << "tpc-insert-stage-transfers: stage-layers " << listString(layers) << " sum to "
                         << std::accumulate(layers.begin(), layers.end(), int64_t(0)) << ", the model has "
                         << total << " layer(s)";
      return signalPassFailure();
    }
    DenseMap<Operation *, int64_t> stage = assignStages(module, layers);
    std::map<std::tuple<void *, int64_t, int64_t>, Value> made; // (value, from, to) -> transfer
    module.walk([&](Operation *op) {
      if (isa<ModuleOp, func::FuncOp, StageTransferOp>(op))
        return;
      const int64_t to = stage.lookup(op);
      for (OpOperand &o : op->getOpOperands()) {
        Value v = o.get();
        if (stays(v))
          continue;
        const int64_t from = stage.lookup(v.getDefiningOp());
        if (from == to)
          continue;
        Value &t = made[{v.getAsOpaquePointer(), from, to}];
        if (!t) {
          OpBuilder b(v.getContext());
          b.setInsertionPointAfter(v.getDefiningOp());
          auto x = b.create<StageTransferOp>(v.getLoc(), v.getType(), v, b.getI64IntegerAttr(from),
                                             b.getI64IntegerAttr(to));
          if (getValueState(v))
            setStates(x, {getValueState(v)});
          t = x.getResult();
          TPC_DECISION(remarks, x.getOperation(),
                       "stage " << from << " -> " << to << " for " << op->getName() << " operand "
                                << o.getOperandNumber());
        }
        o.set(t);
      }
    });
    module->setAttr(kStageLayersAttrName, DenseI64ArrayAttr::get(module.getContext(), layers));
  }
};

} // namespace
} // namespace mlir::tpc
