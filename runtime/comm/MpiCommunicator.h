//===- MpiCommunicator.h - the plan's collectives between MPI ranks -*- C++ -*-===//
//
// One rank per process (rank = plan device = MPI rank), host buffers, blocking calls: the communicator of
// a CPU rank of `mpirun -np N tpc run plan.bin`, and the host side of a GPU rank whose collectives are
// staged through host memory. Every call carries exactly this process's rank.
//
// Algorithms (all on a duplicate of the world communicator):
//   all-reduce     Sums::RankOrder (the default): the in-process communicator's algorithm over the
//                  network: rank r owns elements [n·r/N, n·(r+1)/N) of the bucket; MPI_Alltoallv brings
//                  every rank's addends of that share to rank r, which sums them in rank order
//                  (x0 + x1 + ...), and MPI_Allgatherv hands the sums back. Bit for bit the in-process
//                  result at any N, with the traffic of a ring all-reduce (2·(N-1)/N of the bucket per
//                  rank) in two steps. Sums::Native: one MPI_Allreduce, whose summation order is Open
//                  MPI's algorithm's (it may group (x0 + x2) + x1 at N = 3; the same on every rank, but
//                  not the in-process bits). At N = 2 both are x0 + x1 (one IEEE addition is commutative),
//                  so N = 2 always takes the single MPI_Allreduce. A bucket of several tensors is packed
//                  into one buffer: one collective per bucket, as in-process.
//                  bf16 payloads (Bf16Wire.h): the rank-order algorithm on bf16 addends (MPI_UINT16_T),
//                  each share summed in f32 and rounded, MPI_Allgatherv of the bf16 sums: half the bytes,
//                  and the in-process communicator's bits. At 2 ranks, and for buckets of at most 16384
//                  elements, one MPI_Allgather of the bf16 addends instead, each rank summing all of them
//                  (one message step for decode; the same bits, and at 2 ranks the same bytes).
//   reduce-scatter MPI_Alltoallv of each rank's slices of the others' parts, summed in rank order (exact).
//   all-gather     MPI_Allgatherv, straight into the whole when outer == 1, else through a staging buffer.
//   broadcast      MPI_Bcast; barrier MPI_Barrier.
// Counts are MPI ints: a collective of more than 2^31 - 1 elements is refused with an error.
//
// Failures: an MPI error is the call's one-line error and aborts the communicator. abort() fails this
// process's later calls but cannot release a peer that waits inside MPI for this rank: a rank that stops
// working with its peers must end the job (MpiWorld::abortJob), which the launcher turns into the end of
// every rank.
//
// Usage:
//   auto world = comm::MpiWorld::init();
//   auto comm = std::make_shared<comm::MpiCommunicator>(*world);
//   opts.devices = {(*world)->rank()};  opts.comm = comm;   // one plan device per rank
//===----------------------------------------------------------------------===//
#ifndef TPC_RUNTIME_COMM_MPICOMMUNICATOR_H
#define TPC_RUNTIME_COMM_MPICOMMUNICATOR_H

#include "runtime/comm/Communicator.h"
#include "runtime/comm/MpiWorld.h"

#include <atomic>
#include <memory>
#include <mutex>

namespace tpc::rt::comm {

/// How an all-reduce over 3 or more ranks sums (see the file comment).
enum class MpiSums : uint8_t { RankOrder, Native };

/// The collectives of one MPI rank (see the file comment).
class MpiCommunicator final : public Communicator {
public:
  /// Over `world`'s communicator (duplicated, so that tpc's collectives never match other traffic); keeps
  /// `world` alive. A failed duplication leaves the communicator aborted (every call then says why).
  explicit MpiCommunicator(std::shared_ptr<MpiWorld> world, MpiSums sums = MpiSums::RankOrder);
  /// Over the world's ranks that pass the same `group` (MPI_Comm_split, world order; every rank of the
  /// world must construct one): a pipeline stage's communicator. Ranks are then the group's.
  MpiCommunicator(std::shared_ptr<MpiWorld> world, int group, MpiSums sums);
  ~MpiCommunicator() override;

  const char *name() const override { return "mpi"; }
  int size() const override { return size_; }
  std::vector<int> localRanks() const override { return {rank_}; }
  bool streamOrdered() const override { return false; }
  MpiSums sums() const { return sums_; }
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
  /// Point to point (tag 0; messages between two ranks arrive in order). A send copies the bytes and
  /// starts an MPI_Isend, so it returns at once (buffersSends); completed sends are reaped by later sends
  /// and the destructor waits for the rest. A receive is MPI_Recv.
  Expected<void> send(int rank, int peer, Buffer buf, ElemType type = ElemType::F32) override;
  Expected<void> recv(int rank, int peer, Buffer buf, ElemType type = ElemType::F32) override;
  bool buffersSends() const override { return true; }
  void abort(const std::string &reason) override;
  bool aborted() const override { return aborted_.load(); }

private:
  /// "" when `ranks` is exactly this process's rank and the communicator was not aborted.
  std::string checkCall(const char *what, const std::vector<int> &ranks);
  /// Aborts with "<what>: <why>" and returns it as the error.
  Error fail(const char *what, const std::string &why);
  /// Returns the error for an MPI return code (and aborts), or success.
  Expected<void> mpiCheck(const char *what, int rc);
  /// The rank-order sum of `n` floats at `x` (see the file comment).
  Expected<void> rankOrderSum(float *x, int64_t n);
  /// The same with bf16 payloads (see the file comment).
  Expected<void> rankOrderSumBf16(float *x, int64_t n);

  std::shared_ptr<MpiWorld> world_;
  std::shared_ptr<void> comm_; ///< MPI_Comm
  const MpiSums sums_;
  int rank_ = 0, size_ = 1; ///< in this communicator (the world's, or a group's)
  std::atomic<bool> aborted_{false};
  std::mutex mu_;
  std::string reason_;
  // Scratch reused across calls (decode calls the same sizes every step): packed bucket, all-to-all
  // receive blocks, all-gather staging.
  std::vector<float> pack_, recv_;
  std::vector<char> stage_;
  std::vector<uint16_t> wire_; ///< bf16 payloads: the packed addends (then sums) and the received blocks
  struct PendingSend; ///< an MPI_Isend in flight and its copy of the bytes (MpiCommunicator.cpp)
  std::vector<std::unique_ptr<PendingSend>> pending_;
};

} // namespace tpc::rt::comm

#endif // TPC_RUNTIME_COMM_MPICOMMUNICATOR_H
