//===- TpcOps.cpp - tpc dialect ops: type inference and verifiers -*- C++ -*-===//
//
// Result-type inference for every op, which doubles as the shape/type check: builders, the parser and
// the verifier all run it, so a mismatch gets the same precise message wherever it comes from. Messages
// start "'tpc.<op>' op", like emitOpError. Inference may run before the ODS type constraints (from the
// parser and builders), so it never assumes an operand is a ranked tensor or an attribute is present.
// Dims are "compatible" when equal or when either is dynamic (the token dimension is `?`).
//===----------------------------------------------------------------------===//

#include "dialects/tpc/IR/TpcOps.h"
#include "dialects/tpc/IR/TpcInfer.h"

#include "runtime/ggml/GGMLTypes.h"

#include "mlir/IR/Builders.h"
#include "mlir/IR/BuiltinTypes.h"
#include "mlir/IR/OpImplementation.h"
#include "mlir/IR/TypeUtilities.h"
#include "llvm/ADT/STLExtras.h"
#include "llvm/Support/Format.h"
#include "llvm/Support/MathExtras.h"

#include <cmath>

using namespace mlir;
using namespace mlir::tpc;

using namespace mlir::tpc::infer;

namespace {

/// Shared by tpc.unary-like ops: the result is the operand's type.
LogicalResult inferSame(MLIRContext *ctx, const Infer &in, Value x, int64_t minRank,
                        SmallVectorImpl<Type> &types) {
  auto t = in.tensor(x, "operand", f32(ctx), minRank);
  if (failed(t))
    return failure();
  types.push_back(*t);
  return success();
}

/// Broadcasting binary ops: rhs right-aligned onto lhs.
LogicalResult inferBinary(MLIRContext *ctx, const Infer &in, Value lhs, Value rhs,
                          SmallVectorImpl<Type> &types) {
  auto l = in.tensor(lhs, "lhs", f32(ctx));
  auto r = in.tensor(rhs, "rhs", f32(ctx));
  if (failed(l) || failed(r))
    return failure();
  if (r->getRank() > l->getRank())
    return in.fail("rhs ", *r, " has a higher rank than lhs ", *l);
  int64_t offset = l->getRank() - r->getRank();
  for (int64_t i = 0; i < r->getRank(); ++i) {
    int64_t rd = r->getDimSize(i), ld = l->getDimSize(offset + i);
    if (rd != 1 && !compatible(rd, ld))
      return in.fail("rhs ", *r, " does not broadcast to lhs ", *l, ": dim ", i, " is ", rd,
                     ", expected 1 or ", ld);
  }
  types.push_back(*l);
  return success();
}

} // namespace

#define GET_OP_CLASSES
#include "dialects/tpc/IR/TpcOps.cpp.inc"

//===----------------------------------------------------------------------===//
// Model ops
//===----------------------------------------------------------------------===//

LogicalResult AddOp::inferReturnTypes(MLIRContext *ctx, std::optional<Location> loc, Adaptor adaptor,
                                      SmallVectorImpl<Type> &types) {
  return inferBinary(ctx, {loc, getOperationName()}, adaptor.getLhs(), adaptor.getRhs(), types);
}

LogicalResult DivOp::inferReturnTypes(MLIRContext *ctx, std::optional<Location> loc, Adaptor adaptor,
                                      SmallVectorImpl<Type> &types) {
  return inferBinary(ctx, {loc, getOperationName()}, adaptor.getLhs(), adaptor.getRhs(), types);
}

LogicalResult MulOp::inferReturnTypes(MLIRContext *ctx, std::optional<Location> loc, Adaptor adaptor,
                                      SmallVectorImpl<Type> &types) {
  return inferBinary(ctx, {loc, getOperationName()}, adaptor.getLhs(), adaptor.getRhs(), types);
}

LogicalResult AddIdOp::inferReturnTypes(MLIRContext *ctx, std::optional<Location> loc, Adaptor adaptor,
                                        SmallVectorImpl<Type> &types) {
  Infer in{loc, getOperationName()};
  auto x = in.tensor(adaptor.getX(), "x", f32(ctx), 0, 3);
  auto bias = in.tensor(adaptor.getBias(), "bias", f32(ctx), 0, 2);
  auto ids = in.tensor(adaptor.getIds(), "ids", i32(ctx), 0, 2);
  if (failed(x) || failed(bias) || failed(ids))
    return failure();
  if (!compatible(x->getDimSize(0), ids->getDimSize(0)) || !compatible(x->getDimSize(1), ids->getDimSize(1)))
    return in.fail("x ", *x, " and ids ", *ids, " must agree on tokens and selected experts");
  if (bias->isDynamicDim(0) || x->getDimSize(2) != bias->getDimSize(1))
    return in.fail("bias ", *bias, " must have one row of x's width ", x->getDimSize(2), " per expert (ExN)");
  types.push_back(*x);
  return success();
}

