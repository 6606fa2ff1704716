//===- Collectives.h - a plan's collective steps, written once ----*- C++ -*-===//
//
// Every backend runs the plan's collective steps through CollectiveRunner: it binds the step's operands,
// and the runner composes the step from the session's Communicator and three kernels the backend provides
// (CollectiveKernels), so the semantics of each collective op live here only:
//   AllReduce         out_i = in_i, then the bucket of outs summed in place (one communicator call);
//   AllReduceRmsNorm  y = x + r on device 0 (the residual, added once) and y = x elsewhere; y summed;
//                     n = rms_norm(y) (* w) on every device; with bf16 payloads (Communicator::payload,
//                     runtime/comm/Bf16Wire.h) x is summed in place instead and y = x + r on every device
//                     afterwards, so the residual never crosses the wire and keeps f32 precision;
//   ReduceScatter     the communicator's reduce-scatter, AllGather its all-gather, with every device's
//                     part size along the axis taken from the plan (a process running one device still
//                     knows its peers' sizes, which MPI and NCCL need).
// In a pipeline plan (Plan::stages > 1) a collective meets the devices of one stage: the parts are the
// stage's, and the communicator (comm::StageCommunicator) routes the call to that stage's ranks.
// A call covers one or more local devices at the same collective: the CPU backend calls from each
// device's thread with one, a GPU backend from its one thread with all of its devices; the kernels and
// the communicator then see every local device's work in order (all adds, one sum, all norms).
//===----------------------------------------------------------------------===//
#ifndef TPC_RUNTIME_EXEC_COLLECTIVES_H
#define TPC_RUNTIME_EXEC_COLLECTIVES_H

#include "runtime/comm/Communicator.h"
#include "runtime/exec/Tensor.h"

#include <vector>

namespace tpc::rt::exec {

/// What the compositions need from a backend, on one device's bound operands in the backend's memory.
/// `rank` is the plan device, so one object may serve several local devices (and pick their streams).
class CollectiveKernels {
public:
  virtual ~CollectiveKernels() = default;
  /// y = x; nothing when y is x.
  virtual void copy(int rank, const TensorRef &x, const TensorRef &y) = 0;
  /// y = a + b (equal shapes; y may be a or b).
  virtual void add(int rank, const TensorRef &a, const TensorRef &b, const TensorRef &y) = 0;
  /// y = rms_norm(x) (* w when given) over the last axis.
  virtual void rmsNorm(int rank, const TensorRef &x, const TensorRef *w, const TensorRef &y, float eps) = 0;
};

/// One local device's part of a collective call.
struct CollectiveCall {
  int rank = 0;    ///< the plan device
  size_t step = 0; ///< index of its collective step in the device's step list
  const std::vector<TensorRef> *in = nullptr, *out = nullptr; ///< the step's bound operands
  void *stream = nullptr; ///< stream-ordered communicators: the device's queue
  /// An all-gather whose whole nothing on this device reads (the caller takes device 0's logits): passed
  /// as a null whole where the communicator allows it (Communicator::wholeOptional).
  bool wholeUnused = false;
};

/// Runs collective steps (see the file comment).
class CollectiveRunner {
public:
  /// `plan` (validated, checkCollectives passed), `comm` and `kernels` must outlive the runner.
  CollectiveRunner(const Plan &plan, comm::Communicator &comm, CollectiveKernels &kernels);

  /// Runs the collective the calls are at (the same step of the plan's collective sequence on each of
  /// their devices) for `t` tokens and `rows` output rows. An error (the communicator's, or calls that
  /// disagree) is one line.
  Expected<void> run(const std::vector<CollectiveCall> &calls, int64_t t, int64_t rows);

  comm::Communicator &communicator() const { return comm_; }

private:
  /// Every device's part size along `axis` of the k-th collective at t tokens and `rows` output rows
  /// (gather: inputs; scatter: outputs), and outer/inner from device `rank`'s whole.
  comm::AxisParts partsOf(size_t k, int rank, int64_t axis, int64_t t, int64_t rows) const;
  /// AllReduceRmsNorm with bf16 payloads (see the file comment).
  Expected<void> allReduceRmsNormBf16(const std::vector<CollectiveCall> &calls);

  const Plan &plan_;
  comm::Communicator &comm_;
  CollectiveKernels &kernels_;
  std::vector<std::vector<size_t>> steps_; ///< [device][k]: index of the device's k-th collective step
  std::vector<std::vector<int>> ordinal_;  ///< [device][step]: k for a collective step, else -1
};

} // namespace tpc::rt::exec

#endif // TPC_RUNTIME_EXEC_COLLECTIVES_H
