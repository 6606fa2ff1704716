//===- ModuleFacts.cpp - plan-wide facts read off the module --------------===//
//
// What emitPlan takes from the module as a whole rather than per device and op: the GGUF's tokenizer in
// plan form and the layer of every op (PlanEmitter.h). Kept apart from PlanEmitter.cpp's per-op emission.
//===----------------------------------------------------------------------===//
#include "compiler/emit/PlanEmitter.h"

#include "compiler/tokenizer/GGUFTokenizer.h"
#include "dialects/tpc/IR/TpcOps.h"
#include "runtime/tokenizer/PlanVocab.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"

#include <algorithm>

namespace mlir::tpc {

namespace rt = ::tpc::rt;

/// The GGUF's tokenizer in plan form (every field the runtime's TokenizerData needs).
LogicalResult fillTokenizer(ModuleOp module, const ::tpc::gguf::GGUFFile &file, rt::PlanTokenizer &pt) {
  auto tok = ::tpc::tokenizerFromGGUF(file);
  if (!tok)
    return module.emitError() << tok.message();
  pt = rt::planTokenizerFromData(std::move(*tok)); // moved: a vocabulary can be 262k strings
  if (auto tmpl = file.getStringOr("tokenizer.chat_template", ""))
    pt.chatTemplate = *tmpl;
  // The named variant llama-server and transformers pick for a request that has tools.
  if (auto tmpl = file.getStringOr("tokenizer.chat_template.tool_use", ""))
    pt.chatTemplateToolUse = *tmpl;
  return success();
}

DenseMap<Operation *, int64_t> attributeLayers(ModuleOp module) {
  DenseMap<Operation *, int64_t> layers;
  module.walk([&](Operation *op) {
    if (isa<ModuleOp, func::FuncOp>(op))
      return;
    int64_t layer = kLayerNone;
    if (Attribute stamp = op->getAttr(TpcDialect::kLayerAttrName))
      layer = isa<IntegerAttr>(stamp) ? cast<IntegerAttr>(stamp).getInt() : kLayerOutput; // verified
    else
      // Not stamped by the importer (a collective, a copy, a fused op): where its activations come from.
      // Weights do not count: a fused layer boundary reads the next layer's norm weight.
      for (Value v : op->getOperands())
        if (Operation *def = v.getDefiningOp(); def && !isa<WeightOp>(def))
          layer = std::max(layer, layers.lookup(def));
    layers[op] = layer;
  });
  return layers;
}

} // namespace mlir::tpc