LogicalResult AttentionOp::inferReturnTypes(MLIRContext *ctx, std::optional<Location> loc, Adaptor adaptor,
                                            SmallVectorImpl<Type> &types) {
  Infer in{loc, getOperationName()};
  auto q = in.tensor(adaptor.getQ(), "q", f32(ctx), 0, 3);
  auto k = in.tensor(adaptor.getK(), "k", f32(ctx), 0, 3);
  auto v = in.tensor(adaptor.getV(), "v", f32(ctx), 0, 3);
  auto pos = in.tensor(adaptor.getPos(), "pos", i32(ctx), 0, 1);
  if (failed(q) || failed(k) || failed(v) || failed(pos))
    return failure();
  auto cache = dyn_cast<KvCacheType>(adaptor.getCache().getType());
  if (!cache)
    return in.fail("cache must be a !tpc.kv_cache, got ", adaptor.getCache().getType());
  int64_t hq = q->getDimSize(1), dk = q->getDimSize(2), hkv = k->getDimSize(1), dv = v->getDimSize(2);
  for (auto [t, name] : {std::pair{*q, "q"}, {*k, "k"}, {*v, "v"}})
    if (t.isDynamicDim(1) || t.isDynamicDim(2))
      return in.fail(name, " ", t, " must have static head count and head size");
  int64_t tokens = q->getDimSize(0);
  for (auto [t, name] : {std::pair{*k, "k"}, {*v, "v"}, {*pos, "pos"}}) {
    if (!compatible(tokens, t.getDimSize(0)))
      return in.fail(name, " ", t, " has a different token count than q ", *q);
    tokens = merge(tokens, t.getDimSize(0));
  }
  if (k->getDimSize(2) != dk)
    return in.fail("k head size ", k->getDimSize(2), " differs from q head size ", dk);
  if (v->getDimSize(1) != hkv)
    return in.fail("v has ", v->getDimSize(1), " heads but k has ", hkv);
  if (hq % hkv != 0)
    return in.fail("query heads ", hq, " are not a multiple of KV heads ", hkv);
  if (cache.getNHeadKv() != hkv || cache.getHeadDimK() != dk || cache.getHeadDimV() != dv)
    return in.fail("cache ", cache, " does not match k/v (expected !tpc.kv_cache<", hkv, "x", dk, "x", dv,
                   ">)");
  if (Value sinks = adaptor.getSinks()) {
    auto s = in.tensor(sinks, "sinks", f32(ctx), 0, 1);
    if (failed(s))
      return failure();
    if (s->getDimSize(0) != hq)
      return in.fail("sinks ", *s, " must have one entry per query head (", hq, ")");
  }
  if (Value gate = adaptor.getGate()) {
    auto g = in.tensor(gate, "gate", f32(ctx), 0, 3);
    if (failed(g))
      return failure();
    if (!compatible(g->getDimSize(0), tokens) || g->getDimSize(1) != hq || g->getDimSize(2) != dv)
      return in.fail("gate ", *g, " must have the result's shape [?, ", hq, ", ", dv, "]");
  }
  if (failed(in.finite(adaptor.getScaleAttr(), "scale", 0, /*strict=*/true)))
    return failure();
  if (IntegerAttr window = adaptor.getSlidingWindowAttr(); window && window.getInt() < 0)
    return in.fail("sliding_window must be >= 0 (0 = none), got ", window.getInt());
  if (failed(in.finite(adaptor.getSoftcapAttr(), "softcap", 0, /*strict=*/false, " (0 = none)")))
    return failure();
  types.push_back(RankedTensorType::get({tokens, hq, dv}, f32(ctx)));
  return success();
}

LogicalResult ConcatOp::inferReturnTypes(MLIRContext *, std::optional<Location> loc, Adaptor adaptor,
                                         SmallVectorImpl<Type> &types) {
  Infer in{loc, getOperationName()};
  ValueRange inputs = adaptor.getInputs();
  if (inputs.empty())
    return in.fail("needs at least one input");
  auto first = in.tensor(inputs[0], "input 0");
  if (failed(first))
    return failure();
  auto axis = in.axis(adaptor.getAxisAttr(), *first);
  if (failed(axis))
    return failure();
  SmallVector<int64_t> shape(first->getShape());
  for (auto [i, v] : llvm::enumerate(inputs.drop_front())) {
    auto t = in.tensor(v, "input", first->getElementType(), 0, first->getRank());
    if (failed(t))
      return failure();
    for (int64_t d = 0; d < t->getRank(); ++d) {
      int64_t td = t->getDimSize(d);
      if (d == *axis) {
        if (ShapedType::isDynamic(td) || ShapedType::isDynamic(shape[d]) ||
            llvm::AddOverflow(shape[d], td, shape[d]))
          shape[d] = ShapedType::kDynamic;
      } else if (!compatible(shape[d], td)) {
        return in.fail("input ", i + 1, " ", *t, " differs from input 0 ", *first, " in dim ", d,
                       " (only axis ", *axis, " may differ)");
      } else {
        shape[d] = merge(shape[d], td);
      }
    }
  }
  types.push_back(RankedTensorType::get(shape, first->getElementType()));
  return success();
}

