//===- StateUtils.cpp - reading and writing split states in passes ----------===//
#include "passes/StateUtils.h"

#include "runtime/ggml/GGMLTypes.h"

#include "llvm/ADT/SmallPtrSet.h"

namespace mlir::tpc {

int64_t weightBlockElems(WeightOp w) {
  auto t = ::tpc::ggmlTypeFromName(w.getGgmlType().str());
  if (!t)
    return 1;
  return ::tpc::ggmlTypeInfo(*t).blockElems;
}

int64_t elementsPerToken(Value v) {
  auto t = dyn_cast<RankedTensorType>(v.getType());
  if (!t)
    return 0;
  int64_t n = 1;
  for (auto [i, d] : llvm::enumerate(t.getShape()))
    if (!(i == 0 && ShapedType::isDynamic(d)))
      n *= d;
  return n;
}

int64_t layerOf(Operation *op) {
  // Breadth-first over producers: the nearest weight names the layer.
  SmallVector<Operation *> work{op};
  llvm::SmallPtrSet<Operation *, 32> seen;
  for (size_t i = 0; i < work.size() && i < 64; ++i) {
    Operation *cur = work[i];
    if (auto w = dyn_cast<WeightOp>(cur)) {
      StringRef name = w.getName();
      if (name.consume_front("blk.")) {
        int64_t n;
        if (!name.consumeInteger(10, n))
          return n;
      }
      continue;
    }
    for (Value v : cur->getOperands())
      if (Operation *def = v.getDefiningOp())
        if (seen.insert(def).second)
          work.push_back(def);
  }
  return -1;
}

} // namespace mlir::tpc
