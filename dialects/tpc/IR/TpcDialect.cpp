//===- TpcDialect.cpp - tpc dialect registration and attribute checks -*- C++ -*-===//
//
// Registers the tpc ops, types and attributes, and verifies the dialect's discardable attributes:
//   tpc.devices   (on the module)  number of devices, >= 1;
//   tpc.state     (on an op)       ArrayAttr of #tpc.state, one per result, each consistent with its
//                                  result's type and with tpc.devices when the module declares it;
//   tpc.state     (on a function argument or result) a single #tpc.state;
//   tpc.placement (on an op)       "device" or "host", or an ArrayAttr of them, one per result;
//   tpc.layer     (on an op)       the importer's layer stamp: an i64 block index >= 0, or "output".
// Other tpc.* attribute names are left to the passes that add them.
//===----------------------------------------------------------------------===//

#include "dialects/tpc/IR/TpcOps.h"

#include "mlir/IR/Builders.h"
#include "mlir/IR/BuiltinAttributes.h"
#include "mlir/Interfaces/FunctionInterfaces.h"

using namespace mlir;
using namespace mlir::tpc;

#include "dialects/tpc/IR/TpcOpsDialect.cpp.inc"

void TpcDialect::initialize() {
  addOperations<
#define GET_OP_LIST
#include "dialects/tpc/IR/TpcOps.cpp.inc"
      >();
  registerTypes();
  registerAttributes();
}

std::optional<int64_t> mlir::tpc::getNumDevices(Operation *op) {
  for (; op; op = op->getParentOp())
    if (auto n = op->getAttrOfType<IntegerAttr>(TpcDialect::kDevicesAttrName))
      return n.getInt();
  return std::nullopt;
}

bool mlir::tpc::sameLayout(StateAttr a, StateAttr b) {
  if (!a || !b)
    return a == b;
  if (a.getKind() != b.getKind())
    return false;
  if (a.isSplit())
    return a.getAxis() == b.getAxis() && a.getSizes() == b.getSizes() && a.getSegments() == b.getSegments();
  if (a.isLocal())
    return a.getDevice() == b.getDevice();
  if (a.isRouted())
    return a.getSizes() == b.getSizes();
  return true;
}

SmallVector<int64_t> mlir::tpc::getLocalShape(Value value, int64_t device) {
  SmallVector<int64_t> shape;
  if (auto t = dyn_cast<RankedTensorType>(value.getType()))
    shape.assign(t.getShape().begin(), t.getShape().end());
  else if (auto c = dyn_cast<KvCacheType>(value.getType()))
    shape = {c.getNHeadKv()};
  else if (auto r = dyn_cast<RecurrentStateType>(value.getType()))
    shape = {r.getNKeyHeads()};
  StateAttr s = getValueState(value);
  if (s && s.isSplit() && s.getAxis() < static_cast<int64_t>(shape.size()) &&
      device < static_cast<int64_t>(s.getSizes().size()))
    shape[s.getAxis()] = s.getSizes()[device];
  return shape;
}

StateAttr mlir::tpc::getValueState(Value value) {
  if (auto result = dyn_cast<OpResult>(value)) {
    auto states = result.getOwner()->getAttrOfType<ArrayAttr>(TpcDialect::kStateAttrName);
    if (!states || result.getResultNumber() >= states.size())
      return {};
    return dyn_cast<StateAttr>(states[result.getResultNumber()]);
  }
  auto arg = cast<BlockArgument>(value);
  auto fn = dyn_cast_or_null<FunctionOpInterface>(arg.getOwner()->getParentOp());
  if (!fn || !arg.getOwner()->isEntryBlock())
    return {};
  return fn.getArgAttrOfType<StateAttr>(arg.getArgNumber(), TpcDialect::kStateAttrName);
}

LogicalResult mlir::tpc::verifyStateForType(function_ref<InFlightDiagnostic()> emitError, StateAttr state,
                                            Type type, std::optional<int64_t> numDevices) {
  if (numDevices && state.isLocal() && state.getDevice() >= *numDevices)
    return emitError() << "local state on device " << state.getDevice()
                       << " but tpc.devices = " << *numDevices;
  if (!state.isSplit() && !state.isRouted())
    return success();
  int64_t n = static_cast<int64_t>(state.getSizes().size());
  if (numDevices && n != *numDevices)
    return emitError() << stringifyStateKind(state.getKind()) << " state lists " << n
                       << " sizes but tpc.devices = " << *numDevices;
  if (state.isRouted()) {
    if (!isa<RankedTensorType>(type))
      return emitError() << "routed state on a value of type " << type << ", which is not a tensor";
    return success(); // the expert count is the experts' weight's, checked by the mul_mat_id rules
  }
  int64_t rank = 0, dim = ShapedType::kDynamic;
  if (auto tensor = dyn_cast<RankedTensorType>(type)) {
    rank = tensor.getRank();
    if (state.getAxis() < rank)
      dim = tensor.getDimSize(state.getAxis());
  } else if (auto cache = dyn_cast<KvCacheType>(type)) {
    // Only the KV-head axis of a cache can be split: [Hkv, context, Dk|Dv].
    if (state.getAxis() != 0)
      return emitError() << "split state of a !tpc.kv_cache must use axis 0 (KV heads), got axis "
                         << state.getAxis();
    rank = 1;
    dim = cache.getNHeadKv();
  } else if (auto rs = dyn_cast<RecurrentStateType>(type)) {
    // Split by key heads (each with its tiled value heads and their conv channels).
    if (state.getAxis() != 0)
      return emitError() << "split state of a !tpc.recurrent_state must use axis 0 (key heads), got axis "
                         << state.getAxis();
    rank = 1;
    dim = rs.getNKeyHeads();
  } else {
    return emitError() << "split state on a value of type " << type
                       << ", which is neither a ranked tensor nor a !tpc.kv_cache";
  }
  if (state.getAxis() >= rank)
    return emitError() << "split axis " << state.getAxis() << " is out of range for " << type;
  if (ShapedType::isDynamic(dim))
    return success(); // the token dimension: sizes are checked at run time
  int64_t total = 0;
  for (int64_t size : state.getSizes())
    total += size; // no overflow: StateAttr::verify checked the sum
  if (total != dim)
    return emitError() << "split sizes sum to " << total << " but axis " << state.getAxis() << " of " << type
                       << " has " << dim;
  return success();
}

