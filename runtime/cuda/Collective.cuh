//===- Collective.cuh - the loopback all-reduce kernel -------------*- C++ -*-===//
//
// Several logical devices on one GPU cannot share an NCCL communicator (NCCL refuses duplicate GPUs), so
// their all-reduce is one kernel that reads every peer's buffer on the same GPU and writes the sum, added
// in rank order like the CPU backend's, to every peer's output. The session orders it against the peers'
// streams with events (record on each peer, wait on the launching stream, and back).
//===----------------------------------------------------------------------===//
#ifndef TPC_RUNTIME_CUDA_COLLECTIVE_CUH
#define TPC_RUNTIME_CUDA_COLLECTIVE_CUH

#include <cuda_runtime_api.h>

#include <cstdint>

namespace tpc::rt::cuda {

/// Most logical devices in one loopback group.
inline constexpr int kMaxLoopback = 16;

/// out[d][i] = sum over r of in[r][i] (r ascending) for every d; in[d] may equal out[d]. With bf16 the
/// CPU communicators' rule: out = bf16(sum over r of bf16(in[r][i])).
struct LoopbackArgs {
  const float *in[kMaxLoopback] = {};
  float *out[kMaxLoopback] = {};
  int n = 0;         ///< devices
  int64_t count = 0; ///< floats per buffer
  /// bf16 payloads (runtime/comm/Bf16Wire.h): each addend rounded to bf16, the f32 sum rounded again.
  bool bf16 = false;
};
void launchLoopbackAllReduce(const LoopbackArgs &a, cudaStream_t s);

} // namespace tpc::rt::cuda

#endif // TPC_RUNTIME_CUDA_COLLECTIVE_CUH