LogicalResult ExpertCombineOp::inferReturnTypes(MLIRContext *ctx, std::optional<Location> loc,
                                                Adaptor adaptor, SmallVectorImpl<Type> &types) {
  Infer in{loc, getOperationName()};
  auto x = in.tensor(adaptor.getX(), "x", f32(ctx), 0, 3);
  if (failed(x))
    return failure();
  if (adaptor.getMultipliers().empty())
    return in.fail("needs at least one multiplier");
  int64_t tokens = x->getDimSize(0), ksel = x->getDimSize(1);
  for (auto [i, m] : llvm::enumerate(adaptor.getMultipliers())) {
    auto t = in.tensor(m, "multiplier", f32(ctx), 2);
    if (failed(t))
      return failure();
    bool ok = (t->getRank() == 2 || (t->getRank() == 3 && t->getDimSize(2) == 1)) &&
              compatible(t->getDimSize(0), tokens) && compatible(t->getDimSize(1), ksel);
    if (!ok)
      return in.fail("multiplier ", i, " ", *t, " must be tensor<", shapeStr({tokens, ksel}),
                     "xf32> or tensor<", shapeStr({tokens, ksel, 1}), "xf32> to match x ", *x);
    tokens = merge(tokens, t->getDimSize(0));
  }
  types.push_back(RankedTensorType::get({tokens, x->getDimSize(2)}, f32(ctx)));
  return success();
}

LogicalResult GetRowsOp::inferReturnTypes(MLIRContext *ctx, std::optional<Location> loc, Adaptor adaptor,
                                          SmallVectorImpl<Type> &types) {
  Infer in{loc, getOperationName()};
  auto table = in.tensor(adaptor.getTable(), "table", {}, 1);
  auto ids = in.tensor(adaptor.getIds(), "ids", i32(ctx), 1);
  if (failed(table) || failed(ids))
    return failure();
  SmallVector<int64_t> shape(ids->getShape());
  llvm::append_range(shape, table->getShape().drop_front());
  types.push_back(RankedTensorType::get(shape, table->getElementType()));
  return success();
}

LogicalResult GluOp::inferReturnTypes(MLIRContext *ctx, std::optional<Location> loc, Adaptor adaptor,
                                      SmallVectorImpl<Type> &types) {
  Infer in{loc, getOperationName()};
  auto gate = in.tensor(adaptor.getGate(), "gate", f32(ctx), 1);
  if (failed(gate))
    return failure();
  if (Value upV = adaptor.getUp()) {
    auto up = in.tensor(upV, "up", f32(ctx));
    if (failed(up))
      return failure();
    if (failed(verifyCompatibleShape(*gate, *up)))
      return in.fail("gate ", *gate, " and up ", *up, " must have the same shape");
    types.push_back(*gate);
    return success();
  }
  int64_t last = gate->getShape().back();
  if (ShapedType::isDynamic(last) || last % 2 != 0)
    return in.fail("merged gate|up operand ", *gate,
                   " needs a static, even last dimension to split into halves");
  SmallVector<int64_t> shape(gate->getShape());
  shape.back() = last / 2;
  types.push_back(RankedTensorType::get(shape, f32(ctx)));
  return success();
}

LogicalResult KvCacheOp::inferReturnTypes(MLIRContext *ctx, std::optional<Location> loc, Adaptor adaptor,
                                          SmallVectorImpl<Type> &types) {
  Infer in{loc, getOperationName()};
  auto layer = in.attr(adaptor.getLayerAttr(), "layer");
  auto h = in.attr(adaptor.getNHeadKvAttr(), "n_head_kv");
  auto dk = in.attr(adaptor.getHeadDimKAttr(), "head_dim_k");
  auto dv = in.attr(adaptor.getHeadDimVAttr(), "head_dim_v");
  if (failed(layer) || failed(h) || failed(dk) || failed(dv))
    return failure();
  if (layer->getInt() < 0)
    return in.fail("layer must be >= 0, got ", layer->getInt());
  if (h->getInt() < 1 || dk->getInt() < 1 || dv->getInt() < 1)
    return in.fail("n_head_kv, head_dim_k and head_dim_v must be positive, got ", h->getInt(), ", ",
                   dk->getInt(), ", ", dv->getInt());
  types.push_back(KvCacheType::get(ctx, h->getInt(), dk->getInt(), dv->getInt()));
  return success();
}

