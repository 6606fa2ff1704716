//===- TpcInfer.h - helpers of the ops' type inference (internal) -*- C++ -*-===//
//
// Shared by the files that implement inferReturnTypes (TpcOps.cpp, TpcRecurrentOps.cpp): the error
// prefix of an op, operand and attribute checks, and dim compatibility (equal, or either dynamic: the
// token dimension is `?`).
//===----------------------------------------------------------------------===//
#ifndef TPC_DIALECTS_TPC_IR_TPCINFER_H
#define TPC_DIALECTS_TPC_IR_TPCINFER_H

#include "mlir/IR/BuiltinAttributes.h"
#include "mlir/IR/BuiltinTypes.h"
#include "mlir/IR/Diagnostics.h"
#include "llvm/ADT/STLExtras.h"
#include "llvm/Support/Format.h"

#include <cmath>
#include <optional>
#include <string>

namespace mlir::tpc::infer {

/// Formats a shape as `?x512x64` for messages.
inline std::string shapeStr(ArrayRef<int64_t> shape) {
  std::string s;
  llvm::raw_string_ostream os(s);
  llvm::interleave(
      shape, os,
      [&](int64_t d) {
        if (ShapedType::isDynamic(d))
          os << '?';
        else
          os << d;
      },
      "x");
  return s;
}

/// Equal, or either dynamic.
inline bool compatible(int64_t a, int64_t b) {
  return a == b || ShapedType::isDynamic(a) || ShapedType::isDynamic(b);
}

/// The static one of two compatible dims (dynamic when both are).
inline int64_t merge(int64_t a, int64_t b) { return ShapedType::isDynamic(a) ? b : a; }

/// Emits inference errors for one op, prefixed like emitOpError.
struct Infer {
  std::optional<Location> loc;
  StringRef opName;

  template <typename... Args> LogicalResult fail(Args &&...args) const {
    return emitOptionalError(loc, "'", opName, "' op ", std::forward<Args>(args)...);
  }

  /// `v` as a ranked tensor with `f32`/`i32` elements as asked (`elem` null: any), of rank `minRank`
  /// or more (and exactly `rank` when given).
  FailureOr<RankedTensorType> tensor(Value v, StringRef what, Type elem = {}, int64_t minRank = 0,
                                     std::optional<int64_t> rank = std::nullopt) const {
    auto t = v ? dyn_cast<RankedTensorType>(v.getType()) : RankedTensorType();
    if (!t)
      return fail(what, " must be a ranked tensor, got ", v ? v.getType() : Type());
    if (elem && t.getElementType() != elem)
      return fail(what, " must have ", elem, " elements, got ", t);
    if (rank && t.getRank() != *rank)
      return fail(what, " must have rank ", *rank, ", got ", t);
    if (t.getRank() < minRank)
      return fail(what, " must have rank >= ", minRank, ", got ", t);
    return t;
  }

  /// A required attribute, or an error naming it when absent.
  template <typename AttrT> FailureOr<AttrT> attr(AttrT a, StringRef name) const {
    if (!a)
      return fail("requires attribute '", name, "'");
    return a;
  }

  /// A finite float attribute at least `min` (above it when `strict`); `note` follows the bound in errors.
  LogicalResult finite(FloatAttr a, StringRef name, double min, bool strict, StringRef note = "") const {
    if (!a)
      return fail("requires attribute '", name, "'");
    double v = a.getValueAsDouble();
    auto num = [](double x) {
      std::string text;
      llvm::raw_string_ostream(text) << llvm::format("%g", x);
      return text;
    };
    if (!std::isfinite(v))
      return fail(name, " must be finite, got ", num(v));
    if (strict ? !(v > min) : !(v >= min))
      return fail(name, " must be ", strict ? "> " : ">= ", num(min), note, ", got ", num(v));
    return success();
  }

  /// A static, in-range axis.
  FailureOr<int64_t> axis(IntegerAttr a, RankedTensorType t, StringRef name = "axis") const {
    if (!a)
      return fail("requires attribute '", name, "'");
    int64_t v = a.getInt();
    if (v < 0 || v >= t.getRank())
      return fail(name, " ", v, " is out of range for ", t);
    return v;
  }
};

inline Type f32(MLIRContext *ctx) { return Float32Type::get(ctx); }
inline Type i32(MLIRContext *ctx) { return IntegerType::get(ctx, 32); }

} // namespace mlir::tpc::infer

#endif // TPC_DIALECTS_TPC_IR_TPCINFER_H
