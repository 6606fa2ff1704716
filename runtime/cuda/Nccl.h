//===- Nccl.h - NCCL communicators, loaded on first use ------------*- C++ -*-===//
//
// One NCCL communicator per GPU of a session (ncclCommInitAll: a single process drives every GPU), or the
// one communicator of a process that is one rank of a multi-process job (ncclCommInitRank from a unique
// id that rank 0 made and sent to the others, e.g. over MPI), RAII,
// non-copyable (STYLE.md §5, cf. TensorRT-LLM's ncclCommunicator). libnccl.so.2 is opened with dlopen
// when a plan first needs it, so machines with one GPU (loopback collectives only) run without NCCL.
// Calls are enqueued on each rank's stream, bracketed by groupStart/groupEnd when one thread issues the
// calls of several ranks (NCCL needs that to avoid a deadlock): they are ordered against compute by the
// streams themselves, with no host synchronisation. The comm::Communicator built on this is in
// Communicators.h. Failures throw CudaError (CudaCheck.h).
//===----------------------------------------------------------------------===//
#ifndef TPC_RUNTIME_CUDA_NCCL_H
#define TPC_RUNTIME_CUDA_NCCL_H

#include "runtime/support/Expected.h"

#include <cuda_runtime_api.h>

#include <array>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <vector>

namespace tpc::rt::cuda {

/// The bytes of an ncclUniqueId (NCCL_UNIQUE_ID_BYTES): what rank 0 sends to every rank.
constexpr size_t kNcclIdBytes = 128;
using NcclId = std::array<char, kNcclIdBytes>;

/// Communicators over distinct GPUs, rank r on gpus[r]; or this process's one rank of a job.
class NcclComms {
public:
  /// Loads NCCL and creates the communicators; the error names the library or the NCCL failure.
  static Expected<std::unique_ptr<NcclComms>> create(const std::vector<int> &gpus);
  /// Loads NCCL and makes a new unique id (rank 0 of a multi-process job; the others get it from rank 0).
  static Expected<NcclId> uniqueId();
  /// Rank `rank` of `size` on GPU `gpu`, joining the communicator of `id` (every rank of the job calls
  /// this with the same id; it returns when all have joined).
  static Expected<std::unique_ptr<NcclComms>> joinRank(const NcclId &id, int rank, int size, int gpu);
  ~NcclComms();
  NcclComms(const NcclComms &) = delete;
  NcclComms &operator=(const NcclComms &) = delete;

  /// ncclGroupStart / ncclGroupEnd.
  void groupStart();
  void groupEnd();
  /// Rank r's part (a rank this object holds: every rank for create(), its own for joinRank()) of a
  /// sum-all-reduce of `count` floats (in may equal out), on `stream`.
  void allReduce(int rank, const float *in, float *out, int64_t count, cudaStream_t stream);
  /// Rank r's part of a broadcast of `bytes` from `root` (`send` is read on the root only), on `stream`.
  void broadcast(int rank, const void *send, void *recv, uint64_t bytes, int root, cudaStream_t stream);

private:
  NcclComms() = default;
  struct Api;
  /// The library with its symbols, or the error.
  static Expected<std::unique_ptr<Api>> load(size_t gpus);
  void *commOf(int rank) const { return comms_[rank - firstRank_]; }
  std::unique_ptr<Api> api_;
  std::vector<void *> comms_;
  int firstRank_ = 0; ///< the rank of comms_[0]
};

} // namespace tpc::rt::cuda

#endif // TPC_RUNTIME_CUDA_NCCL_H
