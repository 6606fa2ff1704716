//===- TpcRecurrentOps.cpp - linear-attention ops: types and inference -*- C++ -*-===//
//
// `!tpc.recurrent_state<HkxHvxDkxDvxK>` (parse, print, verify) and the result-type inference (which is
// also the verifier, as in TpcOps.cpp) of the ops of Gated DeltaNet layers: tpc.recurrent_state,
// tpc.ssm_conv, tpc.delta_net, tpc.l2_norm and tpc.gated_rms_norm. Their split rules are in
// TpcSplitRules.cpp with the other structural ops'.
//===----------------------------------------------------------------------===//

#include "dialects/tpc/IR/TpcInfer.h"
#include "dialects/tpc/IR/TpcOps.h"

#include "mlir/IR/Builders.h"
#include "mlir/IR/DialectImplementation.h"

using namespace mlir;
using namespace mlir::tpc;
using namespace mlir::tpc::infer;

LogicalResult RecurrentStateType::verify(function_ref<InFlightDiagnostic()> emitError, int64_t nKeyHeads,
                                         int64_t nValueHeads, int64_t headDimK, int64_t headDimV,
                                         int64_t convKernel) {
  if (nKeyHeads < 1 || nValueHeads < 1 || headDimK < 1 || headDimV < 1 || convKernel < 1)
    return emitError() << "!tpc.recurrent_state sizes must be positive, got " << nKeyHeads << "x" << nValueHeads
                       << "x" << headDimK << "x" << headDimV << "x" << convKernel;
  if (nValueHeads % nKeyHeads)
    return emitError() << "!tpc.recurrent_state value heads " << nValueHeads
                       << " must be a multiple of the key heads " << nKeyHeads;
  return success();
}

Type RecurrentStateType::parse(AsmParser &p) {
  SMLoc loc = p.getCurrentLocation();
  SmallVector<int64_t, 5> dims;
  if (p.parseLess() || p.parseDimensionList(dims, /*allowDynamic=*/false, /*withTrailingX=*/false) ||
      p.parseGreater())
    return {};
  if (dims.size() != 5) {
    p.emitError(loc) << "!tpc.recurrent_state expects 5 sizes HkxHvxDkxDvxK, got " << dims.size();
    return {};
  }
  return getChecked([&] { return p.emitError(loc); }, p.getContext(), dims[0], dims[1], dims[2], dims[3], dims[4]);
}

void RecurrentStateType::print(AsmPrinter &p) const {
  p << '<' << getNKeyHeads() << 'x' << getNValueHeads() << 'x' << getHeadDimK() << 'x' << getHeadDimV() << 'x'
    << getConvKernel() << '>';
}

LogicalResult RecurrentStateOp::inferReturnTypes(MLIRContext *ctx, std::optional<Location> loc, Adaptor adaptor,
                                                 SmallVectorImpl<Type> &types) {
  Infer in{loc, getOperationName()};
  auto layer = in.attr(adaptor.getLayerAttr(), "layer");
  auto hk = in.attr(adaptor.getNKeyHeadsAttr(), "n_key_heads");
  auto hv = in.attr(adaptor.getNValueHeadsAttr(), "n_value_heads");
  auto dk = in.attr(adaptor.getHeadDimKAttr(), "head_dim_k");
  auto dv = in.attr(adaptor.getHeadDimVAttr(), "head_dim_v");
  auto kw = in.attr(adaptor.getConvKernelAttr(), "conv_kernel");
  if (failed(layer) || failed(hk) || failed(hv) || failed(dk) || failed(dv) || failed(kw))
    return failure();
  if (layer->getInt() < 0)
    return in.fail("layer must be >= 0, got ", layer->getInt());
  int64_t k = hk->getInt(), v = hv->getInt();
  if (k < 1 || v < 1 || dk->getInt() < 1 || dv->getInt() < 1 || kw->getInt() < 1)
    return in.fail("head counts, head sizes and conv_kernel must be positive, got ", k, ", ", v, ", ",
                   dk->getInt(), ", ", dv->getInt(), ", ", kw->getInt());
  if (v % k)
    return in.fail("n_value_heads ", v, " must be a multiple of n_key_heads ", k);
  types.push_back(RecurrentStateType::get(ctx, k, v, dk->getInt(), dv->getInt(), kw->getInt()));
  return success();
}

