//===- LocalShapes.h - per-device shapes and storage of IR values -*- C++ -*-===//
//
// What tpc-plan-memory and the plan emitter must agree on, in one header so they cannot drift: the local
// shape of a value on device d (its global shape with the split axis replaced by sizes[d]), which dynamic
// dim 0 is the call's tokens and which its output rows (the values computed from tpc.select_rows), which
// values own an activation buffer, and which only alias another value (a reshape of a buffer, the result
// of an op pinned to another device with `tpc.on_device`), and which side (host or device) holds a result.
// Header-only and dependent on the tpc dialect alone; it lives in passes/ because tpc-plan-memory defines
// what these mean and the emitter (compiler/emit, which may depend on passes/) follows it.
//
//   int64_t n = mlir::tpc::numDevices(module);
//   SmallVector<int64_t> s = mlir::tpc::localShape(value, d);   // -1 = the token dimension
//   auto rows = mlir::tpc::rowsDimValues(fn);                    // values whose dim 0 is the output rows
//   s = mlir::tpc::planShape(value, d, *rows);                   // -2 for those (the plan's kRowsDim)
//   mlir::tpc::Storage k = mlir::tpc::valueStorage(value, d);   // Buffer, Alias, Weight, ...
//   bool h = mlir::tpc::resultOnHost(op, i);                     // host arena or device arena
//===----------------------------------------------------------------------===//
#ifndef TPC_PASSES_LOCALSHAPES_H
#define TPC_PASSES_LOCALSHAPES_H

#include "dialects/tpc/IR/TpcOps.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/IR/BuiltinOps.h"
#include "llvm/ADT/DenseSet.h"

namespace mlir::tpc {

/// `tpc.devices` of the module (1 when absent).
inline int64_t numDevices(ModuleOp m) { return getNumDevices(m).value_or(1); }

/// Local shape of `v` on `device`: the global shape with a split axis narrowed to sizes[device]; -1 for
/// the dynamic token dimension. Mirrored, partial and unannotated values keep the global shape.
inline SmallVector<int64_t> localShape(Value v, int64_t device) {
  if (!isa<RankedTensorType>(v.getType()))
    return {};
  SmallVector<int64_t> shape = getLocalShape(v, device);
  for (int64_t &d : shape)
    if (ShapedType::isDynamic(d))
      d = -1;
  return shape;
}

/// The values of `fn` whose dim 0 is the call's output rows rather than its tokens: the third argument
/// (the row indices), the results of tpc.select_rows, and every result of an op that reads such a value
/// (after the gather the output head reads only gathered rows and weights). An op that mixes the two
/// dynamic dims (a rows value and another value with a dynamic dim 0) is an error on it.
inline FailureOr<llvm::DenseSet<Value>> rowsDimValues(func::FuncOp fn) {
  llvm::DenseSet<Value> rows;
  if (fn.getNumArguments() > 2)
    rows.insert(fn.getArgument(2));
  auto dynamic0 = [](Value v) {
    auto t = dyn_cast<RankedTensorType>(v.getType());
    return t && t.getRank() > 0 && t.isDynamicDim(0);
  };
  WalkResult r = fn.walk([&](Operation *op) {
    if (isa<SelectRowsOp>(op)) {
      rows.insert(op->getResult(0));
      return WalkResult::advance();
    }
    bool anyRows = false, anyTokens = false;
    for (Value v : op->getOperands())
      (rows.contains(v) ? anyRows : anyTokens) |= dynamic0(v);
    if (!anyRows)
      return WalkResult::advance();
    if (anyTokens && !isa<func::ReturnOp>(op)) {
      op->emitError("mixes the token dimension and the output-rows dimension (values computed from "
                    "tpc.select_rows) in its operands");
      return WalkResult::interrupt();
    }
    for (Value res : op->getResults())
      rows.insert(res);
    return WalkResult::advance();
  });
  if (r.wasInterrupted())
    return failure();
  return rows;
}

/// localShape with the output-rows dim 0 as -2 (the plan's kRowsDim) for the values in `rows`.
inline SmallVector<int64_t> planShape(Value v, int64_t device, const llvm::DenseSet<Value> &rows) {
  SmallVector<int64_t> shape = localShape(v, device);
  if (!shape.empty() && shape[0] == -1 && rows.contains(v))
    shape[0] = -2;
  return shape;
}

/// Bytes of a plan shape of 4-byte elements (f32, i32) with `maxBatch` tokens (-1) and `maxRows` output
/// rows (-2).
inline int64_t localBytes(ArrayRef<int64_t> shape, int64_t maxBatch, int64_t maxRows) {
  int64_t n = 4;
  for (int64_t d : shape)
    n *= d == -1 ? maxBatch : d == -2 ? maxRows : d;
  return n;
}

/// `tpc.on_device` of `op`, or -1 when the op runs on every device.
inline int64_t onDevice(Operation *op) {
  if (auto a = op->getAttrOfType<IntegerAttr>("tpc.on_device"))
    return a.getInt();
  return -1;
}

/// How a value is stored on one device.
enum class Storage {
  Input,  ///< a function argument (token ids, positions)
  Weight, ///< a tpc.weight result
  Kv,     ///< a tpc.kv_cache result
  Output, ///< returned by @forward: written straight into the caller's logits
  Alias,  ///< same bytes as its first operand (reshape of a buffer; op pinned to another device)
  Buffer, ///< its own slot in the activation arena
};

inline bool isReturned(Value v) {
  for (Operation *user : v.getUsers())
    if (isa<func::ReturnOp>(user))
      return true;
  return false;
}

/// See Storage. A reshape aliases only a value that has arena bytes of its own (or aliases one), so a
/// reshape of a weight or of an input gets a buffer and a copy.
inline Storage valueStorage(Value v, int64_t device) {
  Operation *op = v.getDefiningOp();
  if (!op)
    return Storage::Input;
  if (isa<WeightOp>(op))
    return Storage::Weight;
  if (isCacheOp(op))
    return Storage::Kv;
  int64_t on = onDevice(op);
  if (on >= 0 && on != device && op->getNumOperands() > 0)
    return Storage::Alias;
  if (isReturned(v))
    return Storage::Output;
  if (isa<ReshapeOp>(op)) {
    Storage in = valueStorage(op->getOperand(0), device);
    if (in == Storage::Buffer || in == Storage::Alias)
      return Storage::Alias;
  }
  return Storage::Buffer;
}

/// True when result `index` of `op` lives on the host: a backend_copy's `to`, else `tpc.placement` (one
/// string for the op or one per result); device when absent. tpc-plan-memory packs host and device
/// buffers into separate arenas by this, and the emitter places tensors and steps by it.
inline bool resultOnHost(Operation *op, unsigned index) {
  if (auto copy = dyn_cast<BackendCopyOp>(op))
    return copy.getTo() == "host";
  Attribute a = op->getAttr(TpcDialect::kPlacementAttrName);
  if (auto s = dyn_cast_or_null<StringAttr>(a))
    return s.getValue() == "host";
  if (auto arr = dyn_cast_or_null<ArrayAttr>(a); arr && index < arr.size())
    if (auto s = dyn_cast<StringAttr>(arr[index]))
      return s.getValue() == "host";
  return false;
}

/// True when `op` executes on `device` (ops without `tpc.on_device` run everywhere).
inline bool runsOn(Operation *op, int64_t device) {
  int64_t on = onDevice(op);
  return on < 0 || on == device;
}

} // namespace mlir::tpc

#endif // TPC_PASSES_LOCALSHAPES_H
