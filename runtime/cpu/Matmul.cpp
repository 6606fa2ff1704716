//===- Matmul.cpp - quantized matrix multiplication on the CPU -------------===//
//
// Shared core of matmul and matmulId: validate, quantize the selected activation rows into the group's
// shared scratch (parallel over rows), then run the dot kernels over (weight row, token) pairs.
//===----------------------------------------------------------------------===//
#include "runtime/cpu/Matmul.h"

#include "runtime/cpu/quant/Quant.h"

#include <algorithm>
#include <stdexcept>
#include <string>
#include <vector>

namespace tpc::rt::cpu {
namespace {

/// Tokens at or below which the decode split (rows of W only) is used.
constexpr int64_t kDecodeTokens = 4;
/// Prefill tile: weight rows x tokens. 16 rows of a 4096-wide Q4_0 matrix are 37 KB (L2), one token's
/// quantized row is 4.3 KB (L1).
constexpr int64_t kRowTile = 16;
constexpr int64_t kTokenTile = 64; // a multiple of 4 (four-token kernels)

struct Core {
  const void *w;
  GGMLType wType;
  int64_t n, k;
  size_t wRowStride;
  const float *x;
  size_t xRowStride;
  const int32_t *xRows; // nullptr: identity
  float *y;
  size_t yRowStride;
  const int32_t *yRows; // nullptr: identity
  int64_t m;
};

[[noreturn]] void fail(const char *op, const std::string &msg) {
  throw std::invalid_argument(std::string(op) + ": " + msg);
}

void validate(const char *op, const Core &c) {
  if (!supportsDequantize(c.wType))
    fail(op, std::string("weight type ") + ggmlTypeName(c.wType) +
                 " is not supported by the CPU backend (supported: f32, f16, bf16, q4_0, q4_1, q5_0, q5_1, "
                 "q8_0, q2_K..q8_K, iq4_nl, mxfp4)");
  if (c.n < 0 || c.m < 0 || c.k < 0)
    fail(op,
         "bad shape n=" + std::to_string(c.n) + " k=" + std::to_string(c.k) + " m=" + std::to_string(c.m));
  std::optional<uint64_t> rowBytes = ggmlRowBytes(c.wType, static_cast<uint64_t>(c.k));
  if (!rowBytes)
    fail(op, "row length k=" + std::to_string(c.k) + " is not a multiple of the " + ggmlTypeName(c.wType) +
                 " block size " + std::to_string(ggmlTypeInfo(c.wType).blockElems));
  if (c.n > 1 && c.wRowStride < *rowBytes)
    fail(op, "weight row stride " + std::to_string(c.wRowStride) + " is smaller than a row (" +
                 std::to_string(*rowBytes) + " bytes)");
  if (c.m > 0 && c.n > 0 && (!c.y || (c.k > 0 && (!c.w || !c.x))))
    fail(op, "null weight, input or output pointer");
  // With index arrays any row may be used, so the strides must hold a whole row whatever m is.
  if ((c.m > 1 || c.xRows) && c.xRowStride < static_cast<size_t>(c.k))
    fail(op,
         "input row stride " + std::to_string(c.xRowStride) + " is smaller than k=" + std::to_string(c.k));
  if ((c.m > 1 || c.yRows) && c.yRowStride < static_cast<size_t>(c.n))
    fail(op,
         "output row stride " + std::to_string(c.yRowStride) + " is smaller than n=" + std::to_string(c.n));
}

/// Converts rows xRows[i] (i when xRows is null) of x, i < m, into slot i of the group's shared scratch,
/// as the dot kernels of weight type t take them (nullptr when they take the f32 rows); `bytes` gets the
/// size of one converted row.
uint8_t *convertActivations(const char *op, GGMLType t, int64_t k, const float *x, size_t xRowStride,
                            const int32_t *xRows, int64_t m, ThreadGroup &group, size_t &bytes) {
  bytes = static_cast<size_t>(activationRowBytes(t, k));
  GGMLType actType = vecDotType(t);
  if (actType == GGMLType::F32)
    return nullptr;
  size_t scratchBytes = 0;
  if (__builtin_mul_overflow(bytes, static_cast<size_t>(m), &scratchBytes))
    fail(op, "activation scratch for m=" + std::to_string(m) + " rows overflows");
  QuantizeFn quantize = activationQuantizer(actType, activeIsa());
  uint8_t *act = static_cast<uint8_t *>(group.sharedScratch(scratchBytes));
  auto rows = [&](int64_t b, int64_t e, int) {
    for (int64_t i = b; i < e; ++i) {
      const float *src = x + static_cast<size_t>(xRows ? xRows[i] : i) * xRowStride;
      quantize(src, act + bytes * static_cast<size_t>(i), k);
      completeActivationRow(t, act + bytes * static_cast<size_t>(i), k);
    }
  };
  if (m == 1)
    rows(0, 1, 0); // one row: not worth a hand-off
  else
    group.parallelFor(m, rows);
  return act;
}

void run(const char *op, const Core &c, ThreadGroup &group) {
  validate(op, c);
  if (c.m == 0 || c.n == 0)
    return;
  if (c.k == 0) {
    // An empty reduction (a device's share of a split K can be 0): the partial sum is zero.
    for (int64_t i = 0; i < c.m; ++i) {
      float *yr = c.y + static_cast<size_t>(c.yRows ? c.yRows[i] : i) * c.yRowStride;
      std::fill(yr, yr + c.n, 0.0f);
    }
    return;
  }
  VecDotFn dot = vecDotKernel(c.wType, activeIsa());
  VecDot4Fn dot4 = vecDot4Kernel(c.wType, activeIsa());
  const float *const x = c.x;
  auto xRow = [&](int64_t i) { return x + static_cast<size_t>(c.xRows ? c.xRows[i] : i) * c.xRowStride; };
  auto yRow = [&](int64_t i) { return c.y + static_cast<size_t>(c.yRows ? c.yRows[i] : i) * c.yRowStride; };

  // Activation rows in the dot kernel's type: the f32 rows themselves, or quantized copies.
  size_t actBytes = 0;
  const uint8_t *act = convertActivations(op, c.wType, c.k, c.x, c.xRowStride, c.xRows, c.m, group, actBytes);
  auto actRow = [&](int64_t i) -> const void * {
    return act ? static_cast<const void *>(act + actBytes * static_cast<size_t>(i)) : xRow(i);
  };
  const uint8_t *w = static_cast<const uint8_t *>(c.w);

  if (c.m <= kDecodeTokens) {
    // Decode: split W rows; each weight row is streamed once and dotted with every token.
    group.parallelFor(c.n, [&](int64_t b, int64_t e, int) {
      for (int64_t r = b; r < e; ++r) {
        const uint8_t *wr = w + static_cast<size_t>(r) * c.wRowStride;
        if (dot4 && c.m == 4) {
          const void *a[4] = {actRow(0), actRow(1), actRow(2), actRow(3)};
          float out[4];
          dot4(c.k, wr, a, out);
          for (int t = 0; t < 4; ++t)
            yRow(t)[r] = out[t];
          continue;
        }
        for (int64_t t = 0; t < c.m; ++t)
          yRow(t)[r] = dot(c.k, wr, actRow(t));
      }
    });
    return;
  }

  // Prefill: tiles of kRowTile rows x kTokenTile tokens, row-tile major so a thread's consecutive tiles
  // reuse the same weight rows from cache.
  int64_t rowTiles = (c.n + kRowTile - 1) / kRowTile;
  int64_t tokTiles = (c.m + kTokenTile - 1) / kTokenTile;
  group.parallelFor(rowTiles * tokTiles, [&](int64_t b, int64_t e, int) {
    for (int64_t tile = b; tile < e; ++tile) {
      int64_t r0 = (tile / tokTiles) * kRowTile, t0 = (tile % tokTiles) * kTokenTile;
      int64_t r1 = std::min(c.n, r0 + kRowTile), t1 = std::min(c.m, t0 + kTokenTile);
      int64_t t = t0;
      if (dot4) {
        // Four tokens per weight-row pass: each weight block is unpacked once for all four.
        for (; t + 4 <= t1; t += 4) {
          const void *a[4] = {actRow(t), actRow(t + 1), actRow(t + 2), actRow(t + 3)};
          float *yr[4] = {yRow(t), yRow(t + 1), yRow(t + 2), yRow(t + 3)};
          float out[4];
          for (int64_t r = r0; r < r1; ++r) {
            dot4(c.k, w + static_cast<size_t>(r) * c.wRowStride, a, out);
            for (int j = 0; j < 4; ++j)
              yr[j][r] = out[j];
          }
        }
      }
      for (; t < t1; ++t) {
        const void *a = actRow(t);
        float *yr = yRow(t);
        for (int64_t r = r0; r < r1; ++r)
          yr[r] = dot(c.k, w + static_cast<size_t>(r) * c.wRowStride, a);
      }
    }
  });
}

} // namespace

void matmulIdGrouped(const MatmulIdGroupedArgs &a, ThreadGroup &group) {
  const char *op = "matmul_id";
  if (a.count > 0 && (!a.experts || !a.xRows || !a.yRows))
    fail(op, "null expert or row index array");
  for (int64_t i = 0; i < a.count; ++i) {
    if (a.experts[i] < 0 || a.experts[i] >= a.nExperts)
      fail(op, "expert " + std::to_string(a.experts[i]) + " at position " + std::to_string(i) +
                   " is out of range (" + std::to_string(a.nExperts) + " experts)");
    if (a.xRows[i] < 0 || a.xRows[i] >= a.xRowCount || a.yRows[i] < 0)
      fail(op, "row index out of range at position " + std::to_string(i));
  }
  Core c{a.w,          a.wType, a.n, a.k,          a.wRowStride, a.x,
         a.xRowStride, a.xRows, a.y, a.yRowStride, a.yRows,      a.count};
  validate(op, c);
  if (a.count == 0 || a.n == 0)
    return;
  if (a.k == 0) {
    for (int64_t i = 0; i < a.count; ++i)
      std::fill(a.y + static_cast<size_t>(a.yRows[i]) * a.yRowStride,
                a.y + static_cast<size_t>(a.yRows[i]) * a.yRowStride + a.n, 0.0f);
    return;
  }
  // Runs of entries with the same expert; one work unit = one weight row of one run's expert, dotted with
  // every entry of the run (the row is read once).
  std::vector<int64_t> runs = {0};
  for (int64_t i = 1; i < a.count; ++i)
    if (a.experts[i] != a.experts[i - 1])
      runs.push_back(i);
  runs.push_back(a.count);
  size_t offset = 0;
  for (size_t r = 0; r + 1 < runs.size(); ++r)
    if (__builtin_mul_overflow(static_cast<size_t>(a.experts[runs[r]]), a.wExpertStride, &offset))
      fail(op, "expert offset overflows");
  size_t actBytes = 0;
  const uint8_t *act =
      convertActivations(op, a.wType, a.k, a.x, a.xRowStride, nullptr, a.xRowCount, group, actBytes);
  VecDotFn dot = vecDotKernel(a.wType, activeIsa());
  const uint8_t *w = static_cast<const uint8_t *>(a.w);
  const int64_t nRuns = static_cast<int64_t>(runs.size()) - 1;
  group.parallelFor(nRuns * a.n, [&](int64_t b, int64_t e, int) {
    for (int64_t u = b; u < e; ++u) {
      const int64_t run = u / a.n, row = u % a.n;
      const uint8_t *wr = w + static_cast<size_t>(a.experts[runs[run]]) * a.wExpertStride +
                          static_cast<size_t>(row) * a.wRowStride;
      for (int64_t i = runs[run]; i < runs[run + 1]; ++i) {
        const void *ar =
            act ? static_cast<const void *>(act + actBytes * static_cast<size_t>(a.xRows[i]))
                : static_cast<const void *>(a.x + static_cast<size_t>(a.xRows[i]) * a.xRowStride);
        a.y[static_cast<size_t>(a.yRows[i]) * a.yRowStride + static_cast<size_t>(row)] = dot(a.k, wr, ar);
      }
    }
  });
}

void matmul(const MatmulArgs &a, ThreadGroup &group) {
  Core c{a.w, a.wType, a.n, a.k, a.wRowStride, a.x, a.xRowStride, nullptr, a.y, a.yRowStride, nullptr, a.m};
  run("matmul", c, group);
}

void matmulId(const MatmulIdArgs &a, ThreadGroup &group) {
  if (a.expert < 0 || a.expert >= a.nExperts)
    fail("matmul_id", "expert " + std::to_string(a.expert) + " is out of range (" +
                          std::to_string(a.nExperts) + " experts)");
  if (a.count > 0 && (!a.xRows || !a.yRows))
    fail("matmul_id", "null row index array");
  for (int64_t i = 0; i < a.count; ++i)
    if (a.xRows[i] < 0 || a.yRows[i] < 0)
      fail("matmul_id", "negative row index at position " + std::to_string(i));
  size_t offset = 0;
  if (__builtin_mul_overflow(static_cast<size_t>(a.expert), a.wExpertStride, &offset))
    fail("matmul_id", "expert offset overflows");
  const uint8_t *w = static_cast<const uint8_t *>(a.w) + offset;
  Core c{w, a.wType, a.n, a.k, a.wRowStride, a.x, a.xRowStride, a.xRows, a.y, a.yRowStride, a.yRows, a.count};
  run("matmul_id", c, group);
}

} // namespace tpc::rt::cpu
