//===- Matmul.h - quantized matrix multiplication on the CPU -----*- C++ -*-===//
//
// y[m, n] = x[m, k] . W[n, k]^T for W of any supported ggml type (rows of W are GGUF tensor rows). As in
// ggml's CPU backend, x is first quantized (once per call) to W's activation type (Quant.h vecDotType) and
// completed with per-row sums where W's kernels use them (completeActivationRow), in scratch memory owned
// by the thread group; then integer block dot products run per (row, token) pair.
//
// Work split: decode (m <= 4) gives each thread a contiguous range of W rows, so every weight byte is read
// once from memory; prefill tiles W rows x tokens (16 x 64) so that a tile of weight rows stays in cache
// while a tile of tokens passes over it, and where a four-token kernel exists (f32, f16, bf16, q4_0, q8_0,
// q4_K, q5_K, q6_K) each weight block is unpacked once per four tokens. The result of a (row, token) pair
// never depends on the thread count or the path taken.
//
// Errors (unsupported type, k not whole blocks, strides too small) throw std::invalid_argument with a
// message naming the argument; no work is started then. Empty shapes are valid: n = 0 or m = 0 writes
// nothing, k = 0 writes zeros (the empty sum; a device's share of a split reduction axis can be empty).
//===----------------------------------------------------------------------===//
#ifndef TPC_RUNTIME_CPU_MATMUL_H
#define TPC_RUNTIME_CPU_MATMUL_H

#include "runtime/cpu/ThreadGroup.h"
#include "runtime/ggml/GGMLTypes.h"

#include <cstddef>
#include <cstdint>

namespace tpc::rt::cpu {

/// Arguments of matmul.
struct MatmulArgs {
  const void *w = nullptr;        ///< weight rows
  GGMLType wType = GGMLType::F32; ///< their element type
  int64_t n = 0;                  ///< rows of W = outputs per token
  int64_t k = 0;                  ///< row length (elements), a multiple of the type's block size
  size_t wRowStride = 0;          ///< bytes between consecutive W rows
  const float *x = nullptr;       ///< activations, m rows of k floats
  int64_t m = 0;                  ///< tokens
  size_t xRowStride = 0;          ///< floats between consecutive x rows
  float *y = nullptr;             ///< outputs, m rows of n floats
  size_t yRowStride = 0;          ///< floats between consecutive y rows
};

/// y = x . W^T (see the file comment).
void matmul(const MatmulArgs &args, ThreadGroup &group);

/// What matmulId and matmulIdGrouped share: a 3-D expert weight [nExperts][n][k] and the activation and
/// output rows the routed entries index (ggml's mul_mat_id).
struct ExpertMatmul {
  const void *w = nullptr;        ///< expert 0's first row
  GGMLType wType = GGMLType::F32; ///< element type
  int64_t n = 0, k = 0;           ///< rows per expert, row length
  size_t wRowStride = 0;          ///< bytes between rows of one expert
  size_t wExpertStride = 0;       ///< bytes between experts
  int64_t nExperts = 0;           ///< experts in w
  const float *x = nullptr;       ///< activation rows
  size_t xRowStride = 0;          ///< floats between x rows
  float *y = nullptr;             ///< output rows
  size_t yRowStride = 0;          ///< floats between y rows
};

/// Arguments of matmulId: one expert against a subset of the rows of x, so the executor can group the
/// tokens routed to each expert.
struct MatmulIdArgs : ExpertMatmul {
  int64_t expert = 0;             ///< the expert to use
  const int32_t *xRows = nullptr; ///< for i < count: row xRows[i] of x is input i
  const int32_t *yRows = nullptr; ///< for i < count: output i goes to row yRows[i] of y
  int64_t count = 0;              ///< number of rows routed to this expert
};

/// For i < count: y[yRows[i]] = W[expert] . x[xRows[i]]. Row indices must be >= 0 (checked).
void matmulId(const MatmulIdArgs &args, ThreadGroup &group);

/// Arguments of matmulIdGrouped: every routed (expert, input row, output row) entry of a mul_mat_id at
/// once, entries grouped by expert (each expert's entries contiguous).
struct MatmulIdGroupedArgs : ExpertMatmul {
  int64_t xRowCount = 0;            ///< rows of x (each is converted once, whatever uses it)
  const int32_t *experts = nullptr; ///< for i < count: the expert of entry i (grouped)
  const int32_t *xRows = nullptr;   ///< input row of entry i (< xRowCount)
  const int32_t *yRows = nullptr;   ///< output row of entry i
  int64_t count = 0;                ///< entries
};

/// For i < count: y[yRows[i]] = W[experts[i]] . x[xRows[i]], as one parallel job over the used experts'
/// rows (decode: a few rows per expert, where one job per expert would cost more in hand-offs than in
/// work) with every x row converted once. Results are bit-identical to matmulId's.
void matmulIdGrouped(const MatmulIdGroupedArgs &args, ThreadGroup &group);

} // namespace tpc::rt::cpu

#endif // TPC_RUNTIME_CPU_MATMUL_H