LogicalResult MatmulOp::inferReturnTypes(MLIRContext *ctx, std::optional<Location> loc, Adaptor adaptor,
                                         SmallVectorImpl<Type> &types) {
  Infer in{loc, getOperationName()};
  auto x = in.tensor(adaptor.getX(), "x", f32(ctx), 1);
  auto w = in.tensor(adaptor.getW(), "weight", f32(ctx), 0, 2);
  if (failed(x) || failed(w))
    return failure();
  if (!compatible(x->getShape().back(), w->getDimSize(1)))
    return in.fail("x ", *x, " has inner dim ", x->getShape().back(), " but weight ", *w, " expects ",
                   w->getDimSize(1), " (y = x . w^T, w is NxK)");
  SmallVector<int64_t> shape(x->getShape());
  shape.back() = w->getDimSize(0);
  types.push_back(RankedTensorType::get(shape, f32(ctx)));
  return success();
}

LogicalResult MulMatIdOp::inferReturnTypes(MLIRContext *ctx, std::optional<Location> loc, Adaptor adaptor,
                                           SmallVectorImpl<Type> &types) {
  Infer in{loc, getOperationName()};
  auto x = in.tensor(adaptor.getX(), "x", f32(ctx), 2);
  auto w = in.tensor(adaptor.getW(), "weight", f32(ctx), 0, 3);
  auto ids = in.tensor(adaptor.getIds(), "ids", i32(ctx), 0, 2);
  if (failed(x) || failed(w) || failed(ids))
    return failure();
  if (x->getRank() > 3)
    return in.fail("x must be tensor<?xK> or tensor<?xKselxK>, got ", *x);
  int64_t tokens = ids->getDimSize(0), ksel = ids->getDimSize(1);
  if (!compatible(x->getDimSize(0), tokens))
    return in.fail("x ", *x, " and ids ", *ids, " have different token counts");
  if (x->getRank() == 3 && !compatible(x->getDimSize(1), ksel))
    return in.fail("x ", *x, " has ", x->getDimSize(1), " inputs per token but ids select ", ksel,
                   " experts");
  if (!compatible(x->getShape().back(), w->getDimSize(2)))
    return in.fail("x ", *x, " has inner dim ", x->getShape().back(), " but expert weights ", *w, " expect ",
                   w->getDimSize(2), " (w is ExNxK)");
  types.push_back(RankedTensorType::get({merge(tokens, x->getDimSize(0)), ksel, w->getDimSize(1)}, f32(ctx)));
  return success();
}

LogicalResult PermuteOp::inferReturnTypes(MLIRContext *, std::optional<Location> loc, Adaptor adaptor,
                                          SmallVectorImpl<Type> &types) {
  Infer in{loc, getOperationName()};
  auto x = in.tensor(adaptor.getX(), "operand");
  auto permAttr = in.attr(adaptor.getPermAttr(), "perm");
  if (failed(x) || failed(permAttr))
    return failure();
  ArrayRef<int64_t> perm = permAttr->asArrayRef();
  SmallVector<bool> seen(x->getRank(), false);
  bool ok = static_cast<int64_t>(perm.size()) == x->getRank();
  for (int64_t p : perm) {
    ok = ok && p >= 0 && p < x->getRank() && !seen[p];
    if (ok)
      seen[p] = true;
  }
  if (!ok)
    return in.fail("perm [", llvm::make_range(perm.begin(), perm.end()), "] is not a permutation of the ",
                   x->getRank(), " axes of ", *x);
  SmallVector<int64_t> shape;
  for (int64_t p : perm)
    shape.push_back(x->getDimSize(p));
  types.push_back(RankedTensorType::get(shape, x->getElementType()));
  return success();
}

LogicalResult ReshapeOp::verify() {
  auto x = cast<RankedTensorType>(getX().getType());
  auto r = cast<RankedTensorType>(getType());
  if (x.getElementType() != r.getElementType())
    return emitOpError() << "element type changes from " << x << " to " << r;
  // Only the token dimension (dim 0) may be dynamic, and it must stay dim 0.
  auto onlyDim0Dynamic = [](RankedTensorType t) {
    for (int64_t d = 1; d < t.getRank(); ++d)
      if (t.isDynamicDim(d))
        return false;
    return true;
  };
  if (!onlyDim0Dynamic(x) || !onlyDim0Dynamic(r))
    return emitOpError() << "only dim 0 (tokens) may be dynamic, got " << x << " -> " << r;
  bool xDyn = x.getRank() > 0 && x.isDynamicDim(0), rDyn = r.getRank() > 0 && r.isDynamicDim(0);
  if (xDyn != rDyn)
    return emitOpError() << "the dynamic token dimension must stay dim 0: " << x << " -> " << r;
  auto count = [](RankedTensorType t, bool skip0) -> std::optional<int64_t> {
    int64_t n = 1;
    for (int64_t d = skip0 ? 1 : 0; d < t.getRank(); ++d)
      if (t.getDimSize(d) < 0 || llvm::MulOverflow(n, t.getDimSize(d), n))
        return std::nullopt;
    return n;
  };
  std::optional<int64_t> xn = count(x, xDyn), rn = count(r, rDyn);
  if (!xn || !rn || *xn != *rn)
    return emitOpError() << "element count differs: " << x << " -> " << r << (xDyn ? " (per token)" : "");
  return success();
}

