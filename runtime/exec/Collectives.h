//===- Collectives.h - shared-memory collectives between device groups -*- C++ -*-===//
//
// On the CPU backend the N devices of a plan are N thread groups in one process. A collective step is a
// rendezvous: every device publishes its operands, waits at a barrier, does its share of the work reading
// the peers' buffers directly, and waits again before anyone may reuse a buffer. Sums always add the
// devices' addends in rank order, so results do not depend on thread timing and runs are reproducible.
//===----------------------------------------------------------------------===//
#ifndef TPC_RUNTIME_EXEC_COLLECTIVES_H
#define TPC_RUNTIME_EXEC_COLLECTIVES_H

#include "runtime/exec/Ops.h"

#include <atomic>
#include <condition_variable>
#include <mutex>
#include <vector>

namespace tpc::rt::exec {

/// The meeting point of n devices; each device calls every collective with its own rank, in the same order.
class Rendezvous {
public:
  explicit Rendezvous(int n);
  int size() const { return n_; }
  /// Blocks until all n devices arrive (returns at once after abort()).
  void barrier();
  /// Releases every waiting device and makes later barriers no-ops: a device that failed calls this so its
  /// peers do not wait for it forever (their results are then garbage, and the session reports the error).
  void abort();
  bool aborted() const { return aborted_.load(); }
  /// Sums each tensor over the devices in place (a bucket of several tensors is one rendezvous).
  void allReduce(int rank, const std::vector<TensorRef> &bufs);
  /// y (on every device) = concatenation of every device's x along `axis` (sizes may differ).
  void allGather(int rank, const TensorRef &x, const TensorRef &y, int64_t axis);
  /// y = this device's part along `axis` of the sum of every device's x; parts are the devices' y sizes
  /// in rank order.
  void reduceScatter(int rank, const TensorRef &x, const TensorRef &y, int64_t axis);

private:
  int n_;
  std::mutex mu_;
  std::condition_variable cv_;
  // Barrier state: arrivals count up; the last one resets the count and bumps the generation, which the
  // others spin on briefly (collectives come every few hundred microseconds in decode) before sleeping.
  alignas(64) std::atomic<int> arrived_{0};
  alignas(64) std::atomic<uint64_t> generation_{0};
  std::atomic<bool> aborted_{false};
  std::vector<const std::vector<TensorRef> *> bufs_;
  std::vector<const TensorRef *> x_, y_;
  std::vector<std::vector<float>> scratch_;
};

} // namespace tpc::rt::exec

#endif // TPC_RUNTIME_EXEC_COLLECTIVES_H
