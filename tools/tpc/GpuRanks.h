//===- GpuRanks.h - the communicator of a CUDA rank of an MPI job --*- C++ -*-===//
//
// A CUDA rank runs its plan device on one GPU: `--gpus` (SessionOptions::ordinals) lists the GPUs to pick
// from, default every visible one, and local rank i takes entry i % count. The ranks then compare which
// physical GPU each took (host and PCI bus id): on distinct GPUs the plan's collectives go through NCCL,
// from a unique id rank 0 creates and broadcasts over MPI (`hostComm`), on the ranks' device streams; when
// two ranks share a GPU (NCCL refuses that), through MPI on host-staged buffers (device -> pinned host ->
// MPI -> device; runtime/cuda/RankCommunicators.h), slower and not capturable in a CUDA graph, but it keeps
// the multi-process GPU path testable on a one-GPU machine. Every rank takes the same choice. Every rank
// must call this (it exchanges data with the others). Built with CUDA, not yet run on a GPU; and the CUDA
// session still opens only whole plans (SessionOptions::devices must name every device), so a CUDA rank
// is refused at open with that session's message until it opens one device.
//===----------------------------------------------------------------------===//
#ifndef TPC_TOOLS_TPC_GPURANKS_H
#define TPC_TOOLS_TPC_GPURANKS_H

#include "runtime/comm/Communicator.h"
#include "runtime/comm/MpiWorld.h"
#include "runtime/exec/Session.h"

#include <memory>
#include <string>

namespace tpc::cli {

/// The communicator a CUDA rank's session uses, and how it moves data ("NCCL", "MPI, host-staged").
struct GpuRankComm {
  std::shared_ptr<rt::comm::Communicator> comm;
  std::string via;
};

/// Picks this rank's GPU (sets options.ordinals to it) and makes its communicator (see the file comment).
/// `hostComm` is an MPI communicator of the ranks (its broadcast carries NCCL's id; the host-staged
/// communicator runs on it). The error is one line without the rank (the caller adds it); every rank gets
/// an error when one rank fails before NCCL starts; a rank that fails to join NCCL ends the job.
Expected<GpuRankComm> gpuRankCommunicator(const rt::comm::MpiWorld &world,
                                          std::shared_ptr<rt::comm::Communicator> hostComm, const rt::Plan &plan,
                                          rt::SessionOptions &options);

} // namespace tpc::cli

#endif // TPC_TOOLS_TPC_GPURANKS_H
