//===- PlanSummary.h - human-readable facts about a plan ----------*- C++ -*-===//
//
// What `tpc inspect plan.bin` shows: the header, and per device its memory (weights, activations, the
// logits rows, KV per token and for a given context, by layer kind: full caches grow with the context,
// sliding-window caches are rings of window + max_batch positions) on the device side and, where the plan
// places anything there (--override-tensor, --no-kv-offload), on the host side, the weight bytes one decoded
// token reads, its op histogram and its collectives with the bytes they move for one token. Pure functions
// over a validated Plan, so the CLI and tests share them.
//===----------------------------------------------------------------------===//
#ifndef TPC_RUNTIME_PLAN_PLANSUMMARY_H
#define TPC_RUNTIME_PLAN_PLANSUMMARY_H

#include "runtime/plan/PlanFormat.h"

#include <string>
#include <vector>

namespace tpc::rt {

/// Per-device figures of a plan, split by side. Weights are the bytes of the side's slices, activations the
/// size of the side's activation arena for max_batch tokens (what a backend allocates), KV the bytes per
/// token of the side's caches. Without host placement the device figures are the whole device.
struct DeviceSummary {
  uint64_t weightBytes = 0, activationBytes = 0, kvBytesPerToken = 0; ///< device side
  uint64_t hostWeightBytes = 0, hostActivationBytes = 0, hostKvBytesPerToken = 0;
  /// The logits rows a call computes (max_output_rows, else max_batch tokens) (n_vocab floats each) that a backend keeps where the device returns
  /// logits (OUTPUT_LOGITS, device 0): outside the activation arena, 512 MiB for a 262k vocabulary.
  uint64_t logitsBytes = 0;
  /// kvBytesPerToken by layer kind (device side): the full caches', per token of context, and the
  /// sliding-window rings', per position they hold (window + max_batch, at most the context).
  uint64_t kvFullBytesPerToken = 0, kvWindowBytesPerPosition = 0;
  int kvFullLayers = 0, kvWindowLayers = 0;
  std::vector<int64_t> kvWindows; ///< the distinct windows of the sliding-window caches, ascending
  /// Recurrent (linear-attention) states: bytes per sequence (both sides; they do not grow with the
  /// context) and their layers.
  uint64_t recurrentBytesPerSequence = 0;
  int recurrentLayers = 0;
  size_t hostSteps = 0; ///< steps placed on the host (copies to the host included)
  /// Weight bytes the side's steps read to decode one token: each weight operand once per step reading it,
  /// except a get_rows table (only the looked-up rows) and mul_mat_id experts (k of E experts per token).
  /// The numerator of the decode roofline (`tpc run --bench`); KV reads, which grow with the context, are
  /// not in it.
  uint64_t decodeWeightBytes = 0, hostDecodeWeightBytes = 0;
  size_t steps = 0, collectives = 0;
  /// Matmuls every device computes whole (MatmulParams::replicated; devices of one process share their
  /// rows at prefill).
  size_t replicatedMatmuls = 0;
  uint64_t collectiveBytesPerToken = 0; ///< payload of this device's collectives for one token (on the wire)
  /// Pipeline plans: this device's stage and the bytes its Send / Recv steps move for one token (the
  /// hidden state at a stage boundary; the logits rows back to stage 0, counted per output row).
  int stage = 0;
  uint64_t sendBytesPerToken = 0, recvBytesPerToken = 0;
  std::vector<std::pair<std::string, size_t>> opCounts; ///< op name -> steps, most frequent first
};

/// The payload collective step `s` of `dev` moves for one token (its outputs' elements per token, or in
/// total for fixed-shape tensors, times 4, or times 2 for an all-reduce when `wire` is bf16; a fused
/// all-reduce + norm counts only its sum); 0 for other ops. DeviceSummary::collectiveBytesPerToken is the
/// sum over a device's steps, with the plan's commDtype.
uint64_t collectiveBytesPerToken(const DevicePlan &dev, const Step &s, CommDtype wire = CommDtype::F32);
/// The payload a Send or Recv step of `dev` moves for one token (its tensor's bytes per token); 0 for
/// other ops.
uint64_t transferBytesPerToken(const DevicePlan &dev, const Step &s);

/// The figures of every device, in rank order.
std::vector<DeviceSummary> summarizeDevices(const Plan &plan);

/// Bytes of device `d`'s KV caches on side `side` for `ctx` positions per sequence and `sequences`
/// sequences (kvPositions: rings for the sliding-window caches): what a session allocates.
uint64_t kvBytesFor(const Plan &plan, size_t d, int64_t ctx, int32_t sequences, Placement side);

/// One device's memory for a context of `ctx` positions per sequence: the one function every memory figure
/// comes from (`tpc inspect` text and --json, the pictures of --html/--svg, `tpc compile --report` and its
/// --json, `--fit`), so that they cannot disagree. KV counts each cache as kvBytesFor does (rings for the
/// sliding-window layers, one cell per sequence for recurrent states).
struct DeviceMemory {
  int64_t ctx = 0;
  uint64_t weightBytes = 0, kvBytes = 0, activationBytes = 0, logitsBytes = 0; ///< device side
  uint64_t hostWeightBytes = 0, hostKvBytes = 0, hostActivationBytes = 0;
  /// weights + KV + activations + logits rows: what the device allocates (what --fit holds to a budget).
  uint64_t totalBytes = 0;
  uint64_t hostTotalBytes = 0; ///< the host side's weights + KV + activations
};

/// The memory of every device for `ctx` positions (0: the plan's default context) and `sequences`
/// sequences, in rank order.
std::vector<DeviceMemory> memoryAt(const Plan &plan, int64_t ctx = 0, int32_t sequences = 1);

/// The model's blocks (`blk.N` layers) the plan runs: the distinct N of its step names (the embedding and
/// the output head are not blocks).
int64_t blockCount(const Plan &plan);

/// "512 B", "10.5 KiB", "3.66 MiB", "4.31 GiB".
std::string bytesStr(uint64_t b);

/// A multi-line text report (header, then one block per device) for a context of `ctx` tokens
/// (0: the plan's default).
std::string describePlan(const Plan &plan, int64_t ctx = 0);

} // namespace tpc::rt

#endif // TPC_RUNTIME_PLAN_PLANSUMMARY_H