LogicalResult RmsNormOp::inferReturnTypes(MLIRContext *ctx, std::optional<Location> loc, Adaptor adaptor,
                                          SmallVectorImpl<Type> &types) {
  Infer in{loc, getOperationName()};
  if (failed(in.finite(adaptor.getEpsAttr(), "eps", 0, /*strict=*/false)))
    return failure();
  return inferSame(ctx, in, adaptor.getX(), 1, types);
}

LogicalResult RopeOp::inferReturnTypes(MLIRContext *ctx, std::optional<Location> loc, Adaptor adaptor,
                                       SmallVectorImpl<Type> &types) {
  Infer in{loc, getOperationName()};
  auto x = in.tensor(adaptor.getX(), "x", f32(ctx), 0, 3);
  auto pos = in.tensor(adaptor.getPos(), "pos", i32(ctx), 0, 1);
  auto nDimsAttr = in.attr(adaptor.getNDimsAttr(), "n_dims");
  if (failed(x) || failed(pos) || failed(nDimsAttr))
    return failure();
  if (!compatible(x->getDimSize(0), pos->getDimSize(0)))
    return in.fail("pos ", *pos, " has a different token count than x ", *x);
  int64_t nDims = nDimsAttr->getInt(), d = x->getDimSize(2);
  if (ShapedType::isDynamic(d))
    return in.fail("x ", *x, " must have a static head size");
  if (nDims < 2 || nDims % 2 != 0 || nDims > d)
    return in.fail("n_dims ", nDims, " must be even, >= 2 and <= the head size ", d);
  if (failed(in.finite(adaptor.getBaseAttr(), "base", 0, /*strict=*/true)) ||
      failed(in.finite(adaptor.getFreqScaleAttr(), "freq_scale", 0, /*strict=*/true)) ||
      failed(in.finite(adaptor.getExtFactorAttr(), "ext_factor", 0, /*strict=*/false)) ||
      failed(in.finite(adaptor.getAttnFactorAttr(), "attn_factor", 0, /*strict=*/true)) ||
      failed(in.finite(adaptor.getBetaFastAttr(), "beta_fast", 0, /*strict=*/true)) ||
      failed(in.finite(adaptor.getBetaSlowAttr(), "beta_slow", 0, /*strict=*/true)))
    return failure();
  // YaRN's correction dims divide by ln(base) and take ln(orig_ctx / ...).
  if (adaptor.getExtFactorAttr() && adaptor.getExtFactorAttr().getValueAsDouble() > 0 &&
      (!adaptor.getOrigCtxAttr() || adaptor.getOrigCtxAttr().getInt() < 1 ||
       adaptor.getBaseAttr().getValueAsDouble() == 1.0))
    return in.fail("YaRN (ext_factor > 0) needs orig_ctx >= 1 and base != 1");
  if (Value ff = adaptor.getFreqFactors()) {
    auto f = in.tensor(ff, "freq_factors", f32(ctx), 0, 1);
    if (failed(f))
      return failure();
    if (f->getDimSize(0) != nDims / 2)
      return in.fail("freq_factors ", *f, " must have n_dims/2 = ", nDims / 2, " entries");
  }
  types.push_back(*x);
  return success();
}

LogicalResult ScaleOp::inferReturnTypes(MLIRContext *ctx, std::optional<Location> loc, Adaptor adaptor,
                                        SmallVectorImpl<Type> &types) {
  Infer in{loc, getOperationName()};
  if (failed(in.finite(adaptor.getValueAttr(), "value", -INFINITY, /*strict=*/true)))
    return failure();
  return inferSame(ctx, in, adaptor.getX(), 0, types);
}

LogicalResult SoftcapOp::inferReturnTypes(MLIRContext *ctx, std::optional<Location> loc, Adaptor adaptor,
                                          SmallVectorImpl<Type> &types) {
  Infer in{loc, getOperationName()};
  if (failed(in.finite(adaptor.getCapAttr(), "cap", 0, /*strict=*/true)))
    return failure();
  return inferSame(ctx, in, adaptor.getX(), 0, types);
}

LogicalResult SoftmaxOp::inferReturnTypes(MLIRContext *ctx, std::optional<Location> loc, Adaptor adaptor,
                                          SmallVectorImpl<Type> &types) {
  return inferSame(ctx, {loc, getOperationName()}, adaptor.getX(), 1, types);
}

