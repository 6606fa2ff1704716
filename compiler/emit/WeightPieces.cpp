//===- WeightPieces.cpp - a weight's device-local part as runs of GGUF rows --===//
//
// See WeightPieces.h.
//===----------------------------------------------------------------------===//
#include "compiler/emit/WeightPieces.h"

namespace mlir::tpc {

namespace rt = ::tpc::rt;
using ::tpc::GGMLType;

std::optional<std::vector<rt::WeightPiece>> weightPieces(GGMLType type, llvm::ArrayRef<int64_t> shape,
                                                         uint64_t fileOffset, const SplitSel &sel) {
  const int64_t rank = shape.size();
  const uint64_t rb = *::tpc::ggmlRowBytes(type, shape.back());
  int64_t rows = 1;
  for (int64_t i = 0; i + 1 < rank; ++i)
    rows *= shape[i];
  std::vector<rt::WeightPiece> pieces;
  auto add = [&](rt::WeightPiece p) {
    if (p.rows == 0 || p.rowBytes == 0)
      return;
    // Merge with the previous run when it continues it (e.g. all segments of one outer index).
    if (!pieces.empty()) {
      rt::WeightPiece &q = pieces.back();
      if (q.rowStride == p.rowStride && q.rowBytes == p.rowBytes && q.rowBytes == q.rowStride &&
          q.fileOffset + q.rows * q.rowStride == p.fileOffset) {
        q.rows += p.rows;
        return;
      }
    }
    pieces.push_back(p);
  };
  if (sel.axis < 0) {
    add({fileOffset, rb, rb, uint64_t(rows)});
    return pieces;
  }
  const int64_t segLen = shape[sel.axis] / sel.segments;
  if (sel.size == 0)
    return pieces; // an empty share
  if (sel.size == segLen) {
    // The whole of every segment (a group that no block-aligned cut divides, all on one device).
    add({fileOffset, rb, rb, uint64_t(rows)});
    return pieces;
  }
  if (sel.axis == rank - 1) {
    // Part of every row: skip and length in bytes must be whole quant blocks.
    std::optional<uint64_t> part = ::tpc::ggmlRowBytes(type, sel.size);
    if (!part)
      return std::nullopt;
    std::vector<uint64_t> skips;
    for (int64_t s = 0; s < sel.segments; ++s) {
      std::optional<uint64_t> skip = ::tpc::ggmlRowBytes(type, s * segLen + sel.start);
      if (!skip)
        return std::nullopt;
      skips.push_back(*skip);
    }
    if (sel.segments == 1) {
      add({fileOffset + skips[0], rb, *part, uint64_t(rows)});
      return pieces;
    }
    // Each local row is the concatenation of its part of every segment: one piece per row and segment.
    for (int64_t r = 0; r < rows; ++r)
      for (uint64_t skip : skips)
        pieces.push_back({fileOffset + r * rb + skip, rb, *part, 1});
    return pieces;
  }
  // An outer axis: for every index of the axes before it, `size` consecutive indices of the axis (per
  // segment) cover size * inner consecutive rows.
  int64_t outer = 1, inner = 1;
  for (int64_t i = 0; i < sel.axis; ++i)
    outer *= shape[i];
  for (int64_t i = sel.axis + 1; i + 1 < rank; ++i)
    inner *= shape[i];
  for (int64_t o = 0; o < outer; ++o)
    for (int64_t s = 0; s < sel.segments; ++s) {
      int64_t firstRow = (o * shape[sel.axis] + s * segLen + sel.start) * inner;
      add({fileOffset + firstRow * rb, rb, rb, uint64_t(sel.size * inner)});
    }
  return pieces;
}

} // namespace mlir::tpc
