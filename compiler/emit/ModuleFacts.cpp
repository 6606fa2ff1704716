//===- ModuleFacts.cpp - plan-wide facts read off the module --------------===//
//
// What emitPlan takes from the module as a whole rather than per device and op: the plan's source and
// model facts, the GGUF's tokenizer in plan form and the layer of every op (PlanEmitter.h). Kept apart from PlanEmitter.cpp's per-op emission.
//===----------------------------------------------------------------------===//
#include "compiler/emit/PlanEmitter.h"

#include "compiler/tokenizer/GGUFTokenizer.h"
#include "dialects/tpc/IR/TpcOps.h"
#include "runtime/plan/PlanIO.h"
#include "runtime/tokenizer/PlanVocab.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"

#include <algorithm>
#include <filesystem>

namespace mlir::tpc {

namespace rt = ::tpc::rt;

LogicalResult fillPlanSource(ModuleOp module, const ::tpc::gguf::GGUFFile &file, const EmitOptions &options,
                             rt::Plan &plan) {
  auto intAttr = [&](StringRef name) -> int64_t {
    auto a = module->getAttrOfType<IntegerAttr>(name);
    return a ? a.getInt() : 0;
  };
  plan.compilerVersion = options.compilerVersion;
  // Absolute, so the plan runs from any working directory (tpc run --gguf overrides it).
  std::error_code ec;
  std::filesystem::path abs = std::filesystem::absolute(file.path(), ec);
  plan.ggufPath = ec ? file.path() : abs.lexically_normal().string();
  plan.ggufSize = file.fileSize();
  auto fp = rt::ggufFingerprint(file.path());
  if (!fp)
    return module.emitError() << fp.message();
  plan.ggufFingerprint = *fp;
  auto arch = module->getAttrOfType<StringAttr>("tpc.arch");
  plan.model.arch = arch ? arch.str() : "";
  plan.model.nVocab = intAttr("tpc.n_vocab");
  plan.model.nCtxTrain = intAttr("tpc.n_ctx_train");
  // Default context: the training context, capped so a plan for a long-context model opens on a laptop.
  plan.model.defaultCtx = plan.model.nCtxTrain > 0 ? std::min<int64_t>(plan.model.nCtxTrain, 4096) : 4096;
  // A GGUF without a vocabulary still compiles: the plan runs on token ids (tpc run --prompt-ids).
  if (file.find("tokenizer.ggml.tokens"))
    return fillTokenizer(module, file, plan.tokenizer);
  return success();
}

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