LogicalResult SumOp::inferReturnTypes(MLIRContext *ctx, std::optional<Location> loc, Adaptor adaptor,
                                      SmallVectorImpl<Type> &types) {
  Infer in{loc, getOperationName()};
  auto x = in.tensor(adaptor.getX(), "operand", f32(ctx), 1);
  if (failed(x))
    return failure();
  auto axis = in.axis(adaptor.getAxisAttr(), *x);
  if (failed(axis))
    return failure();
  SmallVector<int64_t> shape(x->getShape());
  if (adaptor.getKeepDim())
    shape[*axis] = 1;
  else
    shape.erase(shape.begin() + *axis);
  types.push_back(RankedTensorType::get(shape, f32(ctx)));
  return success();
}

LogicalResult SelectRowsOp::inferReturnTypes(MLIRContext *ctx, std::optional<Location> loc, Adaptor adaptor,
                                             SmallVectorImpl<Type> &types) {
  Infer in{loc, getOperationName()};
  auto x = in.tensor(adaptor.getX(), "x", f32(ctx), 1);
  auto rows = in.tensor(adaptor.getRows(), "rows", i32(ctx), 1, 1);
  if (failed(x) || failed(rows))
    return failure();
  SmallVector<int64_t> shape(x->getShape());
  shape[0] = rows->getDimSize(0);
  types.push_back(RankedTensorType::get(shape, f32(ctx)));
  return success();
}

LogicalResult TakeAlongOp::inferReturnTypes(MLIRContext *ctx, std::optional<Location> loc, Adaptor adaptor,
                                            SmallVectorImpl<Type> &types) {
  Infer in{loc, getOperationName()};
  auto x = in.tensor(adaptor.getX(), "x", f32(ctx), 1);
  if (failed(x))
    return failure();
  auto ids = in.tensor(adaptor.getIds(), "ids", i32(ctx), 0, x->getRank());
  if (failed(ids))
    return failure();
  auto axis = in.axis(adaptor.getAxisAttr(), *x);
  if (failed(axis))
    return failure();
  SmallVector<int64_t> shape(ids->getShape());
  for (int64_t d = 0; d < x->getRank(); ++d) {
    if (d == *axis)
      continue;
    if (!compatible(x->getDimSize(d), ids->getDimSize(d)))
      return in.fail("x ", *x, " and ids ", *ids, " differ in dim ", d, " (only axis ", *axis,
                     " may differ)");
    shape[d] = merge(shape[d], x->getDimSize(d));
  }
  types.push_back(RankedTensorType::get(shape, f32(ctx)));
  return success();
}

LogicalResult TopKOp::inferReturnTypes(MLIRContext *ctx, std::optional<Location> loc, Adaptor adaptor,
                                       SmallVectorImpl<Type> &types) {
  Infer in{loc, getOperationName()};
  auto x = in.tensor(adaptor.getX(), "operand", f32(ctx), 1);
  auto k = in.attr(adaptor.getKAttr(), "k");
  if (failed(x) || failed(k))
    return failure();
  int64_t e = x->getShape().back();
  if (ShapedType::isDynamic(e))
    return in.fail("operand ", *x, " must have a static last dimension");
  if (k->getInt() < 1 || k->getInt() > e)
    return in.fail("k = ", k->getInt(), " must be in [1, ", e, "]");
  SmallVector<int64_t> shape(x->getShape());
  shape.back() = k->getInt();
  types.push_back(RankedTensorType::get(shape, i32(ctx)));
  return success();
}

LogicalResult UnaryOp::inferReturnTypes(MLIRContext *ctx, std::optional<Location> loc, Adaptor adaptor,
                                        SmallVectorImpl<Type> &types) {
  return inferSame(ctx, {loc, getOperationName()}, adaptor.getX(), 0, types);
}

LogicalResult ViewOp::inferReturnTypes(MLIRContext *, std::optional<Location> loc, Adaptor adaptor,
                                       SmallVectorImpl<Type> &types) {
  Infer in{loc, getOperationName()};
  auto x = in.tensor(adaptor.getX(), "operand", {}, 1);
  if (failed(x))
    return failure();
  auto axis = in.axis(adaptor.getAxisAttr(), *x);
  auto offset = in.attr(adaptor.getOffsetAttr(), "offset");
  auto size = in.attr(adaptor.getSizeAttr(), "size");
  if (failed(axis) || failed(offset) || failed(size))
    return failure();
  int64_t dim = x->getDimSize(*axis), o = offset->getInt(), s = size->getInt(), end = 0;
  if (ShapedType::isDynamic(dim))
    return in.fail("axis ", *axis, " of ", *x, " is dynamic; views need a static axis");
  if (o < 0 || s < 1 || llvm::AddOverflow(o, s, end) || end > dim)
    return in.fail("range [", o, ", ", o, " + ", s, ") is not a non-empty sub-range of axis ", *axis,
                   " (size ", dim, ")");
  SmallVector<int64_t> shape(x->getShape());
  shape[*axis] = s;
  types.push_back(RankedTensorType::get(shape, x->getElementType()));
  return success();
}

