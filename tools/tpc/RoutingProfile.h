//===- RoutingProfile.h - `tpc run --profile-routing FILE` --------*- C++ -*-===//
//
// Counts, per MoE layer, the tokens the router sends to each expert during a run, and writes them in the
// format `tpc compile --routing-profile FILE` reads (passes/AssignSplitAxes.cpp): `#` comments, then one
// line per layer, `blk.N: c0 c1 ...`, a count per (global) expert. The counts come from the routed ids the
// plan computes: the ids input of each layer's first mul_mat_id step on device 0 (the router's top-k, the
// same on every device), seen through the session's step observer (SessionOptions::stepObserver) while
// the step runs, since the arena slot holding them is reused by later layers.
//
// Usage:
//   RoutingCounter rc(plan);                    // throws Failure when the plan has no MoE layer
//   options.stepObserver = [&](int d, size_t i, const rt::Step &s, const auto &in, const auto &) {
//     rc.observe(d, i, s, in);
//   };
//   ... open a session with `options`, evaluate ...
//   rc.write("routing.txt");
//===----------------------------------------------------------------------===//
#ifndef TPC_TOOLS_TPC_ROUTINGPROFILE_H
#define TPC_TOOLS_TPC_ROUTINGPROFILE_H

#include "runtime/exec/Session.h"

#include <cstdint>
#include <string>
#include <vector>

namespace tpc::cli {

class RoutingCounter {
public:
  explicit RoutingCounter(const rt::Plan &plan);
  /// The step observer: counts the routed ids when `step` is a layer's first mul_mat_id on device 0.
  void observe(int device, size_t index, const rt::Step &step,
               const std::vector<rt::exec::TensorRef> &inputs);
  /// Writes the profile; throws Failure naming the file when it cannot.
  void write(const std::string &path) const;
  /// Tokens counted so far (by the first MoE layer).
  int64_t tokens() const { return tokens_; }

private:
  struct Layer {
    int64_t layer = 0;          ///< N of blk.N
    size_t step = 0;            ///< index of its first mul_mat_id step on device 0 (gate, up, down share ids)
    std::vector<double> counts; ///< per global expert
  };
  std::vector<Layer> layers_;
  int64_t tokens_ = 0;
};

} // namespace tpc::cli

#endif // TPC_TOOLS_TPC_ROUTINGPROFILE_H
