//===- Nccl.h - NCCL communicators, loaded on first use ------------*- C++ -*-===//
//
// One NCCL communicator per GPU of a session (ncclCommInitAll: a single process drives every GPU), RAII,
// non-copyable (STYLE.md §5, cf. TensorRT-LLM's ncclCommunicator). libnccl.so.2 is opened with dlopen
// when a plan first needs it, so machines with one GPU (loopback collectives only) run without NCCL.
// Calls are batched in ncclGroupStart/End and enqueued on each device's stream: they are ordered against
// compute by the streams themselves, with no host synchronisation.
//===----------------------------------------------------------------------===//
#ifndef TPC_RUNTIME_CUDA_NCCL_H
#define TPC_RUNTIME_CUDA_NCCL_H

#include "runtime/plan/PlanIO.h"

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

  /// Sum-all-reduce of `count` floats per rank (in[r] may equal out[r]), each on streams[r], as one group.
  void allReduce(const std::vector<const float *> &in, const std::vector<float *> &out, int64_t count,
                 const std::vector<cudaStream_t> &streams);

private:
  NcclComms() = default;
  struct Api;
  std::unique_ptr<Api> api_;
  std::vector<void *> comms_;
};

} // namespace tpc::rt::cuda

#endif // TPC_RUNTIME_CUDA_NCCL_H
