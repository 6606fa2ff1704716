//===- CudaPlugin.h - what the CUDA plugin (libtpc_cuda.so) exports -*- C++ -*-===//
//
// The CUDA backend is a shared module that programs open with dlopen on first use (runtime/backends,
// CudaPluginLoader.h), so a CPU run of a CUDA build never maps cudart, cuBLAS or NCCL. This header is the
// whole contract between the module and the program that loads it; it includes no CUDA header, so the
// loader and `tpc` include it without the toolkit.
//
// Three C functions, looked up by name in this order:
//   tpc_cuda_plugin_abi()    its kCudaPluginAbi (a plain int: readable whatever the version)
//   tpc_cuda_plugin_build()  its cudaPluginBuildTag(version) (a C string)
//   tpc_cuda_plugin_api()    the CudaPluginApi table below
// The loader compares the first two with its own before it touches the table: the table passes C++ objects
// (Plan, SessionOptions, Session, Communicator) by reference, so both sides must agree on their layout.
// The build tag holds the project version and the sizes of those structs, which catches a plugin left
// over from an older build in most cases; kCudaPluginAbi is bumped by hand whenever the table changes.
//
// The module carries its own copy of the backend-neutral runtime (tpc_exec, tpc_comm, tpc_plan, with
// hidden symbols) and is never unloaded: sessions it made are destroyed through their virtual destructor.
//===----------------------------------------------------------------------===//
#ifndef TPC_RUNTIME_CUDA_CUDAPLUGIN_H
#define TPC_RUNTIME_CUDA_CUDAPLUGIN_H

#include "runtime/comm/Communicator.h"
#include "runtime/exec/Backend.h"

#include <array>
#include <memory>
#include <string>

namespace tpc::rt::cuda {

/// Bumped whenever CudaPluginApi or the meaning of one of its entries changes.
constexpr int kCudaPluginAbi = 1;

/// The bytes of NCCL's unique id (NCCL_UNIQUE_ID_BYTES), as rank 0 sends it to the other ranks.
using CudaPluginNcclId = std::array<char, 128>;

/// The project `version` and the layouts the table depends on, e.g. "tpc 0.1.0; Plan 880, SessionOptions
/// 200, ...". Each side passes the version its CMake gave it (TPC_PLUGIN_VERSION, on the two files only).
inline std::string cudaPluginBuildTag(const char *version) {
  return std::string("tpc ") + version + "; Plan " + std::to_string(sizeof(Plan)) + ", SessionOptions " +
         std::to_string(sizeof(SessionOptions)) + ", Session " + std::to_string(sizeof(Session)) +
         ", Backend " + std::to_string(sizeof(Backend)) + ", Communicator " +
         std::to_string(sizeof(comm::Communicator));
}

/// The module's entry points (kCudaPluginAbi 1). Errors are one line, as everywhere in the runtime.
struct CudaPluginApi {
  /// The "cuda" Backend; `hostCpu` (the CPU backend, which must outlive it) runs host-placed steps.
  std::unique_ptr<Backend> (*makeBackend)(const Backend &hostCpu);
  /// Visible CUDA GPUs (0 without a driver or a GPU).
  int (*deviceCount)();
  /// The PCI bus id of `gpu` (which ranks share a GPU; tools/tpc/GpuRanks.cpp).
  Expected<std::string> (*gpuBusId)(int gpu);
  /// A new NCCL unique id (rank 0 of a multi-process job).
  Expected<CudaPluginNcclId> (*ncclUniqueId)();
  /// This process's rank of an NCCL communicator over `size` ranks, on `gpu` (RankCommunicators.h).
  Expected<std::shared_ptr<comm::Communicator>> (*makeNcclRankCommunicator)(const CudaPluginNcclId &id,
                                                                            int rank, int size, int gpu);
  /// A rank's communicator through `host` on buffers staged via pinned memory (RankCommunicators.h).
  Expected<std::shared_ptr<comm::Communicator>> (*makeHostStagedCommunicator)(
      std::shared_ptr<comm::Communicator> host, int gpu);
};

} // namespace tpc::rt::cuda

#endif // TPC_RUNTIME_CUDA_CUDAPLUGIN_H
