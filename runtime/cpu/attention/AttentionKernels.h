//===- AttentionKernels.h - per-ISA attention tile kernels (internal) -*- C++ -*-===//
//
// What Attention.cpp's driver calls per work item: one tile (tokens of one sequence, the query heads of
// one KV head) over one segment of key positions, built once per ISA from AttendItem.inc. The driver owns
// tiling, segments, threads and the merge of segments; the item kernel owns the arithmetic.
//===----------------------------------------------------------------------===//
#ifndef TPC_RUNTIME_CPU_ATTENTION_ATTENTIONKERNELS_H
#define TPC_RUNTIME_CPU_ATTENTION_ATTENTIONKERNELS_H

#include "runtime/cpu/Attention.h"

#include <algorithm>
#include <type_traits>
#include <cmath>
#include <vector>

namespace tpc::rt::cpu::attn {

/// Keys per block: a block's K and V rows (f32, up to 2 x 64 x 256 floats) stay in L1/L2 while every row
/// of the tile reads them.
inline constexpr int64_t kKeyBlock = 64;

/// Cache cells ahead of the one being converted whose K and V rows an item prefetches.
inline constexpr int64_t kPrefetch = 16;

/// One work item (see the file comment).
struct Item {
  int64_t first = 0, count = 0; ///< tokens [first, first + count): one sequence, consecutive positions
  int64_t kh = 0;               ///< KV head; its query heads are kh * group .. kh * group + group - 1
  int64_t from = 0, to = 0;     ///< key positions [from, to] this item reads
  /// Prefetch K/V rows of this KV head up to this position (the tile's last): past `to`, the next segment,
  /// which the thread usually takes next, starts in cache too.
  int64_t prefetchTo = 0;
  /// Output rows: row (r, g) (token first + r, head kh * group + g) at out + r * rowStride + g * dv.
  float *out = nullptr;
  int64_t rowStride = 0;
  /// Finalize: apply sinks and divide by the softmax sum into `out`. Else leave `out` unnormalised and
  /// write each row's running max and sum to ml[2 * (r * group + g) + {0, 1}] (a segment to merge).
  bool finalize = true;
  float *ml = nullptr;
};

/// Query rows (tokens x heads of a group) per tile, when a group has fewer heads.
inline constexpr int64_t kTileRows = 64;

/// Floats of per-thread scratch one item needs: a block of K and V rows, the scores of two rows, and each
/// query row's running max and sum.
inline int64_t itemScratchFloats(const AttentionArgs &a) {
  return kKeyBlock * (a.dk + a.dv + 2) + 2 * std::max<int64_t>(kTileRows, a.hq);
}

/// Runs item `it` of call `a` with `scratch` (itemScratchFloats floats).
using AttendFn = void (*)(const AttentionArgs &a, const Item &it, float *scratch);
/// x[i] = exp(x[i] - shift), returning the sum.
using ExpShiftSumFn = float (*)(float *x, int64_t n, float shift);

struct Kernels {
  AttendFn attend;
  ExpShiftSumFn expShiftSum;
};
Kernels scalarKernels();
Kernels avx2Kernels();
Kernels avx512Kernels();

/// Bounds b[0] = 0 <= b[1] <= ... <= b[parts] = cost.size() cutting items of the given costs into `parts`
/// contiguous runs of about equal cost (each boundary at the item edge nearest its share of the total).
std::vector<size_t> balancedChunks(const std::vector<int64_t> &cost, int parts);

/// The sinks and normalisation of one finished row: out = out / l, with sink s joining the sum (as a
/// logit whose value is 0) after rescaling to the larger of m and s.
inline void finishRow(float *out, int64_t dv, float m, float l, const float *sink) {
  float scale = 1;
  if (sink) {
    if (*sink > m) {
      const float c = std::exp(m - *sink);
      l = l * c + 1.0f;
      scale = c;
    } else {
      l += std::exp(*sink - m);
    }
  }
  const float inv = l > 0 ? scale / l : 0.0f;
  for (int64_t i = 0; i < dv; ++i)
    out[i] *= inv;
}

} // namespace tpc::rt::cpu::attn

#endif // TPC_RUNTIME_CPU_ATTENTION_ATTENTIONKERNELS_H
