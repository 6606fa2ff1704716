//===- StateUtils.cpp - reading and writing split states in passes ----------===//
#include "passes/StateUtils.h"

#include "runtime/ggml/GGMLTypes.h"

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

} // namespace mlir::tpc
