//===- RankCommunicators.h - a CUDA rank's communicators in a multi-process job -*- C++ -*-===//
//
// comm::Communicator implementations for a process that runs one plan device on one GPU as one rank of a
// job (`mpirun -np N tpc run --backend cuda`): device buffers, stream-ordered like the session's own
// communicators (Communicators.h), every call carrying exactly this process's rank. No MPI here: the
// launcher glue (tools/tpc/GpuRanks.cpp) sends NCCL's unique id over MPI and hands in the MPI host
// communicator.
//   - NCCL rank: the ranks sit on distinct GPUs (one or several hosts); ncclCommInitRank from the id rank 0
//     made (Nccl.h). Sums in NCCL's order (ring / tree: not the in-process rank order, so results differ
//     from a one-process CUDA run in the last bits). All-gather and reduce-scatter of uneven parts are
//     built on the sum as in Communicators.h (exact: the padding adds zeros).
//   - host-staged: two ranks share one GPU (NCCL refuses that). Each call waits for the rank's stream,
//     copies the buffers to pinned host memory, runs the host communicator's collective (MPI), copies the
//     result back on the stream and waits for it: blocking and slower, so it cannot sit inside a CUDA
//     graph capture, but it is the path a one-GPU machine can test, with MPI's rank-order sums.
// Staging memory (the NCCL rank's gather/scatter buffer, the host-staged pinned buffer) grows to the
// largest call on first need.
//
// Usage (in the launcher glue):
//   auto id = rank == 0 ? cuda::NcclComms::uniqueId() : ...;       // then broadcast it over MPI
//   auto c = cuda::makeNcclRankCommunicator(*id, rank, size, gpu);   // or:
//   auto c = cuda::makeHostStagedCommunicator(mpiComm, gpu);
//   opts.comm = std::move(*c);  opts.devices = {rank};
//===----------------------------------------------------------------------===//
#ifndef TPC_RUNTIME_CUDA_RANKCOMMUNICATORS_H
#define TPC_RUNTIME_CUDA_RANKCOMMUNICATORS_H

#include "runtime/comm/Communicator.h"
#include "runtime/cuda/Nccl.h"

#include <memory>
#include <string>

namespace tpc::rt::cuda {

/// Rank `rank` of `size` on GPU `gpu`, joining NCCL communicator `id` (every rank calls this with the same
/// id; it returns when all have joined). The error names the library or the NCCL failure.
Expected<std::shared_ptr<comm::Communicator>> makeNcclRankCommunicator(const NcclId &id, int rank, int size,
                                                                     int gpu);

/// This process's rank of `host` (a blocking host-buffer communicator with one local rank, e.g. MPI) on
/// GPU `gpu`, through pinned host buffers.
Expected<std::shared_ptr<comm::Communicator>>
makeHostStagedCommunicator(std::shared_ptr<comm::Communicator> host, int gpu);

/// The PCI bus id of GPU `gpu` ("0000:3b:00.0"): ranks compare it (with the host name) to find ranks that
/// share a GPU.
Expected<std::string> gpuBusId(int gpu);

} // namespace tpc::rt::cuda

#endif // TPC_RUNTIME_CUDA_RANKCOMMUNICATORS_H
