//===- Attention.h - flash-style attention over the KV cache (CPU) -*- C++ -*-===//
//
// The CPU attention kernel: every token of a call attends over the cache cells of its own sequence
// (cell = seq * ctx + pos % ctx, so a sliding-window layer's ring and a full cache are indexed alike), at
// positions p' <= pos and, with a window, pos - p' < window. The call's own K/V rows must already be in
// the cache (the op entry appends them first).
//
// Flash style: tokens are cut into tiles (a run of consecutive tokens of one sequence at consecutive
// positions, their query heads of one KV head together: GQA/MQA read each K/V row once per group), keys
// are read in blocks of 64 positions, converted to f32 once per block (f16 by F16C; q8_0 / q4_0 caches
// dequantized in registers, see below), and each query row keeps
// an online softmax (running max, sum and unnormalised output), so no score matrix is stored. A key block
// no row of the tile can see (outside every row's window, or past the causal limit) is skipped whole.
// For calls of a few tokens (decode), each key range is cut at multiples of a length that depends on the
// range alone (64 positions up to a range of 4095) into segments that run in parallel and are merged
// (flash decoding); threads take contiguous runs of items of about equal cost. Key blocks and segments
// sit at fixed positions and the kernels' arithmetic per key does not depend on which keys are processed
// together, so a row's result depends on the row alone: not on the thread count, nor on the query heads
// a device holds (a split plan gives each head the bits one device gives it).
//
// Kernels per ISA (scalar, AVX2 + FMA + F16C, AVX-512), chosen by activeIsa() (TPC_CPU_ISA lowers it): dot
// products of 4 keys at a time, a vectorised exp (Cephes-style range reduction and polynomial, within 2
// ulp of std::exp), fused multiply-adds for the weighted sum. The ISAs therefore differ in rounding
// (within 1e-5 of a double-precision reference on unit-scale inputs; test/runtime/cpu/AttentionTest.cpp).
//
// Quantized caches (q8_0, q4_0; `tpc compile -ctk/-ctv`) are read directly: each K/V row a block's keys
// need is dequantized into the block's f32 rows (int8 or nibbles widened, times the block's f16 scale,
// 8 or 16 lanes at a time), then scored exactly as an f16 cache is. The reference engine instead
// quantizes the query to q8_0 for an integer Q·K; here the conversion is already paid once per key
// block and shared by every query row of the tile (the GQA group times the tile's tokens), so integer
// dot products (VNNI) would save little in decode (a tile is one token) and would add the query's
// rounding to every score. The cost per key is the same order as F16C's, and reading a q8_0 row moves
// 53% of an f16 row's bytes (q4_0: 28%), which is what decode at a long context waits on.
//
// Usage:
//   AttentionArgs a;  a.q = q; a.y = y; a.t = T; a.hq = 8; a.hkv = 2; a.dk = a.dv = 64; a.pos = pos;
//   a.seq = seq; a.k = kCache; a.v = vCache; a.typeK = a.typeV = GGMLType::Q8_0; a.ctx = cellsPerSequence;
//   ... flashAttention(a, tg);
//===----------------------------------------------------------------------===//
#ifndef TPC_RUNTIME_CPU_ATTENTION_H
#define TPC_RUNTIME_CPU_ATTENTION_H

#include "runtime/cpu/ThreadGroup.h"
#include "runtime/cpu/quant/Quant.h"
#include "runtime/plan/PlanFormat.h"

#include <cstdint>

namespace tpc::rt::cpu {

/// One attention call on host memory (see the file comment).
struct AttentionArgs {
  const float *q = nullptr; ///< [t, hq, dk]
  float *y = nullptr;       ///< [t, hq, dv]
  int64_t t = 0, hq = 0, hkv = 0, dk = 0, dv = 0;
  const int32_t *pos = nullptr;          ///< position of each token
  const int32_t *seq = nullptr;          ///< sequence of each token (null: every token in sequence 0)
  const void *k = nullptr, *v = nullptr; ///< the cache: [cells, hkv] rows of dk / dv values
  /// Storage of each half: F16, F32, Q8_0 or Q4_0 (a head's row is kvRowBytes(type, d) bytes; quantized
  /// rows are d / 32 blocks).
  GGMLType typeK = GGMLType::F16, typeV = GGMLType::F16;
  int64_t ctx = 0;                       ///< positions per sequence (the ring size of a windowed cache)
  int64_t window = 0;                    ///< 0: every earlier position; else pos - p' < window
  float scale = 1, softcap = 0;          ///< score = softcap * tanh(scale * q.k / softcap) when softcap > 0
  const float *sinks = nullptr;          ///< [hq] extra logits in each softmax's denominator, or null
  /// The cache holds `cacheHeads` KV heads per cell (0: hkv) of which this call reads kvHead0.. kvHead0 +
  /// hkv - 1: a device holding some query heads of a model whose KV heads are mirrored on every device.
  int64_t cacheHeads = 0, kvHead0 = 0;
};

/// Attention of every token of `a` over the cache, on `tg`, with the kernels built for `isa` (the best
/// available at or below it).
void flashAttention(const AttentionArgs &a, ThreadGroup &tg, Isa isa = activeIsa());

/// x[i] = exp(x[i] - shift) for i < n, returning the sum of the results (the softmax's inner loop), with
/// the kernel for `isa`; exposed for tests of the vectorised exp.
float expShiftSum(float *x, int64_t n, float shift, Isa isa);

} // namespace tpc::rt::cpu

#endif // TPC_RUNTIME_CPU_ATTENTION_H