LogicalResult SsmConvOp::inferReturnTypes(MLIRContext *ctx, std::optional<Location> loc, Adaptor adaptor,
                                          SmallVectorImpl<Type> &types) {
  Infer in{loc, getOperationName()};
  auto x = in.tensor(adaptor.getX(), "x", f32(ctx), 0, 2);
  auto w = in.tensor(adaptor.getW(), "w", f32(ctx), 0, 2);
  auto pos = in.tensor(adaptor.getPos(), "pos", i32(ctx), 0, 1);
  if (failed(x) || failed(w) || failed(pos))
    return failure();
  auto st = dyn_cast<RecurrentStateType>(adaptor.getState().getType());
  if (!st)
    return in.fail("state must be a !tpc.recurrent_state, got ", adaptor.getState().getType());
  const int64_t c = st.getConvChannels();
  if (x->getDimSize(1) != c)
    return in.fail("x ", *x, " must have the state's ", c, " conv channels (2 Hk Dk + Hv Dv)");
  if (w->getDimSize(0) != c || w->getDimSize(1) != st.getConvKernel())
    return in.fail("w ", *w, " must be [", c, ", ", st.getConvKernel(), "] (channels x conv kernel)");
  if (!compatible(x->getDimSize(0), pos->getDimSize(0)))
    return in.fail("pos ", *pos, " has a different token count than x ", *x);
  types.push_back(RankedTensorType::get({merge(x->getDimSize(0), pos->getDimSize(0)), c}, f32(ctx)));
  return success();
}

LogicalResult DeltaNetOp::inferReturnTypes(MLIRContext *ctx, std::optional<Location> loc, Adaptor adaptor,
                                           SmallVectorImpl<Type> &types) {
  Infer in{loc, getOperationName()};
  auto q = in.tensor(adaptor.getQ(), "q", f32(ctx), 0, 3);
  auto k = in.tensor(adaptor.getK(), "k", f32(ctx), 0, 3);
  auto v = in.tensor(adaptor.getV(), "v", f32(ctx), 0, 3);
  auto g = in.tensor(adaptor.getG(), "g", f32(ctx), 0, 2);
  auto beta = in.tensor(adaptor.getBeta(), "beta", f32(ctx), 0, 2);
  auto pos = in.tensor(adaptor.getPos(), "pos", i32(ctx), 0, 1);
  if (failed(q) || failed(k) || failed(v) || failed(g) || failed(beta) || failed(pos))
    return failure();
  auto st = dyn_cast<RecurrentStateType>(adaptor.getState().getType());
  if (!st)
    return in.fail("state must be a !tpc.recurrent_state, got ", adaptor.getState().getType());
  const int64_t hk = st.getNKeyHeads(), hv = st.getNValueHeads(), dk = st.getHeadDimK(), dv = st.getHeadDimV();
  if (q->getDimSize(1) != hk || q->getDimSize(2) != dk || k->getDimSize(1) != hk || k->getDimSize(2) != dk)
    return in.fail("q ", *q, " and k ", *k, " must be [?, ", hk, ", ", dk, "] (the state's key heads)");
  if (v->getDimSize(1) != hv || v->getDimSize(2) != dv)
    return in.fail("v ", *v, " must be [?, ", hv, ", ", dv, "] (the state's value heads)");
  if (g->getDimSize(1) != hv || beta->getDimSize(1) != hv)
    return in.fail("g ", *g, " and beta ", *beta, " must have one entry per value head (", hv, ")");
  int64_t tokens = q->getDimSize(0);
  for (auto [t, name] : {std::pair{*k, "k"}, {*v, "v"}, {*g, "g"}, {*beta, "beta"}, {*pos, "pos"}}) {
    if (!compatible(tokens, t.getDimSize(0)))
      return in.fail(name, " ", t, " has a different token count than q ", *q);
    tokens = merge(tokens, t.getDimSize(0));
  }
  if (failed(in.finite(adaptor.getScaleAttr(), "scale", 0, /*strict=*/true)))
    return failure();
  types.push_back(RankedTensorType::get({tokens, hv, dv}, f32(ctx)));
  return success();
}

LogicalResult L2NormOp::inferReturnTypes(MLIRContext *ctx, std::optional<Location> loc, Adaptor adaptor,
                                         SmallVectorImpl<Type> &types) {
  Infer in{loc, getOperationName()};
  auto x = in.tensor(adaptor.getX(), "operand", f32(ctx), 1);
  if (failed(x) || failed(in.finite(adaptor.getEpsAttr(), "eps", 0, /*strict=*/false)))
    return failure();
  types.push_back(*x);
  return success();
}

LogicalResult GatedRmsNormOp::inferReturnTypes(MLIRContext *ctx, std::optional<Location> loc, Adaptor adaptor,
                                               SmallVectorImpl<Type> &types) {
  Infer in{loc, getOperationName()};
  auto x = in.tensor(adaptor.getX(), "x", f32(ctx), 1);
  auto w = in.tensor(adaptor.getW(), "w", f32(ctx), 0, 1);
  auto z = in.tensor(adaptor.getZ(), "z", f32(ctx), 1);
  if (failed(x) || failed(w) || failed(z) || failed(in.finite(adaptor.getEpsAttr(), "eps", 0, /*strict=*/false)))
    return failure();
  if (!compatible(w->getDimSize(0), x->getDimSize(x->getRank() - 1)))
    return in.fail("w ", *w, " does not match the last dimension of x ", *x);
  if (z->getRank() != x->getRank() ||
      llvm::any_of(llvm::seq<int64_t>(0, x->getRank()),
                   [&](int64_t i) { return !compatible(z->getDimSize(i), x->getDimSize(i)); }))
    return in.fail("z ", *z, " must have the shape of x ", *x);
  types.push_back(*x);
  return success();
}
