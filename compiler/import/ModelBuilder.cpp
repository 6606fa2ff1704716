//===- ModelBuilder.cpp - building the tpc forward graph --------------------===//
//
// Assumes the tpc ops infer their result types; this file only chooses operands and attributes.
//===----------------------------------------------------------------------===//
#include "compiler/import/ModelBuilder.h"

#include "mlir/IR/BuiltinTypes.h"

#include <cmath>

namespace mlir::tpc {

static std::string shapeString(ArrayRef<int64_t> shape) {
  std::string s = "[";
  for (size_t i = 0; i < shape.size(); ++i)
    s += (i ? "x" : "") + std::to_string(shape[i]);
  return s + "]";
}

void ModelBuilder::error(const Twine &message) {
  emitError(loc) << file.path() << ": " << message;
  hadError = true;
}

Value ModelBuilder::makeWeight(const gguf::TensorInfo &t, ArrayRef<int64_t> shape, const std::string &why) {
  SmallVector<int64_t> actual(t.ne.rbegin(), t.ne.rend());
  if (ArrayRef<int64_t>(actual) != shape) {
    error("tensor '" + t.name + "' has shape " + shapeString(actual) + " (ggml ne reversed), expected " +
          shapeString(shape) + " from the hyperparameters" + (why.empty() ? "" : " (" + why + ")"));
    return nullptr;
  }
  auto type = RankedTensorType::get(shape, b.getF32Type());
  return b.create<WeightOp>(loc, type, b.getStringAttr(t.name), b.getStringAttr(::tpc::ggmlTypeName(t.type)));
}

Value ModelBuilder::weight(const std::string &name, ArrayRef<int64_t> shape, const std::string &why) {
  const gguf::TensorInfo *t = file.findTensor(name);
  if (!t) {
    error("tensor '" + name + "' is missing (expected shape " + shapeString(shape) + ")");
    return nullptr;
  }
  return makeWeight(*t, shape, why);
}

Value ModelBuilder::optionalWeight(const std::string &name, ArrayRef<int64_t> shape, const std::string &why) {
  const gguf::TensorInfo *t = file.findTensor(name);
  return t ? makeWeight(*t, shape, why) : nullptr;
}

Value ModelBuilder::getRows(Value table, Value ids) { return make<GetRowsOp>(table, ids); }
Value ModelBuilder::takeAlong(Value x, Value ids) { return make<TakeAlongOp>(x, ids, b.getI64IntegerAttr(1)); }
Value ModelBuilder::selectRows(Value x, Value rows) { return make<SelectRowsOp>(x, rows); }
Value ModelBuilder::rmsNorm(Value x, float eps) { return make<RmsNormOp>(x, b.getF32FloatAttr(eps)); }
Value ModelBuilder::matmul(Value x, Value w) { return make<MatmulOp>(x, w); }
Value ModelBuilder::mulMatId(Value x, Value w, Value ids) { return make<MulMatIdOp>(x, w, ids); }
Value ModelBuilder::add(Value a, Value c) { return make<AddOp>(a, c); }
Value ModelBuilder::mul(Value a, Value c) { return make<MulOp>(a, c); }
Value ModelBuilder::div(Value a, Value c) { return make<DivOp>(a, c); }
Value ModelBuilder::scale(Value x, float s) { return make<ScaleOp>(x, b.getF32FloatAttr(s)); }
Value ModelBuilder::glu(Value gate, Value up, GluFn fn) {
  return make<GluOp>(GluFnAttr::get(b.getContext(), fn), gate, up);
}
Value ModelBuilder::glu(Value gateUp, GluFn fn) {
  return make<GluOp>(GluFnAttr::get(b.getContext(), fn), gateUp, Value());
}
Value ModelBuilder::softmax(Value x) { return make<SoftmaxOp>(x); }
Value ModelBuilder::topK(Value x, int64_t k) { return make<TopKOp>(x, b.getI64IntegerAttr(k)); }
Value ModelBuilder::sum(Value x, int64_t axis, bool keepDim) {
  return make<SumOp>(x, b.getI64IntegerAttr(axis), b.getBoolAttr(keepDim));
}
Value ModelBuilder::reshape(Value x, ArrayRef<int64_t> shape) {
  if (hadError)
    return nullptr;
  auto type = RankedTensorType::get(shape, cast<RankedTensorType>(x.getType()).getElementType());
  auto op = b.create<ReshapeOp>(loc, type, x);
  if (mlir::failed(op.verify())) { // the element count must match: nothing infers a reshape's type
    op->erase();
    error("cannot build 'tpc.reshape' from these hyperparameters (a tpc bug)");
    return nullptr;
  }
  return op;
}
Value ModelBuilder::rope(Value x, Value pos, Value freqs, RopeMode mode, int64_t nDims, float base,
                         const RopeScaling &sc) {
  return make<RopeOp>(RopeModeAttr::get(b.getContext(), mode), x, pos, freqs, b.getI64IntegerAttr(nDims),
                      b.getF32FloatAttr(base), b.getF32FloatAttr(sc.freqScale), b.getF32FloatAttr(sc.extFactor),
                      b.getF32FloatAttr(sc.attnFactor), b.getF32FloatAttr(sc.betaFast),
                      b.getF32FloatAttr(sc.betaSlow), b.getI64IntegerAttr(sc.origCtx));
}
Value ModelBuilder::softcap(Value x, float cap) { return make<SoftcapOp>(x, b.getF32FloatAttr(cap)); }
Value ModelBuilder::kvCache(unsigned layer, int64_t nHeadKv, int64_t dk, int64_t dv) {
  return make<KvCacheOp>(b.getI64IntegerAttr(layer), b.getI64IntegerAttr(nHeadKv), b.getI64IntegerAttr(dk),
                         b.getI64IntegerAttr(dv));
}
Value ModelBuilder::attention(Value q, Value k, Value v, Value cache, Value pos, float scale, int64_t window,
                              float softcap, Value gate, Value sinks) {
  return make<AttentionOp>(q, k, v, cache, pos, sinks, gate, b.getF32FloatAttr(scale),
                           b.getI64IntegerAttr(window), b.getF32FloatAttr(softcap));
}
Value ModelBuilder::addId(Value x, Value bias, Value ids) { return make<AddIdOp>(x, bias, ids); }
Value ModelBuilder::unary(Value x, UnaryFn fn) { return make<UnaryOp>(UnaryFnAttr::get(b.getContext(), fn), x); }
Value ModelBuilder::view(Value x, int64_t axis, int64_t offset, int64_t size) {
  return make<ViewOp>(x, b.getI64IntegerAttr(axis), b.getI64IntegerAttr(offset), b.getI64IntegerAttr(size));
}
Value ModelBuilder::l2Norm(Value x, float eps) { return make<L2NormOp>(x, b.getF32FloatAttr(eps)); }
Value ModelBuilder::gatedRmsNorm(Value x, Value w, Value z, float eps) {
  return make<GatedRmsNormOp>(x, w, z, b.getF32FloatAttr(eps));
}
Value ModelBuilder::recurrentState(unsigned layer, int64_t nKeyHeads, int64_t nValueHeads, int64_t dk, int64_t dv,
                                   int64_t convKernel) {
  return make<RecurrentStateOp>(b.getI64IntegerAttr(layer), b.getI64IntegerAttr(nKeyHeads),
                                b.getI64IntegerAttr(nValueHeads), b.getI64IntegerAttr(dk), b.getI64IntegerAttr(dv),
                                b.getI64IntegerAttr(convKernel));
}
Value ModelBuilder::ssmConv(Value x, Value w, Value state, Value pos) { return make<SsmConvOp>(x, w, state, pos); }
Value ModelBuilder::deltaNet(Value q, Value k, Value v, Value g, Value beta, Value state, Value pos, float scale) {
  return make<DeltaNetOp>(q, k, v, g, beta, state, pos, b.getF32FloatAttr(scale));
}

Value ModelBuilder::attentionBlock(Value h, Value pos, const AttentionWeights &w, const AttentionSpec &s) {
  int64_t T = ShapedType::kDynamic;
  auto project = [&](Value wt, Value bias) { return bias ? add(matmul(h, wt), bias) : matmul(h, wt); };
  Value q = reshape(project(w.wq, w.bq), {T, s.nHead, s.headDimK});
  Value kRaw = reshape(project(w.wk, w.bk), {T, s.nHeadKv, s.headDimK});
  Value v = s.vFromK ? kRaw : reshape(project(w.wv, w.bv), {T, s.nHeadKv, s.headDimV});
  Value k = kRaw;
  if (s.qNorm)
    q = norm(q, s.qNorm, s.eps);
  if (s.kNorm)
    k = norm(k, s.kNorm, s.eps);
  if (s.vNorm)
    v = rmsNorm(v, s.eps);
  q = rope(q, pos, s.ropeFreqs, s.ropeMode, s.nRot, s.ropeBase, s.ropeScaling);
  k = rope(k, pos, s.ropeFreqs, s.ropeMode, s.nRot, s.ropeBase, s.ropeScaling);
  Value cache = kvCache(s.layer, s.nHeadKv, s.headDimK, s.headDimV);
  Value a = attention(q, k, v, cache, pos, s.scale, s.slidingWindow, /*softcap=*/0.f, /*gate=*/{}, s.sinks);
  Value o = matmul(reshape(a, {T, s.nHead * s.headDimV}), w.wo);
  return w.bo ? add(o, w.bo) : o;
}

Value ModelBuilder::gluFFN(Value h, const FFNWeights &w, GluFn fn) {
  // Sequenced explicitly: argument evaluation order would otherwise decide the order of ops in the IR.
  Value g = matmul(h, w.gate);
  Value u = matmul(h, w.up);
  return matmul(glu(g, u, fn), w.down);
}

Value ModelBuilder::moeFFN(Value h, Value routerIn, const MoeWeights &w, int64_t nUsed, GluFn fn,
                           MoeGating gating) {
  Value logits = matmul(routerIn, w.router);                      // [T, E]
  if (w.routerBias)
    logits = add(logits, w.routerBias);
  Value ids, weights;                                             // [T, k] each
  if (gating == MoeGating::SoftmaxSelected) { // ggml's SOFTMAX_WEIGHT: choose by logit, softmax the k
    ids = topK(logits, nUsed);
    weights = softmax(takeAlong(logits, ids));
  } else {
    Value probs = softmax(logits);
    ids = topK(probs, nUsed);
    weights = takeAlong(probs, ids);
    if (gating == MoeGating::SoftmaxNormalized)
      weights = div(weights, sum(weights, /*axis=*/1, /*keepDim=*/true));
  }
  return moeExperts(h, w, ids, weights, nUsed, fn);
}

Value ModelBuilder::moeExperts(Value h, const MoeWeights &w, Value ids, Value weights, int64_t nUsed,
                               GluFn fn) {
  int64_t T = ShapedType::kDynamic;
  auto biased = [&](Value x, Value bias) { return bias ? addId(x, bias, ids) : x; };
  Value act;                                                      // [T, k, F]
  if (w.gateUp) {
    act = glu(biased(mulMatId(h, w.gateUp, ids), w.gateUpBias), fn);
  } else {
    Value g = biased(mulMatId(h, w.gate, ids), w.gateBias);
    Value u = biased(mulMatId(h, w.up, ids), w.upBias);
    act = glu(g, u, fn);
  }
  // The down bias before the router weighting: each expert's bias is scaled by its weight (gpt-oss).
  Value experts = biased(mulMatId(act, w.down, ids), w.downBias); // [T, k, n_embd]
  if (w.downScale) // ggml gathers the per-expert scale after the down projection
    experts = mul(experts, reshape(getRows(w.downScale, ids), {T, nUsed, 1}));
  experts = mul(experts, reshape(weights, {T, nUsed, 1}));
  return sum(experts, /*axis=*/1, /*keepDim=*/false);
}

} // namespace mlir::tpc
