//===- Nccl.h - NCCL communicators, loaded on first use ------------*- C++ -*-===//
//
// One NCCL communicator per GPU of a session (ncclCommInitAll: a single process drives every GPU), RAII,
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

#include <cstdint>
#include <memory>
#include <vector>

namespace tpc::rt::cuda {

/// Communicators over distinct GPUs, rank r on gpus[r].
class NcclComms {
public:
  /// Loads NCCL and creates the communicators; the error names the library or the NCCL failure.
  static Expected<std::unique_ptr<NcclComms>> create(const std::vector<int> &gpus);
  ~NcclComms();
  NcclComms(const NcclComms &) = delete;
  NcclComms &operator=(const NcclComms &) = delete;

  /// ncclGroupStart / ncclGroupEnd.
  void groupStart();
  void groupEnd();
  /// Rank r's part of a sum-all-reduce of `count` floats (in may equal out), on `stream`.
  void allReduce(int rank, const float *in, float *out, int64_t count, cudaStream_t stream);
  /// Rank r's part of a broadcast of `bytes` from `root` (`send` is read on the root only), on `stream`.
  void broadcast(int rank, const void *send, void *recv, uint64_t bytes, int root, cudaStream_t stream);

private:
  NcclComms() = default;
  struct Api;
  std::unique_ptr<Api> api_;
  std::vector<void *> comms_;
};

} // namespace tpc::rt::cuda

#endif // TPC_RUNTIME_CUDA_NCCL_H