ParseResult WeightOp::parse(OpAsmParser &parser, OperationState &result) {
  if (succeeded(parser.parseOptionalKeyword("layer"))) {
    Attribute layer;
    if (parser.parseAttribute(layer))
      return failure();
    result.addAttribute(TpcDialect::kLayerAttrName, layer);
  }
  SMLoc loc = parser.getCurrentLocation();
  Type type;
  if (parser.parseOptionalAttrDict(result.attributes) ||
      failed(verifyInherentAttrs(result.name, result.attributes,
                                 [&] { return parser.emitError(loc) << "'" << result.name << "' op "; })) ||
      parser.parseColon() || parser.parseType(type))
    return failure();
  result.addTypes(type);
  return success();
}

void WeightOp::print(OpAsmPrinter &p) {
  if (Attribute layer = (*this)->getAttr(TpcDialect::kLayerAttrName)) {
    p << " layer ";
    p.printAttributeWithoutType(layer);
  }
  p.printOptionalAttrDict((*this)->getAttrs(), {TpcDialect::kLayerAttrName});
  p << " : " << getType();
}

LogicalResult WeightOp::verify() {
  std::optional<::tpc::GGMLType> type = ::tpc::ggmlTypeFromName(getGgmlType().str());
  if (!type)
    return emitOpError() << "unknown ggml_type \"" << getGgmlType() << "\" for tensor \"" << getName()
                         << "\" (expected a ggml type name such as f32, q8_0, q4_K)";
  if (getName().empty())
    return emitOpError() << "name must be a GGUF tensor name, got an empty string";
  auto t = cast<RankedTensorType>(getType());
  if (t.getRank() < 1 || llvm::any_of(t.getShape(), [](int64_t d) { return d <= 0; }))
    return emitOpError() << "weight \"" << getName() << "\" must have a static, positive shape, got " << t;
  uint32_t block = ::tpc::ggmlTypeInfo(*type).blockElems;
  if (t.getShape().back() % block != 0)
    return emitOpError() << "weight \"" << getName() << "\": innermost dim " << t.getShape().back()
                         << " is not a multiple of the " << getGgmlType() << " block size " << block;
  return success();
}

//===----------------------------------------------------------------------===//
// Fused ops
//===----------------------------------------------------------------------===//

namespace {
/// A norm weight for rows of `x`: rank 1, as long as x's last dimension.
LogicalResult checkNormWeight(MLIRContext *ctx, const Infer &in, RankedTensorType x, Value weight) {
  auto w = in.tensor(weight, "weight", f32(ctx), 0, 1);
  if (failed(w))
    return failure();
  if (!compatible(w->getDimSize(0), x.getDimSize(x.getRank() - 1)))
    return in.fail("weight ", *w, " does not match the last dimension of x ", x);
  return success();
}
} // namespace

LogicalResult AllReduceRmsNormOp::inferReturnTypes(MLIRContext *ctx, std::optional<Location> loc,
                                                   Adaptor adaptor, SmallVectorImpl<Type> &types) {
  Infer in{loc, getOperationName()};
  auto x = in.tensor(adaptor.getX(), "x", f32(ctx), 1);
  if (failed(x) || failed(in.finite(adaptor.getEpsAttr(), "eps", 0, /*strict=*/false)))
    return failure();
  if (Value r = adaptor.getResidual(); r && r.getType() != *x)
    return in.fail("residual ", r.getType(), " must have the type of x ", *x);
  if (Value w = adaptor.getWeight(); w && failed(checkNormWeight(ctx, in, *x, w)))
    return failure();
  types.append(2, *x);
  return success();
}

LogicalResult WeightedRmsNormOp::inferReturnTypes(MLIRContext *ctx, std::optional<Location> loc,
                                                  Adaptor adaptor, SmallVectorImpl<Type> &types) {
  Infer in{loc, getOperationName()};
  auto x = in.tensor(adaptor.getX(), "x", f32(ctx), 1);
  if (failed(x) || failed(in.finite(adaptor.getEpsAttr(), "eps", 0, /*strict=*/false)) ||
      failed(checkNormWeight(ctx, in, *x, adaptor.getWeight())))
    return failure();
  types.push_back(*x);
  return success();
}

//===----------------------------------------------------------------------===//
// Communication and placement ops
//===----------------------------------------------------------------------===//

