//===- ReplicaShares.h - replicated matmuls split among in-process devices -*- C++ -*-===//
//
// A replicated matmul (MatmulParams::replicated: its weight whole on every device, its input and result
// mirrored, e.g. an MQA model's K/V projection, which one KV head keeps whole) is the same product on every
// device. Where all devices run in this process, each computes a share of the weight's rows (whole 32-row
// panels) into a scratch and an all-gather fills every device's output: at a 512-token prefill of Gemma 3
// 270M on two devices that is 11% of a device's matmul work saved for two ~0.1 ms gathers per layer.
// Below kShareMinTokens (decode, small batches) the product takes microseconds and the gather's
// rendezvous would cost as much, so every device computes it whole, as the plan says. The results are the
// same bytes either way: a row's product does not depend on which rows share its call.
//===----------------------------------------------------------------------===//
#ifndef TPC_RUNTIME_CPU_REPLICASHARES_H
#define TPC_RUNTIME_CPU_REPLICASHARES_H

#include "runtime/comm/Communicator.h"
#include "runtime/exec/Tensor.h"
#include "runtime/plan/PlanFormat.h"

#include <cstdint>
#include <utility>
#include <vector>

namespace tpc::rt::cpu {

/// Tokens from which a replicated matmul is shared.
inline constexpr int64_t kShareMinTokens = 16;

class ReplicaShares {
public:
  /// `comm` null: never share (devices in other processes, or one device).
  ReplicaShares(comm::Communicator *comm, int rank, int devices) : comm_(comm), rank_(rank), devices_(devices) {}

  /// True when `s` is a replicated matmul this device shares at `t` tokens.
  bool shares(const Step &s, int64_t t) const;

  /// Points the replicated matmuls among `steps` (operands as bound: in[j] = {x, w}, out[j] = {y}) at this
  /// device's rows of their weights and a scratch output; the whole outputs are remembered for gather().
  void prepare(const std::vector<const Step *> &steps, std::vector<std::vector<exec::TensorRef>> &in,
               std::vector<std::vector<exec::TensorRef>> &out, int64_t t);

  /// Gathers what prepare() shared into the whole outputs and puts the operands back as bound. Every
  /// device calls it after the same steps (the communicator pairs the k-th gathers). `written` gets the
  /// whole outputs.
  Expected<void> gather(std::vector<std::vector<exec::TensorRef>> &in, std::vector<std::vector<exec::TensorRef>> &out,
                        std::vector<exec::TensorRef> &written);

  /// Rows [r0, r1) of an n-row weight that device `rank` of `devices` computes: 32-row panels spread
  /// evenly, the first devices taking one more where they do not divide.
  static std::pair<int64_t, int64_t> rowsOf(int64_t n, int rank, int devices);

private:
  struct Shared {
    size_t member;
    exec::TensorRef weight, whole; ///< as bound
    comm::AxisParts layout;
    float *part;
  };
  comm::Communicator *comm_;
  int rank_, devices_;
  std::vector<Shared> pending_;
  std::vector<float> scratch_;
};

} // namespace tpc::rt::cpu

#endif // TPC_RUNTIME_CPU_REPLICASHARES_H
