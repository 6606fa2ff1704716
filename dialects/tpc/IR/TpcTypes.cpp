//===- TpcTypes.cpp - tpc dialect types ---------------------------*- C++ -*-===//
//
// `!tpc.kv_cache<HkvxDkxDv>`: parsing as a dimension list, printing and verification (positive sizes).
//===----------------------------------------------------------------------===//

#include "dialects/tpc/IR/TpcOps.h"

#include "mlir/IR/Builders.h"
#include "mlir/IR/DialectImplementation.h"
#include "llvm/ADT/TypeSwitch.h"

using namespace mlir;
using namespace mlir::tpc;

#define GET_TYPEDEF_CLASSES
#include "dialects/tpc/IR/TpcOpsTypes.cpp.inc"

void TpcDialect::registerTypes() {
  addTypes<
#define GET_TYPEDEF_LIST
#include "dialects/tpc/IR/TpcOpsTypes.cpp.inc"
      >();
}

LogicalResult KvCacheType::verify(function_ref<InFlightDiagnostic()> emitError, int64_t nHeadKv,
                                  int64_t headDimK, int64_t headDimV) {
  if (nHeadKv < 1 || headDimK < 1 || headDimV < 1)
    return emitError() << "!tpc.kv_cache sizes must be positive, got " << nHeadKv << "x" << headDimK << "x"
                       << headDimV;
  return success();
}

Type KvCacheType::parse(AsmParser &p) {
  SMLoc loc = p.getCurrentLocation();
  SmallVector<int64_t, 3> dims;
  if (p.parseLess() || p.parseDimensionList(dims, /*allowDynamic=*/false, /*withTrailingX=*/false) ||
      p.parseGreater())
    return {};
  if (dims.size() != 3) {
    p.emitError(loc) << "!tpc.kv_cache expects 3 sizes HkvxDkxDv, got " << dims.size();
    return {};
  }
  return getChecked([&] { return p.emitError(loc); }, p.getContext(), dims[0], dims[1], dims[2]);
}

void KvCacheType::print(AsmPrinter &p) const {
  p << '<' << getNHeadKv() << 'x' << getHeadDimK() << 'x' << getHeadDimV() << '>';
}
