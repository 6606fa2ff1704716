//===- HiddenDump.h - `tpc run --dump-hidden FILE` ----------------*- C++ -*-===//
//
// Writes every layer's residual-stream output (the hidden state after the layer) for every token a run
// evaluates, so that two runs (N devices vs 1, a plan vs its `--f32-reference` pass) can be compared layer
// by layer with scripts/compare-hidden.py, which shows where they part. The values are read on plan
// device 0 through the session's step observer (SessionOptions::stepObserver) right after the last step
// named blk.L.* runs: that step writes the layer's residual (the residual add, the layer-output scale, or
// at a fused boundary the all-reduce-and-norm whose first result is the summed residual), which is
// mirrored, whole, on every device after the layer's last all-reduce, so device 0's copy is the full
// state at any device count. Layers whose last step writes anything else (not f32, another width than
// the others) make bind() fail with a message naming the step.
//
// File format (little-endian): the 8 bytes "TPCHID01", then one record per (chunk, layer), the layers of
// a chunk in order, the chunks in order (a chunk is one pass over the plan: an evaluate() call, or a part
// of one longer than the plan's max_batch):
//   int32 layer   0-based; the state after that layer
//   int32 chunk   0-based index of the chunk
//   int32 rows    tokens of the chunk (one row per token, in the call's order)
//   int32 width   the model's embedding width
//   float32[rows * width], row-major
// A layer's rows over all calls are one row per evaluated token, in evaluation order (`tpc run`: the
// prompt's positions, then each fed token), the rows of --dump-logits.
//
// Usage:
//   HiddenDump hd(path);                          // throws Failure naming the flag when it cannot write
//   options.stepObserver = [&](int d, size_t i, const rt::Step &s, const auto &in, const auto &out) {
//     hd.observe(d, i, s, in, out);
//   };
//   ... open a session, hd.bind(session.plan()), evaluate ...
//   hd.finish();                                  // throws Failure when a write failed
//===----------------------------------------------------------------------===//
#ifndef TPC_TOOLS_TPC_HIDDENDUMP_H
#define TPC_TOOLS_TPC_HIDDENDUMP_H

#include "runtime/exec/Session.h"

#include <cstdint>
#include <cstdio>
#include <string>
#include <vector>

namespace tpc::cli {

/// N of a step named "blk.N.<...>", or -1 (the importers name every step of layer N so).
int64_t layerOfStep(const std::string &name);

class HiddenDump {
public:
  explicit HiddenDump(const std::string &path);
  ~HiddenDump();
  HiddenDump(const HiddenDump &) = delete;
  HiddenDump &operator=(const HiddenDump &) = delete;

  /// Finds each layer's last step on device 0; throws Failure when the plan has no blk.N steps.
  void bind(const rt::Plan &plan);
  /// The step observer: writes a record when `index` is a layer's last step on device 0.
  void observe(int device, size_t index, const rt::Step &step, const std::vector<rt::exec::TensorRef> &inputs,
               const std::vector<rt::exec::TensorRef> &outputs);
  /// Closes the file; throws Failure naming it when a write failed or a layer's state was not f32 rows of
  /// one width.
  void finish();
  int64_t records() const { return records_; }

private:
  std::string path_;
  FILE *f_ = nullptr;
  std::vector<int64_t> layerOfLastStep_; ///< by device-0 step index: the layer it ends, or -1
  int64_t width_ = -1;
  int64_t call_ = -1;
  int64_t records_ = 0;
  std::string error_; ///< the first failure seen on the device thread (reported by finish())
};

} // namespace tpc::cli

#endif // TPC_TOOLS_TPC_HIDDENDUMP_H