/// Checks one `tpc.placement` entry.
static LogicalResult verifyPlacement(Operation *op, Attribute attr) {
  auto s = dyn_cast<StringAttr>(attr);
  if (!s || (s.getValue() != "device" && s.getValue() != "host"))
    return op->emitOpError() << "tpc.placement must be \"device\" or \"host\", got " << attr;
  return success();
}

LogicalResult TpcDialect::verifyOperationAttribute(Operation *op, NamedAttribute attr) {
  StringRef name = attr.getName().getValue();
  if (name == kDevicesAttrName) {
    auto n = dyn_cast<IntegerAttr>(attr.getValue());
    if (!n || n.getInt() < 1)
      return op->emitOpError() << "tpc.devices must be a positive integer, got " << attr.getValue();
    return success();
  }
  if (name == kStateAttrName) {
    auto states = dyn_cast<ArrayAttr>(attr.getValue());
    if (!states || states.size() != op->getNumResults())
      return op->emitOpError() << "tpc.state must be an array of " << op->getNumResults()
                               << " #tpc.state attributes (one per result)";
    std::optional<int64_t> numDevices = getNumDevices(op);
    for (auto [i, a] : llvm::enumerate(states)) {
      auto state = dyn_cast<StateAttr>(a);
      if (!state)
        return op->emitOpError() << "tpc.state entry " << i << " is not a #tpc.state: " << a;
      auto emit = [&, i = i] { return op->emitOpError() << "tpc.state of result " << i << ": "; };
      if (failed(verifyStateForType(emit, state, op->getResult(i).getType(), numDevices)))
        return failure();
    }
    return success();
  }
  if (name == kOnDeviceAttrName) {
    auto d = dyn_cast<IntegerAttr>(attr.getValue());
    std::optional<int64_t> n = getNumDevices(op);
    if (!d || d.getInt() < 0 || (n && d.getInt() >= *n))
      return op->emitOpError() << "tpc.on_device must name a device in [0, tpc.devices), got " << attr.getValue();
    if (op->getNumOperands() == 0 || op->getNumResults() != 1 ||
        op->getOperand(0).getType() != op->getResult(0).getType())
      return op->emitOpError() << "tpc.on_device needs an op whose result has the type of operand 0 "
                                  "(the other devices forward that operand)";
    return success();
  }
  if (name == kLayerAttrName) {
    auto n = dyn_cast<IntegerAttr>(attr.getValue());
    auto s = dyn_cast<StringAttr>(attr.getValue());
    if ((n && n.getType().isInteger(64) && n.getInt() >= 0) || (s && s.getValue() == kLayerOutputHead))
      return success();
    return op->emitOpError() << "tpc.layer must be a block index (i64 >= 0) or \"" << kLayerOutputHead
                             << "\", got " << attr.getValue();
  }
  if (name == kPlacementAttrName) {
    if (auto list = dyn_cast<ArrayAttr>(attr.getValue())) {
      if (list.size() != op->getNumResults())
        return op->emitOpError() << "tpc.placement array must have one entry per result ("
                                 << op->getNumResults() << "), got " << list.size();
      for (Attribute a : list)
        if (failed(verifyPlacement(op, a)))
          return failure();
      return success();
    }
    return verifyPlacement(op, attr.getValue());
  }
  return success();
}

/// Checks a `tpc.state` on a function argument or result of type `type`.
static LogicalResult verifyFunctionState(Operation *op, NamedAttribute attr, Type type, StringRef what,
                                         unsigned index) {
  if (attr.getName().getValue() != TpcDialect::kStateAttrName)
    return success();
  auto state = dyn_cast<StateAttr>(attr.getValue());
  auto emit = [&] { return op->emitOpError() << "tpc.state of " << what << " " << index << ": "; };
  if (!state)
    return emit() << "expected a #tpc.state, got " << attr.getValue();
  return verifyStateForType(emit, state, type, getNumDevices(op));
}

LogicalResult TpcDialect::verifyRegionArgAttribute(Operation *op, unsigned regionIndex, unsigned argIndex,
                                                   NamedAttribute attr) {
  // Function declarations have no entry block: take the type from the signature.
  if (auto fn = dyn_cast<FunctionOpInterface>(op)) {
    if (argIndex >= fn.getArgumentTypes().size())
      return success();
    return verifyFunctionState(op, attr, fn.getArgumentTypes()[argIndex], "argument", argIndex);
  }
  Region &region = op->getRegion(regionIndex);
  if (region.empty() || argIndex >= region.getNumArguments())
    return success();
  return verifyFunctionState(op, attr, region.getArgument(argIndex).getType(), "argument", argIndex);
}

LogicalResult TpcDialect::verifyRegionResultAttribute(Operation *op, unsigned regionIndex,
                                                      unsigned resultIndex, NamedAttribute attr) {
  auto fn = dyn_cast<FunctionOpInterface>(op);
  if (!fn || resultIndex >= fn.getResultTypes().size())
    return success();
  return verifyFunctionState(op, attr, fn.getResultTypes()[resultIndex], "result", resultIndex);
}
