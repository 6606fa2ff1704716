//===- Communicators.h - the CUDA backend's stream-ordered communicators -*- C++ -*-===//
//
// comm::Communicator implementations for one process that drives every rank of a plan on GPUs (the CUDA
// session): device buffers, work enqueued on each entry's stream (a cudaStream_t), ordered against compute
// by the streams and events, never by a host sync. Every call must cover all ranks at once (a group call),
// which is what NCCL's ncclGroupStart/End and the loopback kernel need; a partial call is an error.
//   - loopback: several logical devices on one GPU (NCCL refuses duplicate GPUs in one communicator). The
//     sum is one kernel (Collective.cuh) that adds the ranks' buffers in rank order, like the CPU's
//     in-process communicator, launched on rank 0's stream after every peer's stream has reached the call
//     (events), and the peers wait for it.
//   - nccl: one rank per distinct GPU, ncclCommInitAll (Nccl.h, loaded with dlopen); sums in NCCL's order.
// Only f32 sums. bf16 all-reduce payloads (--comm-dtype bf16, runtime/comm/Bf16Wire.h): the loopback kernel applies
// the CPU communicators' rule with the same rounding function (the same bits); nccl refuses them (supportsPayload;
// its own bf16 sum adds in bf16, in ring order: an exact one would all-gather the bf16 addends and sum them in f32
// in a kernel, not built yet). All-reduce sums in place. All-gather and reduce-scatter are built on the sum, so
// both implementations share them: all-gather zeroes each rank's whole, writes its part at its offset and sums the
// wholes in place (exact: the padding adds zeros); reduce-scatter sums the wholes into each rank's staging buffer
// and keeps its part. A part goes through the staging buffer before its whole is zeroed, since a plan may place it
// inside the whole. Staging buffers are allocated when the communicator is made, sized by the caller (the largest
// reduce-scatter whole / all-gather part of each rank); a call that needs more is an error. Broadcast copies
// bytes of any element type.
//
// Usage (the CUDA session, every rank's stream in one call):
//   auto c = makeLoopbackCommunicator(gpu, ranks, stageBytes);   // or makeNcclCommunicator(gpus, stageBytes)
//   if (!c) fail(c.message());
//   (*c)->allReduce({{0, {{y0, n}}, stream0}, {1, {{y1, n}}, stream1}});
//===----------------------------------------------------------------------===//
#ifndef TPC_RUNTIME_CUDA_COMMUNICATORS_H
#define TPC_RUNTIME_CUDA_COMMUNICATORS_H

#include "runtime/comm/Communicator.h"

#include <cstdint>
#include <memory>
#include <vector>

namespace tpc::rt::cuda {

/// `ranks` logical devices on GPU `gpu` (1..kMaxLoopback ranks). stageBytes[r]: rank r's staging buffer.
Expected<std::unique_ptr<comm::Communicator>>
makeLoopbackCommunicator(int gpu, int ranks, const std::vector<uint64_t> &stageBytes);

/// Rank r on GPU gpus[r] (distinct GPUs), over NCCL. The error names the library or the NCCL failure.
Expected<std::unique_ptr<comm::Communicator>> makeNcclCommunicator(const std::vector<int> &gpus,
                                                                   const std::vector<uint64_t> &stageBytes);

} // namespace tpc::rt::cuda

#endif // TPC_RUNTIME_CUDA_COMMUNICATORS_H
