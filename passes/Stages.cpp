//===- Stages.cpp - which pipeline stage each op runs on --------------------===//
//
// The one rule of Stages.h.
//===----------------------------------------------------------------------===//
#include "passes/Stages.h"

#include "dialects/tpc/IR/TpcOps.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"

#include <algorithm>

namespace mlir::tpc {

std::vector<int64_t> moduleStageLayers(ModuleOp module) {
  auto a = module->getAttrOfType<DenseI64ArrayAttr>(kStageLayersAttrName);
  if (!a)
    return {};
  return std::vector<int64_t>(a.asArrayRef().begin(), a.asArrayRef().end());
}

int64_t countLayers(ModuleOp module) {
  int64_t n = 0;
  module.walk([&](Operation *op) {
    if (auto stamp = op->getAttrOfType<IntegerAttr>(TpcDialect::kLayerAttrName))
      n = std::max(n, stamp.getInt() + 1);
  });
  return n;
}

DenseMap<Operation *, int64_t> assignStages(ModuleOp module, const std::vector<int64_t> &stageLayers) {
  DenseMap<Operation *, int64_t> stages;
  const int64_t last = stageLayers.empty() ? 0 : int64_t(stageLayers.size()) - 1;
  auto stageOfLayer = [&](int64_t layer) {
    int64_t end = 0;
    for (auto [s, n] : llvm::enumerate(stageLayers)) {
      end += n;
      if (layer < end)
        return int64_t(s);
    }
    return last;
  };
  module.walk([&](Operation *op) {
    if (isa<ModuleOp, func::FuncOp>(op))
      return;
    int64_t stage = 0;
    if (auto t = dyn_cast<StageTransferOp>(op))
      stage = int64_t(t.getTo());
    else if (isa<func::ReturnOp>(op))
      stage = 0;
    else if (auto c = dyn_cast<KvCacheOp>(op))
      stage = stageOfLayer(c.getLayer());
    else if (auto r = dyn_cast<RecurrentStateOp>(op))
      stage = stageOfLayer(r.getLayer());
    else if (Attribute stamp = op->getAttr(TpcDialect::kLayerAttrName))
      stage = isa<IntegerAttr>(stamp) ? stageOfLayer(cast<IntegerAttr>(stamp).getInt()) : last; // "output"
    else
      for (Value v : op->getOperands())
        if (Operation *def = v.getDefiningOp(); def && !isa<WeightOp>(def))
          stage = std::max(stage, stages.lookup(def));
    stages[op] = stage;
  });
  return stages;
}

} // namespace mlir::tpc
