//===- MicroBatches.h - a call cut into micro-batches for a pipeline ----*- C++ -*-===//
//
// A pipeline plan's stages run one after another on a call: with the call cut into micro-batches, stage
// s + 1 works on micro-batch k while stage s works on micro-batch k + 1 (GPipe's schedule, forward only).
// A micro-batch is a contiguous run of the call's tokens, so every sequence keeps its order (the KV cache
// of micro-batch k is written before micro-batch k + 1 reads it on the same stage) and a batched decode of
// several sequences splits by sequence. Each micro-batch computes the call's output rows that fall in it,
// renumbered from its first token, and their logits go to the call's rows in order; one with none of them
// computes its last token's row (the output head runs on at least one row) and drops it.
//
// Usage:
//   for (const MicroBatch &m : splitMicroBatches(t, rows, r, 2)) run(tokens + m.first, m.t, m.rows, ...);
//===----------------------------------------------------------------------===//
#ifndef TPC_RUNTIME_EXEC_MICROBATCHES_H
#define TPC_RUNTIME_EXEC_MICROBATCHES_H

#include <cstdint>
#include <vector>

namespace tpc::rt::exec {

struct MicroBatch {
  int64_t first = 0, t = 0;  ///< tokens [first, first + t) of the call
  std::vector<int32_t> rows; ///< output rows, as indices into this micro-batch's tokens
  int64_t firstRow = 0;      ///< index of its first row among the call's rows (its logits' place)
  bool dropRow = false;      ///< rows is the stand-in row {t - 1}: its logits are not the caller's
};

/// Cuts a call of `t` tokens with output rows `rows[0..r)` (ascending token indices) into min(parts, t)
/// micro-batches of nearly equal size (parts < 2: one, the call itself).
std::vector<MicroBatch> splitMicroBatches(int64_t t, const int32_t *rows, int64_t r, int parts);

} // namespace tpc::rt::exec

#endif // TPC_RUNTIME_EXEC_MICROBATCHES_H
