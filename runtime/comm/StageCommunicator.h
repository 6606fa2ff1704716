//===- StageCommunicator.h - the communicator of a pipeline plan --*- C++ -*-===//
//
// A plan with S pipeline stages (Plan::stages) has N devices in S groups of N / S: stage s is ranks
// [s N/S, (s+1) N/S). Its collectives stay inside a stage and its Send/Recv steps cross between stages.
// StageCommunicator is the one Communicator such a session talks to, over the whole world of N ranks:
//   - a collective goes to the communicator of the stage its entries' ranks belong to (all of one stage),
//     with the ranks renumbered inside the stage (rank - s N/S); the AxisParts of a gather or scatter are
//     the stage's (CollectiveRunner builds them from the stage's devices);
//   - send/recv go to the point-to-point transport: in one process a mailbox per (sender, receiver)
//     (a send copies its buffer into the queue and returns, a receive waits for the next message), under
//     MPI the world communicator's send/recv (MPI point-to-point);
//   - broadcast and barrier go to the world communicator.
// A stage communicator may be null where this process has no rank of that stage (an MPI rank holds its
// own stage's only). abort() aborts them all and wakes every waiting receive.
//
// Usage:
//   auto comm = comm::StageCommunicator::inProcess(4, 2);   // 2 stages x 2 devices, all in this process
//   comm->allReduce(2, {{x, n}});       // on stage 1 (ranks 2, 3): stage 1's rank 0
//   comm->send(1, 3, {h, n});           // stage 0's device 1 -> stage 1's device 1
//===----------------------------------------------------------------------===//
#ifndef TPC_RUNTIME_COMM_STAGECOMMUNICATOR_H
#define TPC_RUNTIME_COMM_STAGECOMMUNICATOR_H

#include "runtime/comm/Communicator.h"

#include <atomic>
#include <condition_variable>
#include <deque>
#include <memory>
#include <mutex>

namespace tpc::rt::comm {

/// The communicator of a pipeline plan (see the file comment).
class StageCommunicator final : public Communicator {
public:
  /// `world`: every rank (broadcast, barrier; send/recv unless `mailbox`); `stages[s]`: stage s's
  /// communicator of world->size() / stages.size() ranks, or null where no local rank is in it. `mailbox`:
  /// send/recv between local ranks through this object's queues (every rank in this process).
  StageCommunicator(std::shared_ptr<Communicator> world, std::vector<std::shared_ptr<Communicator>> stages,
                    bool mailbox);
  /// Every rank in this process: in-process world and stage communicators and the mailbox.
  static std::shared_ptr<StageCommunicator> inProcess(int ranks, int stages);

  const char *name() const override { return "stages"; }
  int size() const override { return world_->size(); }
  std::vector<int> localRanks() const override { return world_->localRanks(); }
  bool streamOrdered() const override { return false; }
  bool wholeOptional() const override;

  using Communicator::allGather;
  /// The stages' communicators' payloads (all-reduces run inside a stage).
  bool supportsPayload(Payload p) const override;
  void setPayload(Payload p) override;
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
  Expected<void> send(int rank, int peer, Buffer buf, ElemType type = ElemType::F32) override;
  Expected<void> recv(int rank, int peer, Buffer buf, ElemType type = ElemType::F32) override;
  bool buffersSends() const override { return mailbox_ || world_->buffersSends(); }
  void abort(const std::string &reason) override;
  bool aborted() const override;

private:
  /// The stage communicator of `ranks` (all of one stage, local there) and the first rank of that stage;
  /// an error (which aborts) otherwise.
  Expected<std::pair<Communicator *, int>> stageOf(const std::vector<int> &ranks);
  /// Aborts with `why` and returns it as the error.
  Error fail(const std::string &why);

  std::shared_ptr<Communicator> world_;
  std::vector<std::shared_ptr<Communicator>> stages_;
  int perStage_ = 1;
  const bool mailbox_;
  std::mutex mu_;
  std::condition_variable cv_;
  std::atomic<bool> aborted_{false};
  std::string reason_;                                ///< why abort() was called (under mu_)
  std::vector<std::deque<std::vector<char>>> queues_; ///< [sender * n + receiver]: messages in order
};

} // namespace tpc::rt::comm

#endif // TPC_RUNTIME_COMM_STAGECOMMUNICATOR_H
