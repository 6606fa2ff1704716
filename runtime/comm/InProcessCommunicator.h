//===- InProcessCommunicator.h - collectives in shared memory -----*- C++ -*-===//
//
// Every rank in one process, buffers in host memory (the CPU backend: N plan devices = N thread groups). A
// collective is a rendezvous: each call publishes its ranks' buffers, waits until all ranks have arrived,
// does its ranks' share of the work reading the peers' buffers directly, and waits again before anyone may
// reuse a buffer. Arrivals count ranks, not calls, so one thread may drive several ranks in one call (a
// group) while other threads drive one each.
//
// All-reduce of a small bucket (decode: one hidden vector per token) takes one barrier: each rank copies its
// addends into its staging slot of the call's parity, arrives, and sums every rank's slot in rank order into
// its own buffers (the same sum on every rank, computed N times, which costs less than two more barriers).
// Slots alternate between two parities: a rank can only overwrite a slot of parity p two small calls
// later, after the barrier of the call in between, which every peer reaches only once it has finished
// reading. A large bucket (prefill) is split instead: rank r owns elements [n·r/N, n·(r+1)/N) of each
// tensor, sums them over the ranks in rank order into its scratch, and after a barrier writes the sums into
// every rank's buffer (three barriers, each rank sums 1/N). Reduce-scatter sums rank r's part in rank order
// too, so results never depend on thread timing or on which path ran. All-gather and
// broadcast copy bytes between two barriers. With bf16 payloads (Bf16Wire.h) both all-reduce paths round
// each addend as it is read and the sum before it is written, so they compute the MPI communicator's bits.
// Waits spin briefly (collectives come every few hundred microseconds in decode), then sleep.
//===----------------------------------------------------------------------===//
#ifndef TPC_RUNTIME_COMM_INPROCESSCOMMUNICATOR_H
#define TPC_RUNTIME_COMM_INPROCESSCOMMUNICATOR_H

#include "runtime/comm/Communicator.h"

#include <atomic>
#include <condition_variable>
#include <mutex>

namespace tpc::rt::comm {

/// The in-process communicator of `n` ranks, all local (see the file comment).
class InProcessCommunicator final : public Communicator {
public:
  explicit InProcessCommunicator(int n);

  const char *name() const override { return "in-process"; }
  int size() const override { return n_; }
  std::vector<int> localRanks() const override;
  bool streamOrdered() const override { return false; }
  bool wholeOptional() const override { return true; }
  bool supportsPayload(Payload) const override { return true; }

  using Communicator::allGather;
  using Communicator::allReduce;
  using Communicator::barrier;
  using Communicator::broadcast;
  using Communicator::reduceScatter;
  Expected<void> allReduce(const std::vector<AllReduceEntry> &local, ElemType type = ElemType::F32) override;
  Expected<void> allGather(const std::vector<AllGatherEntry> &local, const AxisParts &layout,
                           ElemType type = ElemType::F32) override;
  Expected<void> reduceScatter(const std::vector<ReduceScatterEntry> &local, const AxisParts &layout,
                               ElemType type = ElemType::F32) override;
  Expected<void> broadcast(const std::vector<BroadcastEntry> &local, int root,
                           ElemType type = ElemType::F32) override;
  Expected<void> barrier(const std::vector<int> &ranks) override;
  void abort(const std::string &reason) override;
  bool aborted() const override { return aborted_.load(); }

private:
  /// Counts `ranks` arrivals and returns once all n have arrived; false when aborted (then at once).
  bool arrive(int ranks);
  /// Aborts with `why` and returns it as the error (a call that finds bad arguments must still release
  /// the peers that wait for its ranks).
  Error fail(const std::string &why);
  /// The error of an aborted call.
  Error abortedError();
  /// The one-barrier all-reduce of a small bucket (see the file comment).
  Expected<void> allReduceSmall(const std::vector<AllReduceEntry> &local);
  /// The split all-reduce of a large bucket.
  Expected<void> allReduceSplit(const std::vector<AllReduceEntry> &local);
  /// "" when every entry names a distinct rank of the world.
  std::string checkRanks(const std::vector<int> &ranks) const;
  /// "" when `layout` has one part per rank and the buffers of `rank` have its sizes.
  std::string checkLayout(const AxisParts &layout, int rank, int64_t partCount, int64_t wholeCount) const;

  int n_;
  std::mutex mu_;
  std::condition_variable cv_;
  alignas(64) std::atomic<int> arrived_{0};
  alignas(64) std::atomic<uint64_t> generation_{0};
  std::atomic<bool> aborted_{false};
  std::string reason_; ///< why abort() was called (under mu_)
  // What each rank published for the current collective.
  std::vector<const std::vector<Buffer> *> bucket_;
  std::vector<Buffer> first_, second_;
  std::vector<std::vector<float>> scratch_; ///< per rank: its share of the all-reduce sums
  /// All-reduce staging, per parity and rank: each tensor's count, and for a small bucket the rank's addends
  /// back to back.
  std::vector<std::vector<float>> stage_[2];
  std::vector<std::vector<int64_t>> stageCounts_[2];
  std::vector<uint64_t> reduceCalls_; ///< per rank: all-reduces it has made (the parity of its next slots)
};

} // namespace tpc::rt::comm

#endif // TPC_RUNTIME_COMM_INPROCESSCOMMUNICATOR_H