namespace {

/// Checks the annotated state of a collective's operand and result against what it converts.
/// `operandOk`/`resultOk` return a description of the expected state when the given one is wrong.
LogicalResult checkStates(Operation *op, Value operand, Value result,
                          function_ref<const char *(StateAttr)> operandOk,
                          function_ref<const char *(StateAttr)> resultOk) {
  if (StateAttr s = getValueState(operand))
    if (const char *want = operandOk(s))
      return op->emitOpError() << "operand must be " << want << ", got " << s;
  if (StateAttr s = getValueState(result))
    if (const char *want = resultOk(s))
      return op->emitOpError() << "result must be " << want << ", got " << s;
  return success();
}

/// The collective's axis is inside the operand's rank.
LogicalResult verifyAxis(Operation *op, int64_t axis, Value x) {
  int64_t rank = cast<RankedTensorType>(x.getType()).getRank();
  if (axis < 0 || axis >= rank)
    return op->emitOpError() << "axis " << axis << " is out of range for " << x.getType();
  return success();
}

} // namespace

LogicalResult AllGatherOp::verify() {
  int64_t axis = getAxis();
  if (failed(verifyAxis(*this, axis, getX())))
    return failure();
  return checkStates(
      *this, getX(), getResult(),
      [&](StateAttr s) {
        return s.isSplit() && s.getAxis() == axis ? nullptr : "split along the gather axis";
      },
      [](StateAttr s) { return s.isMirrored() ? nullptr : "mirrored"; });
}

LogicalResult AllReduceOp::inferReturnTypes(MLIRContext *, std::optional<Location> loc, Adaptor adaptor,
                                            SmallVectorImpl<Type> &types) {
  Infer in{loc, getOperationName()};
  if (adaptor.getInputs().empty())
    return in.fail("needs at least one operand");
  for (Value v : adaptor.getInputs()) {
    auto t = in.tensor(v, "operand");
    if (failed(t))
      return failure();
    types.push_back(*t);
  }
  return success();
}

LogicalResult AllReduceOp::verify() {
  for (auto [in, out] : llvm::zip(getInputs(), getResults()))
    if (failed(checkStates(
            *this, in, out,
            [](StateAttr s) { return s.isPartial() || s.isRouted() ? nullptr : "partial (or routed)"; },
            [](StateAttr s) { return s.isMirrored() ? nullptr : "mirrored"; })))
      return failure();
  return success();
}

LogicalResult AllReduceRmsNormOp::verify() {
  auto partial = [](StateAttr s) { return s.isPartial() ? nullptr : "partial"; };
  auto mirrored = [](StateAttr s) { return s.isMirrored() ? nullptr : "mirrored"; };
  if (failed(checkStates(*this, getX(), getSum(), partial, mirrored)) ||
      failed(checkStates(*this, getX(), getResult(), partial, mirrored)))
    return failure();
  for (Value v : {getResidual(), getWeight()})
    if (StateAttr s = v ? getValueState(v) : StateAttr(); s && !s.isMirrored())
      return emitOpError() << "residual and weight must be mirrored, got " << s;
  return success();
}

LogicalResult BackendCopyOp::verify() {
  for (StringRef p : {getFrom(), getTo()})
    if (p != "device" && p != "host")
      return emitOpError() << "placement must be \"device\" or \"host\", got \"" << p << "\"";
  if (getFrom() == getTo())
    return emitOpError() << "copies from \"" << getFrom() << "\" to itself; from and to must differ";
  StateAttr in = getValueState(getX()), out = getValueState(getResult());
  if (in && out && in != out)
    return emitOpError() << "must keep the split state of its operand: " << in << " -> " << out;
  return success();
}

LogicalResult ReduceScatterOp::verify() {
  int64_t axis = getAxis();
  if (failed(verifyAxis(*this, axis, getX())))
    return failure();
  return checkStates(
      *this, getX(), getResult(), [](StateAttr s) { return s.isPartial() ? nullptr : "partial"; },
      [&](StateAttr s) {
        return s.isSplit() && s.getAxis() == axis ? nullptr : "split along the scatter axis";
      });
}

LogicalResult SliceOp::verify() {
  int64_t axis = getAxis();
  if (failed(verifyAxis(*this, axis, getX())))
    return failure();
  return checkStates(
      *this, getX(), getResult(), [](StateAttr s) { return s.isMirrored() ? nullptr : "mirrored"; },
      [&](StateAttr s) {
        return s.isSplit() && s.getAxis() == axis ? nullptr : "split along the slice axis";
      });
}

LogicalResult StageTransferOp::verify() {
  const int64_t from = int64_t(getFrom()), to = int64_t(getTo()); // I64Attr reads as uint64_t
  if (from < 0 || to < 0)
    return emitOpError() << "stages must be >= 0, got from " << from << " to " << to;
  if (from == to)
    return emitOpError() << "transfers from stage " << from << " to itself; from and to must differ";
  StateAttr in = getValueState(getX()), out = getValueState(getResult());
  // A part moves to the same device index of the other stage; a sum would need every device's addend.
  if (in && (in.isPartial() || in.isRouted()))
    return emitOpError() << "moves whole parts: its operand must be mirrored or split, got " << in;
  if (in && out && in != out)
    return emitOpError() << "must keep the split state of its operand: " << in << " -> " << out;
  return success();
}
