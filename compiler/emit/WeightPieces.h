//===- WeightPieces.h - a weight's device-local part as runs of GGUF rows -*- C++ -*-===//
//
// The plan emitter's weight slicing: which bytes of a GGUF tensor one device copies for its part of a split
// (whole rows of an outer axis, or parts of every row for a split of the row axis, per segment), as the
// plan's WeightPieces, merging runs that continue each other. A cut of the row axis must fall on quant-block
// boundaries; a device holding every segment whole (a group no block-aligned cut divides) copies whole rows.
//===----------------------------------------------------------------------===//
#ifndef TPC_COMPILER_EMIT_WEIGHTPIECES_H
#define TPC_COMPILER_EMIT_WEIGHTPIECES_H

#include "runtime/ggml/GGMLTypes.h"
#include "runtime/plan/PlanFormat.h"

#include "llvm/ADT/ArrayRef.h"

#include <cstdint>
#include <optional>
#include <vector>

namespace mlir::tpc {

/// The device-local runs of a weight split along `axis` (one segment of `segments` equal parts each):
/// device-local rows of `shape` (outermost first, last dim = the ggml row), start/size within a segment.
struct SplitSel {
  int64_t axis = -1; ///< -1: the whole tensor
  int64_t start = 0; ///< first element of the device's part within each segment
  int64_t size = 0;  ///< elements per segment
  int64_t segments = 1;
};

/// WeightPieces copying the selected part of a tensor of global `shape` stored at `fileOffset`. Fails
/// (nullopt) when a split of the row axis is not on quant-block boundaries.
std::optional<std::vector<::tpc::rt::WeightPiece>>
weightPieces(::tpc::GGMLType type, llvm::ArrayRef<int64_t> shape, uint64_t fileOffset, const SplitSel &sel);

} // namespace mlir::tpc

#endif // TPC_COMPILER_EMIT_WEIGHTPIECES_H
