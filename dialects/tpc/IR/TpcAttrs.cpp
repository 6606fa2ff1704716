//===- TpcAttrs.cpp - tpc split-state attribute -------------------*- C++ -*-===//
//
// Parsing, printing and internal verification of `#tpc.state<...>`, and the generated enum code.
// Checks against the value a state is attached to live in TpcDialect.cpp (verifyStateForType), since
// the attribute alone knows neither the shape nor the number of devices.
//===----------------------------------------------------------------------===//

#include "dialects/tpc/IR/TpcOps.h"

#include "mlir/IR/Builders.h"
#include "mlir/IR/DialectImplementation.h"
#include "llvm/ADT/TypeSwitch.h"
#include "llvm/Support/MathExtras.h"

using namespace mlir;
using namespace mlir::tpc;

#include "dialects/tpc/IR/TpcEnums.cpp.inc"

#define GET_ATTRDEF_CLASSES
#include "dialects/tpc/IR/TpcAttrs.cpp.inc"

void TpcDialect::registerAttributes() {
  addAttributes<
#define GET_ATTRDEF_LIST
#include "dialects/tpc/IR/TpcAttrs.cpp.inc"
      >();
}

StateAttr StateAttr::getMirrored(MLIRContext *ctx) { return get(ctx, StateKind::mirrored); }

StateAttr StateAttr::getPartial(MLIRContext *ctx) { return get(ctx, StateKind::partial); }

StateAttr StateAttr::getLocal(MLIRContext *ctx, int64_t device) {
  return get(ctx, StateKind::local, 0, {}, 1, 1, device);
}

StateAttr StateAttr::getSplit(MLIRContext *ctx, int64_t axis, ArrayRef<int64_t> sizes, int64_t granule,
                              int64_t segments) {
  return get(ctx, StateKind::split, axis, sizes, granule, segments, 0);
}

StateAttr StateAttr::getRouted(MLIRContext *ctx, ArrayRef<int64_t> sizes) {
  return get(ctx, StateKind::routed, 0, sizes, 1, 1, 0);
}

LogicalResult StateAttr::verify(function_ref<InFlightDiagnostic()> emitError, StateKind kind, int64_t axis,
                                ArrayRef<int64_t> sizes, int64_t granule, int64_t segments, int64_t device) {
  if (kind == StateKind::routed) {
    if (axis != 0 || granule != 1 || segments != 1 || device != 0)
      return emitError() << "routed state takes only sizes (experts per device)";
    if (sizes.empty())
      return emitError() << "routed state: sizes must list the experts of each device, got none";
    for (auto [d, size] : llvm::enumerate(sizes))
      if (size < 0)
        return emitError() << "routed state: experts of device " << d << " must be >= 0, got " << size;
    return success();
  }
  if (kind != StateKind::split) {
    if (axis != 0 || !sizes.empty() || granule != 1 || segments != 1)
      return emitError() << "state '" << stringifyStateKind(kind)
                         << "' takes no axis, sizes, granule or segments";
    if (kind != StateKind::local && device != 0)
      return emitError() << "state '" << stringifyStateKind(kind) << "' takes no device";
    if (device < 0)
      return emitError() << "local state: device must be >= 0, got " << device;
    return success();
  }
  if (device != 0)
    return emitError() << "split state takes no device";
  if (axis < 0)
    return emitError() << "split state: axis must be >= 0, got " << axis;
  if (sizes.empty())
    return emitError() << "split state: sizes must list one size per device, got none";
  if (granule < 1)
    return emitError() << "split state: granule must be >= 1, got " << granule;
  if (segments < 1)
    return emitError() << "split state: segments must be >= 1, got " << segments;
  int64_t unit = 0;
  if (llvm::MulOverflow(granule, segments, unit))
    return emitError() << "split state: granule " << granule << " x segments " << segments << " overflows";
  int64_t total = 0;
  for (auto [d, size] : llvm::enumerate(sizes)) {
    if (size < 0)
      return emitError() << "split state: size of device " << d << " must be >= 0, got " << size;
    if (size % unit != 0)
      return emitError() << "split state: size " << size << " of device " << d
                         << " is not a multiple of granule " << granule << " x segments " << segments;
    if (llvm::AddOverflow(total, size, total))
      return emitError() << "split state: the sum of sizes overflows";
  }
  return success();
}

/// Parses `mirrored`, `partial`, `local device = D`, `routed sizes = [...]` or
/// `split axis = A, sizes = [...]` with optional `, granule = G` and `, segments = S`, between `<`
/// and `>`.
Attribute StateAttr::parse(AsmParser &p, Type) {
  MLIRContext *ctx = p.getContext();
  SMLoc loc = p.getCurrentLocation();
  auto emitError = [&] { return p.emitError(loc); };
  StringRef kindName;
  if (p.parseLess() || p.parseKeyword(&kindName))
    return {};
  std::optional<StateKind> kind = symbolizeStateKind(kindName);
  if (!kind) {
    p.emitError(loc) << "unknown split state '" << kindName
                     << "', expected mirrored, split, partial, local or routed";
    return {};
  }
  int64_t axis = 0, granule = 1, segments = 1, device = 0;
  SmallVector<int64_t> sizes;
  switch (*kind) {
  case StateKind::mirrored:
  case StateKind::partial:
    break;
  case StateKind::local:
    if (p.parseKeyword("device") || p.parseEqual() || p.parseInteger(device))
      return {};
    break;
  case StateKind::routed:
    if (p.parseKeyword("sizes") || p.parseEqual() ||
        p.parseCommaSeparatedList(AsmParser::Delimiter::Square,
                                  [&] { return p.parseInteger(sizes.emplace_back()); }))
      return {};
    break;
  case StateKind::split: {
    if (p.parseKeyword("axis") || p.parseEqual() || p.parseInteger(axis) || p.parseComma() ||
        p.parseKeyword("sizes") || p.parseEqual() ||
        p.parseCommaSeparatedList(AsmParser::Delimiter::Square,
                                  [&] { return p.parseInteger(sizes.emplace_back()); }))
      return {};
    // Optional `granule = G` and `segments = S`, each at most once, in either order.
    bool seenGranule = false, seenSegments = false;
    while (succeeded(p.parseOptionalComma())) {
      SMLoc keyLoc = p.getCurrentLocation();
      StringRef key;
      if (p.parseKeyword(&key))
        return {};
      bool *seen = key == "granule" ? &seenGranule : key == "segments" ? &seenSegments : nullptr;
      if (!seen || *seen) {
        p.emitError(keyLoc) << (seen ? "duplicate '" : "unexpected '") << key
                            << "' in split state, expected granule or segments (once each)";
        return {};
      }
      *seen = true;
      if (p.parseEqual() || p.parseInteger(key == "granule" ? granule : segments))
        return {};
    }
    break;
  }
  }
  if (p.parseGreater())
    return {};
  return getChecked(emitError, ctx, *kind, axis, sizes, granule, segments, device);
}

void StateAttr::print(AsmPrinter &p) const {
  p << '<' << stringifyStateKind(getKind());
  if (isLocal())
    p << " device = " << getDevice();
  if (isRouted()) {
    p << " sizes = [";
    llvm::interleaveComma(getSizes(), p);
    p << ']';
  }
  if (isSplit()) {
    p << " axis = " << getAxis() << ", sizes = [";
    llvm::interleaveComma(getSizes(), p);
    p << "], granule = " << getGranule() << ", segments = " << getSegments();
  }
  p << '>';
}
