//===- MatmulReference.cpp - the float32 reference products -----------------===//
//
// matmul / matmulId with MatmulOptions::f32Reference: no activation format at all. Each unit dequantizes a
// few weight rows to f32 once (tpc::dequantizeRow, the same values every kernel's integer sums stand for)
// and dots them with every token's f32 input (dotF32), so the only roundings left are f32 accumulation's.
// What the quantized paths are measured against (`tpc run/perplexity --f32-reference`); slower, never the
// default. Arguments were validated by the caller (Matmul.cpp).
//===----------------------------------------------------------------------===//
#include "runtime/cpu/Matmul.h"

#include "runtime/cpu/VectorOps.h"
#include "runtime/ggml/Quant.h"

#include <algorithm>
#include <vector>

namespace tpc::rt::cpu {

namespace {
/// Weight rows dequantized per unit: 16 rows of a 2048-wide matrix are 128 KB of f32, within L2.
constexpr int64_t kRefRows = 16;
} // namespace

void matmulReference(const MatmulArgs &a, ThreadGroup &group) {
  if (a.m == 0 || a.n == 0)
    return;
  const uint8_t *w = static_cast<const uint8_t *>(a.w);
  const int64_t units = (a.n + kRefRows - 1) / kRefRows;
  group.parallelFor(units, [&](int64_t b, int64_t e, int) {
    std::vector<float> rows(static_cast<size_t>(kRefRows * a.k));
    for (int64_t u = b; u < e; ++u) {
      const int64_t r0 = u * kRefRows, r1 = std::min(a.n, r0 + kRefRows);
      for (int64_t r = r0; r < r1; ++r)
        dequantizeRow(a.wType, w + static_cast<size_t>(r) * a.wRowStride, rows.data() + (r - r0) * a.k, a.k);
      for (int64_t t = 0; t < a.m; ++t) {
        const float *x = a.x + static_cast<size_t>(t) * a.xRowStride;
        float *y = a.y + static_cast<size_t>(t) * a.yRowStride;
        for (int64_t r = r0; r < r1; ++r)
          y[r] = a.k ? dotF32(x, rows.data() + (r - r0) * a.k, a.k) : 0.0f;
      }
    }
  });
}

void matmulIdReference(const MatmulIdArgs &a, ThreadGroup &group) {
  if (a.count == 0 || a.n == 0)
    return;
  const uint8_t *w = static_cast<const uint8_t *>(a.w);
  // Units are (entry, row block): MoE reference runs are for precision checks, not speed.
  const int64_t blocks = (a.n + kRefRows - 1) / kRefRows;
  group.parallelFor(a.count * blocks, [&](int64_t b, int64_t e, int) {
    std::vector<float> row(static_cast<size_t>(a.k));
    for (int64_t u = b; u < e; ++u) {
      const int64_t i = u / blocks, r0 = (u % blocks) * kRefRows, r1 = std::min(a.n, r0 + kRefRows);
      const uint8_t *we = w + static_cast<size_t>(a.experts[i]) * a.wExpertStride;
      const float *x = a.x + static_cast<size_t>(a.xRows[i]) * a.xRowStride;
      float *y = a.y + static_cast<size_t>(a.yRows[i]) * a.yRowStride;
      for (int64_t r = r0; r < r1; ++r) {
        if (a.k == 0) {
          y[r] = 0.0f;
          continue;
        }
        dequantizeRow(a.wType, we + static_cast<size_t>(r) * a.wRowStride, row.data(), a.k);
        y[r] = dotF32(x, row.data(), a.k);
      }
    }
  });
}

} // namespace tpc::rt::cpu
